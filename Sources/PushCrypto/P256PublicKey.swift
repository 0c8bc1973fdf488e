internal import COpenSSL
internal import CPushizoOpenSSLShims

/// An ECDSA P-256 public key held by OpenSSL: verifies ES256 signatures (the emulator checks APNs provider
/// tokens with it) and will carry Web Push subscriber keys (`p256dh`, a 65-byte uncompressed point).
///
/// `@unchecked Sendable` is safe: the wrapped `EVP_PKEY` is immutable after `init` and freed only in
/// `deinit`; OpenSSL 3 allows concurrent read-only use of one key (each verification has its own context).
public final class P256PublicKey: @unchecked Sendable, CustomStringConvertible, Equatable {
    let pkey: OpaquePointer

    deinit { EVP_PKEY_free(pkey) }

    /// Parses a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`, RFC 5280 §4.1.2.7 / RFC 5480).
    /// - Throws: `CryptoError` `.invalidKey` when the text is not a PEM public key or the key is not P-256.
    public init(pem: String) throws {
        let pkey = try readPEM(pem, what: "public key") { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        guard isP256(pkey) else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .invalidKey, message: "the public key is not an EC P-256 key")
        }
        self.pkey = pkey
    }

    /// Imports an uncompressed point `0x04 || X || Y` (65 bytes; ANSI X9.63 / SEC 1 §2.3.3), the form Web
    /// Push uses for `p256dh` (RFC 8291 §3.1). The point must lie on the curve.
    /// - Throws: `CryptoError` `.invalidKey` for a wrong length or a point not on P-256.
    public init(x963 bytes: [UInt8]) throws {
        guard bytes.count == 65, bytes[0] == 0x04 else {
            throw CryptoError(code: .invalidKey, message: "a P-256 public point must be 65 bytes starting with 0x04 (got \(bytes.count) bytes)")
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw CryptoError.openSSL(.invalidKey, "EVP_PKEY_CTX_new_from_name(EC) failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var point = bytes
        var imported: OpaquePointer?
        let status: Int32 = "group".withCString { groupKey in
            "prime256v1".withCString { groupName in
                "pub".withCString { pubKey in
                    point.withUnsafeMutableBytes { raw in
                        var parameters = [
                            OSSL_PARAM_construct_utf8_string(groupKey, UnsafeMutablePointer(mutating: groupName), 0),
                            OSSL_PARAM_construct_octet_string(pubKey, raw.baseAddress, raw.count),
                            OSSL_PARAM_construct_end(),
                        ]
                        guard EVP_PKEY_fromdata_init(context) == 1 else { return 0 }
                        return EVP_PKEY_fromdata(context, &imported, pz_EVP_PKEY_PUBLIC_KEY_selection(), &parameters)
                    }
                }
            }
        }
        guard status == 1, let imported else {
            throw CryptoError.openSSL(.invalidKey, "the bytes are not a point on P-256")
        }
        // fromdata decodes the point; check it explicitly as well so an off-curve point can never verify.
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, imported, nil) else {
            EVP_PKEY_free(imported)
            throw CryptoError.openSSL(.invalidKey, "EVP_PKEY_CTX_new_from_pkey failed")
        }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else {
            EVP_PKEY_free(imported)
            throw CryptoError.openSSL(.invalidKey, "the bytes are not a valid point on P-256")
        }
        self.pkey = imported
    }

    /// The key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`). Not secret.
    public var pem: String {
        writePEM { bio in PEM_write_bio_PUBKEY(bio, pkey) }
    }

    /// The 65-byte uncompressed point `0x04 || X || Y`.
    public var x963Representation: [UInt8] {
        var buffer: UnsafeMutablePointer<UInt8>?
        let length = EVP_PKEY_get1_encoded_public_key(pkey, &buffer)
        guard length > 0, let buffer else { preconditionFailure("EVP_PKEY_get1_encoded_public_key failed") }
        defer { pz_OPENSSL_free(buffer) }
        return Array(UnsafeBufferPointer(start: buffer, count: length))
    }

    /// `true` when `signature` (64-byte `R || S`, RFC 7518 §3.4) is a valid ECDSA P-256 / SHA-256 signature
    /// of `message` under this key. Any other signature length gives `false`. The signature is converted
    /// to DER and checked with `EVP_DigestVerify`.
    public func verifyES256(signature: [UInt8], for message: some Collection<UInt8>) -> Bool {
        guard let der = ECDSASignature.derFromRaw(signature) else { return false }
        return DigestSignature.verifySHA256(der, for: message, with: pkey)
    }

    public var description: String { "P256PublicKey(\(Base64URL.encode(x963Representation)))" }

    /// Keys are equal when their points are equal.
    public static func == (lhs: P256PublicKey, rhs: P256PublicKey) -> Bool {
        lhs.x963Representation == rhs.x963Representation
    }
}
