import Foundation
import PushCrypto

/// One emulated browser subscription: the key pair and auth secret a browser would keep (RFC 8291 §2), and
/// the endpoint path at the emulator's push service.
public struct WebPushEmulatorSubscription: Sendable {
    /// The subscription id: 1...64 characters of `A-Z a-z 0-9 - _`; its prefix picks the push service's
    /// answer (docs/emulator.md).
    public var id: String
    /// The user agent's private key (only the emulator and tests hold it).
    public var privateKey: P256PrivateKey
    /// 16 bytes.
    public var authSecret: [UInt8]

    /// `subscriptions.web_p256dh`: base64url of the 65-byte uncompressed public point.
    public var p256dh: String { Base64URL.encode(privateKey.publicKey.x963Representation) }
    /// `subscriptions.web_auth`: base64url of the 16-byte auth secret.
    public var auth: String { Base64URL.encode(authSecret) }
    /// The endpoint `:path`, `/wpush/<id>`.
    public var path: String { WebPushEmulator.pathPrefix + id }

    /// `subscriptions.token`: `<origin>/wpush/<id>`, `origin` like `https://localhost:8443` (no trailing `/`).
    public func endpoint(origin: String) -> String { origin + path }
}

/// Deterministic emulated subscriptions: a pure function from (seed, id) to a key pair and auth secret, so
/// a test or the demo can insert `web_p256dh` / `web_auth` rows the emulator started with the same seed can
/// decrypt.
///
/// Derivation (HKDF-SHA256, RFC 5869): `d = HKDF(ikm: UTF-8(seed), salt: "pushizo-webpush-emulator",
/// info: "p256:" id [":" n], 32)`, the first `n = 0, 1, ...` whose scalar is a valid P-256 private key
/// (`1 <= d < order`; `n` is left out of `info` when 0); `auth = HKDF(same ikm and salt, info: "auth:" id,
/// 16)`. The public key is `d * G`.
public struct WebPushEmulatorSubscriptions: Sendable {
    public let seed: String

    public init(seed: String) { self.seed = seed }

    /// - Throws: `CryptoError` `.invalidInput` for an id outside `[A-Za-z0-9_-]{1,64}`.
    public func subscription(id: String) throws -> WebPushEmulatorSubscription {
        guard Self.isValidID(id) else {
            throw CryptoError(code: .invalidInput, message: "an emulator subscription id is 1...64 characters of A-Z a-z 0-9 - _")
        }
        let ikm = Array(seed.utf8)
        let salt = Array("pushizo-webpush-emulator".utf8)
        let auth = try HKDFSHA256.deriveKey(inputKeyMaterial: ikm, salt: salt, info: Array("auth:\(id)".utf8), length: 16)
        var attempt = 0
        while true {
            let info = attempt == 0 ? "p256:\(id)" : "p256:\(id):\(attempt)"
            let scalar = try HKDFSHA256.deriveKey(inputKeyMaterial: ikm, salt: salt, info: Array(info.utf8), length: 32)
            // A scalar of 0 or >= the group order is refused by OpenSSL (chance about 2^-32): take the next one.
            if let key = try? P256PrivateKey(pem: Self.pkcs8PEM(scalar: scalar)) {
                return WebPushEmulatorSubscription(id: id, privateKey: key, authSecret: auth)
            }
            attempt += 1
            if attempt > 16 { throw CryptoError(code: .invalidKey, message: "no valid P-256 scalar derived") }
        }
    }

    static func isValidID(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count) && id.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                true
            default: false
            }
        }
    }

    /// PKCS#8 (RFC 5208) around an RFC 5915 ECPrivateKey holding only the scalar: OpenSSL computes the
    /// public point `d * G` when it loads a key without one.
    static func pkcs8PEM(scalar: [UInt8]) -> String {
        precondition(scalar.count == 32)
        let ecPrivateKey: [UInt8] = [0x30, 0x25, 0x02, 0x01, 0x01, 0x04, 0x20] + scalar
        let algorithm: [UInt8] = [
            0x30, 0x13,
            0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,  // id-ecPublicKey
            0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07,  // prime256v1
        ]
        let der: [UInt8] = [0x30, 0x41, 0x02, 0x01, 0x00] + algorithm + [0x04, 0x27] + ecPrivateKey
        let base64 = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN PRIVATE KEY-----\n\(base64)\n-----END PRIVATE KEY-----\n"
    }
}
