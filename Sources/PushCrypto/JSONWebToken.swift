import Foundation

/// A value in a JWT header or claims set. PushCrypto does not depend on `DeliveryCore`'s `JSONValue`;
/// provider tokens only need strings and integers (`alg`, `kid`, `iss`, `iat`, `exp`, `aud`, `sub`).
public enum JWTValue: Sendable, Hashable, Codable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case string(String)
    case int(Int64)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .int(number)
        } else {
            self = .string(try container.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let text): try container.encode(text)
        case .int(let number): try container.encode(number)
        }
    }
}

/// Compact JWS (RFC 7515 §7.1) JSON Web Tokens (RFC 7519), ES256 only (RFC 7518 §3.4): what APNs provider
/// tokens ("Establishing a token-based connection to APNs") and VAPID (RFC 8292) use.
public enum JSONWebToken {
    /// Signs a token from a header and claims given as maps. `alg` is always `ES256` (a header `alg` entry
    /// is overwritten). Members are serialized compactly with sorted keys, so equal inputs give equal
    /// signing inputs.
    /// - Returns: `base64url(header) "." base64url(claims) "." base64url(R || S)`.
    /// - Throws: `CryptoError` `.signingFailed`.
    public static func signES256(header: [String: JWTValue], claims: [String: JWTValue], key: P256PrivateKey) throws -> String {
        var fullHeader = header
        fullHeader["alg"] = .string("ES256")
        return try signES256(headerJSON: serialize(fullHeader), claimsJSON: serialize(claims), key: key)
    }

    /// Signs a token whose header and claims are given as already-serialized UTF-8 JSON objects. The caller
    /// is responsible for the header naming `"alg":"ES256"`.
    /// - Throws: `CryptoError` `.signingFailed`.
    public static func signES256(headerJSON: [UInt8], claimsJSON: [UInt8], key: P256PrivateKey) throws -> String {
        let signingInput = Base64URL.encode(headerJSON) + "." + Base64URL.encode(claimsJSON)
        let signature = try key.signES256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// Splits a compact JWS into its decoded parts without checking anything but the encoding.
    /// Verify with `P256PublicKey.verifyES256(signature:for: signingInput)` before trusting the claims.
    /// - Returns: the header and claims JSON bytes, the signing input (the ASCII bytes of
    ///   `base64url(header) "." base64url(claims)`) and the raw signature bytes.
    /// - Throws: `CryptoError` `.invalidEncoding` when the token does not have three base64url parts.
    public static func decode(_ token: String) throws -> (header: [UInt8], claims: [UInt8], signingInput: [UInt8], signature: [UInt8]) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw CryptoError(code: .invalidEncoding, message: "a compact JWS has 3 dot-separated parts, this has \(parts.count)")
        }
        guard let header = Base64URL.decode(String(parts[0])), !header.isEmpty else {
            throw CryptoError(code: .invalidEncoding, message: "the JWS header is not base64url")
        }
        guard let claims = Base64URL.decode(String(parts[1])) else {
            throw CryptoError(code: .invalidEncoding, message: "the JWS payload is not base64url")
        }
        guard let signature = Base64URL.decode(String(parts[2])) else {
            throw CryptoError(code: .invalidEncoding, message: "the JWS signature is not base64url")
        }
        return (header, claims, Array("\(parts[0]).\(parts[1])".utf8), signature)
    }

    static func serialize(_ members: [String: JWTValue]) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A [String: JWTValue] holds only strings and integers: encoding cannot fail.
        return Array(try! encoder.encode(members))
    }
}
