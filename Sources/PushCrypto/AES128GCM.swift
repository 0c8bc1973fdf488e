internal import COpenSSL

/// AES-128-GCM (NIST SP 800-38D) through OpenSSL's `EVP_aes_128_gcm`, with a 12-byte nonce, no associated
/// data and a 16-byte tag: the AEAD of RFC 8188 §2.
public enum AES128GCM {
    /// Encrypts `plaintext` and returns `ciphertext || tag` (plaintext length + 16 bytes).
    /// - Parameters: `key` 16 bytes, `nonce` 12 bytes.
    /// - Throws: `CryptoError` `.invalidInput` for wrong key / nonce lengths; `.operationFailed` when
    ///   OpenSSL fails.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws -> [UInt8] {
        try checkSizes(key: key, nonce: nonce)
        guard plaintext.count < Int(Int32.max) else {
            throw CryptoError(code: .invalidInput, message: "the plaintext is too long for one AES-GCM call")
        }
        guard let context = EVP_CIPHER_CTX_new() else {
            throw CryptoError.openSSL(.operationFailed, "EVP_CIPHER_CTX_new failed")
        }
        defer { EVP_CIPHER_CTX_free(context) }
        // The default GCM IV length is 12 bytes, the one RFC 8188 uses.
        guard EVP_EncryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1 else {
            throw CryptoError.openSSL(.operationFailed, "EVP_EncryptInit_ex(AES-128-GCM) failed")
        }
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var written: Int32 = 0
        var total = 0
        if !plaintext.isEmpty {
            guard EVP_EncryptUpdate(context, &output, &written, plaintext, Int32(plaintext.count)) == 1 else {
                throw CryptoError.openSSL(.operationFailed, "EVP_EncryptUpdate failed")
            }
            total = Int(written)
        }
        let finished = output.withUnsafeMutableBufferPointer { buffer in
            EVP_EncryptFinal_ex(context, buffer.baseAddress! + total, &written)
        }
        guard finished == 1 else { throw CryptoError.openSSL(.operationFailed, "EVP_EncryptFinal_ex failed") }
        total += Int(written)
        guard total == plaintext.count else {
            throw CryptoError(code: .operationFailed, message: "AES-GCM wrote \(total) bytes for \(plaintext.count)")
        }
        let tagged = output.withUnsafeMutableBufferPointer { buffer in
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, buffer.baseAddress! + total)
        }
        guard tagged == 1 else { throw CryptoError.openSSL(.operationFailed, "reading the GCM tag failed") }
        return output
    }

    /// Checks the tag and decrypts `ciphertext || tag`.
    /// - Throws: `CryptoError` `.decryptionFailed` when the input is shorter than a tag or the tag does not
    ///   match (wrong key or nonce, or altered bytes); `.invalidInput` for wrong key / nonce lengths.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8]) throws -> [UInt8] {
        try checkSizes(key: key, nonce: nonce)
        guard sealed.count >= 16 else {
            throw CryptoError(code: .decryptionFailed, message: "the ciphertext is shorter than a 16-byte GCM tag")
        }
        guard sealed.count < Int(Int32.max) else {
            throw CryptoError(code: .invalidInput, message: "the ciphertext is too long for one AES-GCM call")
        }
        let ciphertextLength = sealed.count - 16
        var tag = Array(sealed[ciphertextLength...])
        guard let context = EVP_CIPHER_CTX_new() else {
            throw CryptoError.openSSL(.operationFailed, "EVP_CIPHER_CTX_new failed")
        }
        defer { EVP_CIPHER_CTX_free(context) }
        guard EVP_DecryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1 else {
            throw CryptoError.openSSL(.operationFailed, "EVP_DecryptInit_ex(AES-128-GCM) failed")
        }
        // One spare byte so the buffer pointer is never NULL for an empty plaintext.
        var output = [UInt8](repeating: 0, count: ciphertextLength + 1)
        var written: Int32 = 0
        var total = 0
        if ciphertextLength > 0 {
            guard EVP_DecryptUpdate(context, &output, &written, sealed, Int32(ciphertextLength)) == 1 else {
                throw CryptoError.openSSL(.decryptionFailed, "EVP_DecryptUpdate failed")
            }
            total = Int(written)
        }
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else {
            throw CryptoError.openSSL(.operationFailed, "setting the GCM tag failed")
        }
        let finished = output.withUnsafeMutableBufferPointer { buffer in
            EVP_DecryptFinal_ex(context, buffer.baseAddress! + total, &written)
        }
        // A tag mismatch queues no useful OpenSSL error; say what it means instead.
        _ = drainOpenSSLErrors()
        guard finished == 1 else {
            throw CryptoError(code: .decryptionFailed, message: "the AES-GCM tag does not match (wrong key, or altered bytes)")
        }
        total += Int(written)
        return Array(output.prefix(total))
    }

    static func checkSizes(key: [UInt8], nonce: [UInt8]) throws {
        guard key.count == 16 else {
            throw CryptoError(code: .invalidInput, message: "an AES-128 key is 16 bytes (got \(key.count))")
        }
        guard nonce.count == 12 else {
            throw CryptoError(code: .invalidInput, message: "the GCM nonce is 12 bytes here (got \(nonce.count))")
        }
    }
}
