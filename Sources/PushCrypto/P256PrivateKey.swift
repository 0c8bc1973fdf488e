internal import COpenSSL
internal import CPushizoOpenSSLShims

/// An ECDSA P-256 (secp256r1 / prime256v1) private key held by OpenSSL, e.g. an APNs `.p8` signing key.
///
/// `@unchecked Sendable` is safe: the wrapped `EVP_PKEY` is created in `init`, never mutated afterwards and
/// freed only in `deinit`; OpenSSL 3 allows concurrent read-only use of one `EVP_PKEY` from many threads
/// (each signing call makes its own `EVP_MD_CTX`).
///
/// The key never appears in `description`, `debugDescription` or errors.
public final class P256PrivateKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    let pkey: OpaquePointer

    /// Takes ownership of `pkey` (an EC P-256 key with its private part), freed in `deinit`.
    init(owning pkey: OpaquePointer) {
        self.pkey = pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Parses a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`, what Apple's `.p8` files hold); a
    /// traditional `BEGIN EC PRIVATE KEY` PEM is accepted too.
    /// - Throws: `CryptoError` `.invalidKey` when the text is not a PEM private key, is encrypted (never
    ///   prompts for a passphrase), or the key is not EC P-256. The message never includes the PEM text.
    public init(pem: String) throws {
        // A password callback that refuses: with nil, OpenSSL would prompt on the terminal for an encrypted
        // PEM and block the daemon. Encrypted keys are rejected instead.
        let pkey = try readPEM(pem, what: "private key") { bio in PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil) }
        guard isP256(pkey) else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .invalidKey, message: "the private key is not an EC P-256 key (ES256 needs P-256)")
        }
        self.pkey = pkey
    }

    /// A fresh random P-256 key (OpenSSL's DRBG), e.g. for tests or a demo `.p8`.
    /// - Throws: `CryptoError` `.signingFailed` when OpenSSL cannot generate a key.
    public static func generate() throws -> P256PrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw CryptoError.openSSL(.signingFailed, "EVP_PKEY_CTX_new_from_name(EC) failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var generated: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &generated) == 1,
              let key = generated
        else {
            throw CryptoError.openSSL(.signingFailed, "P-256 key generation failed")
        }
        return P256PrivateKey(owning: key)
    }

    /// The key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, unencrypted), the `.p8` format.
    /// This is secret: write it only to a file with restrictive permissions, never to a log.
    public var pkcs8PEM: String {
        writePEM { bio in PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) }
    }

    /// The matching public key.
    public var publicKey: P256PublicKey {
        var buffer: UnsafeMutablePointer<UInt8>?
        let length = EVP_PKEY_get1_encoded_public_key(pkey, &buffer)
        guard length == 65, let buffer else {
            preconditionFailure("EVP_PKEY_get1_encoded_public_key gave no 65-byte point for a P-256 key")
        }
        defer { pz_OPENSSL_free(buffer) }
        let point = Array(UnsafeBufferPointer(start: buffer, count: length))
        // A point OpenSSL itself produced for a valid key always imports.
        return try! P256PublicKey(x963: point)
    }

    /// Signs `message` with ECDSA P-256 over SHA-256 and returns the 64-byte `R || S` form JWS needs
    /// (RFC 7518 §3.4), each half left-padded to 32 bytes. OpenSSL produces a DER `ECDSA-Sig-Value`, which
    /// is converted here (sending the DER form is the classic cause of APNs `InvalidProviderToken`).
    /// ECDSA is randomized: two signatures of one message differ, and both verify.
    /// - Throws: `CryptoError` `.signingFailed`.
    public func signES256(_ message: some Collection<UInt8>) throws -> [UInt8] {
        let der = try DigestSignature.signSHA256(message, with: pkey, algorithm: "ES256")
        guard let raw = ECDSASignature.rawFromDER(der) else {
            throw CryptoError.openSSL(.signingFailed, "OpenSSL returned an unreadable ECDSA signature")
        }
        return raw
    }

    public var description: String { "P256PrivateKey(<redacted>)" }
    public var debugDescription: String { description }
}

/// Conversions between the DER `ECDSA-Sig-Value` (SEC 1 / RFC 3279 §2.2.3) OpenSSL speaks and the
/// fixed-width `R || S` JWS speaks (RFC 7518 §3.4).
enum ECDSASignature {
    static func rawFromDER(_ der: [UInt8]) -> [UInt8]? {
        der.withUnsafeBufferPointer { buffer -> [UInt8]? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count) else { return nil }
            defer { ECDSA_SIG_free(signature) }
            var r: OpaquePointer?
            var s: OpaquePointer?
            ECDSA_SIG_get0(signature, &r, &s)
            var output = [UInt8](repeating: 0, count: 64)
            let written = output.withUnsafeMutableBufferPointer { out -> Bool in
                BN_bn2binpad(r, out.baseAddress, 32) == 32 && BN_bn2binpad(s, out.baseAddress! + 32, 32) == 32
            }
            return written ? output : nil
        }
    }

    static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // On success ECDSA_SIG_set0 takes ownership of r and s.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

/// `true` when `pkey` is an EC key on P-256.
func isP256(_ pkey: OpaquePointer) -> Bool {
    guard EVP_PKEY_is_a(pkey, "EC") == 1 else { return false }
    var name = [CChar](repeating: 0, count: 64)
    var length = 0
    guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else { return false }
    let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return group == "prime256v1" || group == "P-256" || group == "secp256r1"
}

/// The longest PEM text read, in bytes (64 KiB, far above any P-256 key or certificate bundle we read).
let maximumPEMSize = 65_536

/// Reads one PEM object from `text` through a read-only memory BIO.
func readPEM(_ text: String, what: String, _ read: (OpaquePointer) -> OpaquePointer?) throws -> OpaquePointer {
    let bytes = Array(text.utf8)
    guard !bytes.isEmpty else {
        throw CryptoError(code: .invalidKey, message: "the \(what) PEM text is empty")
    }
    // A P-256 key's PEM is a few hundred bytes; the bound keeps `Int32(raw.count)` (BIO's length type) from
    // trapping on absurd input.
    guard bytes.count <= maximumPEMSize else {
        throw CryptoError(code: .invalidKey, message: "the \(what) PEM text is \(bytes.count) bytes; at most \(maximumPEMSize) are read")
    }
    let result: OpaquePointer? = bytes.withUnsafeBytes { raw in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
        defer { BIO_free(bio) }
        return read(bio)
    }
    guard let result else {
        // OpenSSL's reasons ("no start line", "bad base64 decode") name no key bytes.
        throw CryptoError.openSSL(.invalidKey, "could not read a PEM \(what)")
    }
    return result
}

/// Runs `write` against a memory BIO and returns what it wrote as text.
func writePEM(_ write: (OpaquePointer) -> Int32) -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { preconditionFailure("BIO_new failed") }
    defer { BIO_free(bio) }
    precondition(write(bio) == 1, "PEM write to a memory BIO failed")
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1024)
    while true {
        let count = BIO_read(bio, &chunk, Int32(chunk.count))
        if count <= 0 { break }
        output.append(contentsOf: chunk.prefix(Int(count)))
    }
    return String(decoding: output, as: UTF8.self)
}
