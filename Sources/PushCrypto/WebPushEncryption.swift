/// Message encryption for Web Push (RFC 8291) in the `aes128gcm` content coding (RFC 8188), as one record.
///
/// Body layout (RFC 8188 §2.1, RFC 8291 §4):
///
///     salt (16) | rs (4, big-endian, 4096) | idlen (1, = 65) | keyid (65: the sender's ephemeral public key)
///     | AES-128-GCM(plaintext || 0x02) || tag (16)
///
/// Key schedule (RFC 8291 §3.3-3.4, RFC 8188 §2.2-2.3), all HKDF-SHA256:
///
///     ecdh_secret = ECDH(as_private, ua_public)
///     IKM   = HKDF(salt: auth_secret, ikm: ecdh_secret, info: "WebPush: info" 0x00 ua_public as_public, 32)
///     CEK   = HKDF(salt: salt, ikm: IKM, info: "Content-Encoding: aes128gcm" 0x00, 16)
///     NONCE = HKDF(salt: salt, ikm: IKM, info: "Content-Encoding: nonce" 0x00, 12)
///
/// The single record is the last one, so its padding delimiter is 0x02 and no further padding is added.
public enum WebPushEncryption {
    /// The record size written in the header and the largest body accepted, in bytes: RFC 8291 §4 says
    /// push services need not accept more than 4096 bytes of payload body.
    public static let recordSize = 4096
    /// Header bytes: 16 salt + 4 rs + 1 idlen + 65 keyid.
    public static let headerSize = 86
    /// The longest plaintext that fits: 4096 - 86 header - 16 tag - 1 delimiter = 3993 bytes.
    public static let maximumPlaintextSize = recordSize - headerSize - 16 - 1

    /// Encrypts `plaintext` for one subscription.
    /// - Parameters:
    ///   - userAgentPublicKey: the subscription's `p256dh`, a 65-byte uncompressed P-256 point.
    ///   - authSecret: the subscription's `auth`, 16 bytes (RFC 8291 §3.2).
    ///   - applicationServerKey: the sender's ephemeral key; `nil` (always, outside tests) makes a fresh one,
    ///     as RFC 8291 §3.1 requires for every message.
    ///   - salt: 16 bytes; `nil` (always, outside tests) draws fresh random bytes (RFC 8188 §2.1).
    /// - Returns: the request body, at most ``recordSize`` bytes.
    /// - Throws: `CryptoError` `.invalidKey` for a `p256dh` that is not a P-256 point; `.invalidInput` for an
    ///   auth secret or salt of the wrong size, or a plaintext over ``maximumPlaintextSize`` bytes;
    ///   `.operationFailed` when OpenSSL fails.
    public static func encrypt(plaintext: [UInt8], userAgentPublicKey: [UInt8], authSecret: [UInt8],
                               applicationServerKey: P256PrivateKey? = nil, salt: [UInt8]? = nil) throws -> [UInt8]
    {
        guard authSecret.count == 16 else {
            throw CryptoError(code: .invalidInput, message: "the Web Push auth secret is 16 bytes (got \(authSecret.count))")
        }
        guard plaintext.count <= maximumPlaintextSize else {
            throw CryptoError(code: .invalidInput, message: "the Web Push payload is \(plaintext.count) bytes; at most \(maximumPlaintextSize) fit in a \(recordSize)-byte body")
        }
        let salt = salt ?? SecureRandom.bytes(16)
        guard salt.count == 16 else {
            throw CryptoError(code: .invalidInput, message: "the aes128gcm salt is 16 bytes (got \(salt.count))")
        }
        let userAgentKey = try P256PublicKey(x963: userAgentPublicKey)
        let serverKey = try applicationServerKey ?? P256PrivateKey.generate()
        let serverPublic = serverKey.publicKey.x963Representation
        let ecdhSecret = try serverKey.sharedSecret(with: userAgentKey)
        let (key, nonce) = try contentKeys(ecdhSecret: ecdhSecret, authSecret: authSecret, salt: salt,
                                           userAgentPublic: userAgentKey.x963Representation, serverPublic: serverPublic)
        let sealed = try AES128GCM.seal(plaintext + [0x02], key: key, nonce: nonce)
        let rs = UInt32(recordSize)
        let header = salt + [UInt8(rs >> 24), UInt8(rs >> 16 & 0xFF), UInt8(rs >> 8 & 0xFF), UInt8(rs & 0xFF), 65] + serverPublic
        return header + sealed
    }

    /// Decrypts a body made by ``encrypt(plaintext:userAgentPublicKey:authSecret:applicationServerKey:salt:)``
    /// (or any RFC 8291 sender): what a browser, or the emulator's push service, does.
    /// - Parameters:
    ///   - userAgentPrivateKey: the subscription's key pair (its public half is `p256dh`).
    ///   - authSecret: the subscription's 16-byte `auth`.
    /// - Returns: the plaintext without the padding delimiter.
    /// - Throws: `CryptoError` `.invalidInput` for a body over ``recordSize`` bytes, a short header, a record
    ///   size under 18, an `idlen` other than 65, or a record longer than `rs` (more than one record);
    ///   `.invalidKey` for a `keyid` that is not a P-256 point; `.decryptionFailed` for a tag mismatch or
    ///   padding that does not end in the last-record delimiter 0x02 (RFC 8188 §2).
    public static func decrypt(body: [UInt8], userAgentPrivateKey: P256PrivateKey, authSecret: [UInt8]) throws -> [UInt8] {
        guard authSecret.count == 16 else {
            throw CryptoError(code: .invalidInput, message: "the Web Push auth secret is 16 bytes (got \(authSecret.count))")
        }
        guard body.count <= recordSize else {
            throw CryptoError(code: .invalidInput, message: "the Web Push body is \(body.count) bytes; at most \(recordSize) are accepted")
        }
        guard body.count >= 21 else {
            throw CryptoError(code: .invalidInput, message: "the body is shorter than an aes128gcm header")
        }
        let salt = Array(body[0..<16])
        let rs = Int(body[16]) << 24 | Int(body[17]) << 16 | Int(body[18]) << 8 | Int(body[19])
        let idLength = Int(body[20])
        // RFC 8188 §2.1: rs below 18 is invalid (tag plus a delimiter must fit).
        guard rs >= 18 else {
            throw CryptoError(code: .invalidInput, message: "the aes128gcm record size \(rs) is below 18")
        }
        // RFC 8291 §4: the keyid carries the sender's 65-byte uncompressed public key.
        guard idLength == 65 else {
            throw CryptoError(code: .invalidInput, message: "the aes128gcm keyid is \(idLength) bytes; Web Push needs a 65-byte P-256 point")
        }
        guard body.count >= 21 + idLength + 17 else {
            throw CryptoError(code: .invalidInput, message: "the body has no complete record after its header")
        }
        let serverPublicBytes = Array(body[21..<(21 + idLength)])
        let record = Array(body[(21 + idLength)...])
        // One record only (RFC 8291 §4): a record may not exceed rs.
        guard record.count <= rs else {
            throw CryptoError(code: .invalidInput, message: "the body holds more than one \(rs)-byte record")
        }
        let serverKey = try P256PublicKey(x963: serverPublicBytes)
        let ecdhSecret = try userAgentPrivateKey.sharedSecret(with: serverKey)
        let (key, nonce) = try contentKeys(ecdhSecret: ecdhSecret, authSecret: authSecret, salt: salt,
                                           userAgentPublic: userAgentPrivateKey.publicKey.x963Representation,
                                           serverPublic: serverPublicBytes)
        var padded = try AES128GCM.open(record, key: key, nonce: nonce)
        // RFC 8188 §2: strip trailing zero padding; the delimiter before it must be 0x02 (last record).
        while padded.last == 0 { padded.removeLast() }
        guard padded.last == 0x02 else {
            throw CryptoError(code: .decryptionFailed, message: "the record does not end with the last-record delimiter 0x02")
        }
        padded.removeLast()
        return padded
    }

    /// CEK (16 bytes) and NONCE (12 bytes) for the single record (sequence number 0, so the nonce is used
    /// as derived; RFC 8188 §2.3).
    static func contentKeys(ecdhSecret: [UInt8], authSecret: [UInt8], salt: [UInt8], userAgentPublic: [UInt8],
                            serverPublic: [UInt8]) throws -> (key: [UInt8], nonce: [UInt8])
    {
        let keyInfo = Array("WebPush: info".utf8) + [0] + userAgentPublic + serverPublic
        let ikm = try HKDFSHA256.deriveKey(inputKeyMaterial: ecdhSecret, salt: authSecret, info: keyInfo, length: 32)
        let key = try HKDFSHA256.deriveKey(inputKeyMaterial: ikm, salt: salt,
                                           info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: 16)
        let nonce = try HKDFSHA256.deriveKey(inputKeyMaterial: ikm, salt: salt,
                                             info: Array("Content-Encoding: nonce".utf8) + [0], length: 12)
        return (key, nonce)
    }
}
