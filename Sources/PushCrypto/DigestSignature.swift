internal import COpenSSL

/// SHA-256 signing and verification through `EVP_DigestSign` / `EVP_DigestVerify`, whatever the key type
/// (ECDSA P-256 for ES256, RSA PKCS#1 v1.5 for RS256): the one place both key types reach OpenSSL's
/// digest-sign API.
enum DigestSignature {
    /// The signature OpenSSL produces for `message` under `pkey` (DER `ECDSA-Sig-Value` for EC keys, the raw
    /// modulus-sized block for RSA).
    /// - Throws: `CryptoError` `.signingFailed`, naming `algorithm` in the message.
    static func signSHA256(_ message: some Collection<UInt8>, with pkey: OpaquePointer, algorithm: String) throws
        -> [UInt8]
    {
        let input = Array(message)
        guard let context = EVP_MD_CTX_new() else {
            throw CryptoError.openSSL(.signingFailed, "EVP_MD_CTX_new failed")
        }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw CryptoError.openSSL(.signingFailed, "EVP_DigestSignInit failed")
        }
        var length = 0
        var signature: [UInt8] = []
        let status = input.withUnsafeBytes { raw -> Int32 in
            let pointer = raw.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard EVP_DigestSign(context, nil, &length, pointer, raw.count) == 1 else { return 0 }
            signature = [UInt8](repeating: 0, count: length)
            return EVP_DigestSign(context, &signature, &length, pointer, raw.count)
        }
        guard status == 1 else { throw CryptoError.openSSL(.signingFailed, "EVP_DigestSign(\(algorithm)) failed") }
        return Array(signature.prefix(length))
    }

    /// `true` when `signature` (in OpenSSL's form for the key type) verifies for `message` under `pkey`.
    /// A failed verification queues an OpenSSL error; it is drained so it does not surface in an unrelated error.
    static func verifySHA256(_ signature: [UInt8], for message: some Collection<UInt8>, with pkey: OpaquePointer) -> Bool {
        let input = Array(message)
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pkey) == 1 else {
            _ = drainOpenSSLErrors()
            return false
        }
        let status = input.withUnsafeBytes { raw in
            EVP_DigestVerify(context, signature, signature.count, raw.baseAddress?.assumingMemoryBound(to: UInt8.self), raw.count)
        }
        _ = drainOpenSSLErrors()
        return status == 1
    }
}
