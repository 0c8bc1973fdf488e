internal import COpenSSL
internal import CPushizoOpenSSLShims

extension P256PrivateKey {
    /// Imports a key from its raw parts: the 32-byte big-endian private scalar `d` (SEC 1 §2.3.6, what a JWK
    /// `d` or RFC 8291 Appendix A gives) and its 65-byte uncompressed public point `0x04 || X || Y`.
    /// OpenSSL checks that the two belong together (`EVP_PKEY_pairwise_check`).
    /// - Throws: `CryptoError` `.invalidKey` for wrong lengths, a scalar out of range, a point off the curve
    ///   or a point that is not `d * G`. The message never contains the scalar.
    public convenience init(rawPrivateKey scalar: [UInt8], publicKey point: [UInt8]) throws {
        guard scalar.count == 32 else {
            throw CryptoError(code: .invalidKey, message: "a P-256 private scalar is 32 bytes (got \(scalar.count))")
        }
        guard point.count == 65, point[0] == 0x04 else {
            throw CryptoError(code: .invalidKey, message: "a P-256 public point must be 65 bytes starting with 0x04 (got \(point.count) bytes)")
        }
        guard let builder = OSSL_PARAM_BLD_new() else {
            throw CryptoError.openSSL(.invalidKey, "OSSL_PARAM_BLD_new failed")
        }
        defer { OSSL_PARAM_BLD_free(builder) }
        // BN_bin2bn reads big-endian bytes; the builder stores the number in OpenSSL's own form.
        guard let number = scalar.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, 32, nil) }) else {
            throw CryptoError.openSSL(.invalidKey, "BN_bin2bn failed")
        }
        // The scalar is secret: clear it when done.
        defer { BN_clear_free(number) }
        var pointCopy = point
        // The builder keeps pointers to pushed strings and octets until OSSL_PARAM_BLD_to_param copies them,
        // so both calls happen while the buffers are alive.
        let parameters: UnsafeMutablePointer<OSSL_PARAM>? = pointCopy.withUnsafeMutableBytes { raw in
            guard OSSL_PARAM_BLD_push_utf8_string(builder, staticCString("group"), staticCString("prime256v1"), 0) == 1,
                  OSSL_PARAM_BLD_push_BN(builder, staticCString("priv"), number) == 1,
                  OSSL_PARAM_BLD_push_octet_string(builder, staticCString("pub"), raw.baseAddress, raw.count) == 1
            else { return nil }
            return OSSL_PARAM_BLD_to_param(builder)
        }
        guard let parameters else {
            throw CryptoError.openSSL(.invalidKey, "could not build the key parameters")
        }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw CryptoError.openSSL(.invalidKey, "EVP_PKEY_CTX_new_from_name(EC) failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var imported: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
              EVP_PKEY_fromdata(context, &imported, pz_EVP_PKEY_KEYPAIR_selection(), parameters) == 1,
              let imported
        else {
            throw CryptoError.openSSL(.invalidKey, "the bytes are not a P-256 key pair")
        }
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, imported, nil) else {
            EVP_PKEY_free(imported)
            throw CryptoError.openSSL(.invalidKey, "EVP_PKEY_CTX_new_from_pkey failed")
        }
        defer { EVP_PKEY_CTX_free(check) }
        // The point must be on the curve and equal d * G, or signatures and shared secrets would be wrong.
        guard EVP_PKEY_public_check(check) == 1, EVP_PKEY_pairwise_check(check) == 1 else {
            EVP_PKEY_free(imported)
            throw CryptoError.openSSL(.invalidKey, "the public point does not match the private scalar")
        }
        self.init(owning: imported)
    }

    /// Elliptic-curve Diffie-Hellman on P-256 (SEC 1 §3.3.1, through `EVP_PKEY_derive`): the 32-byte
    /// x-coordinate of `self.d * peer`, the `ecdh_secret` of RFC 8291 §3.4.
    /// - Throws: `CryptoError` `.operationFailed` when OpenSSL refuses (e.g. the peer point is unusable).
    public func sharedSecret(with peer: P256PublicKey) throws -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else {
            throw CryptoError.openSSL(.operationFailed, "EVP_PKEY_CTX_new_from_pkey failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer.pkey) == 1 else {
            throw CryptoError.openSSL(.operationFailed, "ECDH setup failed")
        }
        var length = 0
        guard EVP_PKEY_derive(context, nil, &length) == 1, length == 32 else {
            throw CryptoError.openSSL(.operationFailed, "ECDH gave no 32-byte secret")
        }
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive(context, &secret, &length) == 1, length == 32 else {
            throw CryptoError.openSSL(.operationFailed, "ECDH failed")
        }
        return secret
    }
}
