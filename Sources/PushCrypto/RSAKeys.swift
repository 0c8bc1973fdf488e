internal import COpenSSL

/// An RSA private key held by OpenSSL, e.g. the `private_key` of a Google service account (PKCS#8 PEM),
/// used for RS256 (RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518 §3.3 / RFC 8017 §8.2).
///
/// `@unchecked Sendable` is safe: the wrapped `EVP_PKEY` is immutable after `init` and freed only in
/// `deinit`; OpenSSL 3 allows concurrent read-only use of one key (each signature has its own context).
/// The key never appears in `description` or errors.
public final class RSAPrivateKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    let pkey: OpaquePointer

    /// The smallest modulus accepted, in bits (RFC 7518 §3.3: 2048 or larger).
    public static let minimumBits = 2048

    private init(owning pkey: OpaquePointer) { self.pkey = pkey }

    deinit { EVP_PKEY_free(pkey) }

    /// Parses a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, what a service-account JSON holds); a
    /// traditional `BEGIN RSA PRIVATE KEY` PEM is accepted too.
    /// - Throws: `CryptoError` `.invalidKey` when the text is not a PEM private key, is encrypted (never
    ///   prompts), is not RSA, or is shorter than 2048 bits. The message never includes the PEM text.
    public init(pem: String) throws {
        let pkey = try readPEM(pem, what: "RSA private key") { bio in PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil) }
        guard EVP_PKEY_is_a(pkey, "RSA") == 1 else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .invalidKey, message: "the private key is not an RSA key (RS256 needs RSA)")
        }
        let bits = EVP_PKEY_get_bits(pkey)
        guard bits >= Self.minimumBits else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .invalidKey, message: "the RSA key has \(bits) bits; RS256 needs at least \(Self.minimumBits)")
        }
        self.pkey = pkey
    }

    /// A fresh random RSA key with public exponent 65537, e.g. for tests or a demo service account.
    /// - Parameter bits: the modulus size, 2048 to 8192.
    /// - Throws: `CryptoError` `.invalidInput` for a size out of range; `.signingFailed` when generation fails.
    public static func generate(bits: Int = 2048) throws -> RSAPrivateKey {
        guard (minimumBits...8192).contains(bits) else {
            throw CryptoError(code: .invalidInput, message: "RSA key sizes from \(minimumBits) to 8192 bits are generated (asked for \(bits))")
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else {
            throw CryptoError.openSSL(.signingFailed, "EVP_PKEY_CTX_new_from_name(RSA) failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var generated: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1,
              EVP_PKEY_generate(context, &generated) == 1,
              let key = generated
        else {
            throw CryptoError.openSSL(.signingFailed, "RSA key generation failed")
        }
        return RSAPrivateKey(owning: key)
    }

    /// The key as unencrypted PKCS#8 PEM. Secret: never log it.
    public var pkcs8PEM: String {
        writePEM { bio in PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) }
    }

    /// The matching public key.
    public var publicKey: RSAPublicKey {
        // A SubjectPublicKeyInfo OpenSSL wrote for a valid key always reads back.
        try! RSAPublicKey(pem: writePEM { bio in PEM_write_bio_PUBKEY(bio, pkey) })
    }

    /// RS256: an RSASSA-PKCS1-v1_5 signature over SHA-256 of `message` (RFC 8017 §8.2), as many bytes as
    /// the modulus (256 for 2048 bits), through `EVP_DigestSign`.
    /// - Throws: `CryptoError` `.signingFailed`.
    public func signRS256(_ message: some Collection<UInt8>) throws -> [UInt8] {
        // PKCS#1 v1.5 padding is OpenSSL's default for RSA signatures.
        try DigestSignature.signSHA256(message, with: pkey, algorithm: "RS256")
    }

    public var description: String { "RSAPrivateKey(<redacted>)" }
    public var debugDescription: String { description }
}

/// An RSA public key: verifies RS256 signatures (the emulator checks FCM service-account assertions).
///
/// `@unchecked Sendable` is safe for the same reason as ``RSAPrivateKey``.
public final class RSAPublicKey: @unchecked Sendable, CustomStringConvertible {
    let pkey: OpaquePointer

    deinit { EVP_PKEY_free(pkey) }

    /// Parses a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    /// - Throws: `CryptoError` `.invalidKey` when the text is not a PEM public key or not RSA.
    public init(pem: String) throws {
        let pkey = try readPEM(pem, what: "RSA public key") { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        guard EVP_PKEY_is_a(pkey, "RSA") == 1 else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .invalidKey, message: "the public key is not an RSA key")
        }
        self.pkey = pkey
    }

    /// The key as SubjectPublicKeyInfo PEM. Not secret.
    public var pem: String { writePEM { bio in PEM_write_bio_PUBKEY(bio, pkey) } }

    /// `true` when `signature` is a valid RS256 signature of `message` under this key
    /// (`EVP_DigestVerify`, PKCS#1 v1.5, SHA-256).
    public func verifyRS256(signature: [UInt8], for message: some Collection<UInt8>) -> Bool {
        guard !signature.isEmpty, signature.count <= 2048 else { return false }
        return DigestSignature.verifySHA256(signature, for: message, with: pkey)
    }

    public var description: String { "RSAPublicKey(\(EVP_PKEY_get_bits(pkey)) bits)" }
}

extension JSONWebToken {
    /// Signs an RS256 token (RFC 7518 §3.3), e.g. a Google OAuth2 JWT-bearer assertion (RFC 7523). `alg` is
    /// always `RS256` (a header `alg` entry is overwritten); members are serialized compactly with sorted keys.
    /// - Returns: `base64url(header) "." base64url(claims) "." base64url(signature)`.
    /// - Throws: `CryptoError` `.signingFailed`.
    public static func signRS256(header: [String: JWTValue], claims: [String: JWTValue], key: RSAPrivateKey) throws -> String {
        var fullHeader = header
        fullHeader["alg"] = .string("RS256")
        let signingInput = Base64URL.encode(serialize(fullHeader)) + "." + Base64URL.encode(serialize(claims))
        let signature = try key.signRS256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
