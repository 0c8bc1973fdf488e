internal import COpenSSL

/// HKDF with SHA-256 (RFC 5869, extract then expand) through OpenSSL's `EVP_KDF` "HKDF".
public enum HKDFSHA256 {
    /// `length` bytes of output keying material from `inputKeyMaterial`, `salt` and `info`.
    /// - Parameter length: 1 to 8160 bytes (255 * 32, RFC 5869 §2.3).
    /// - Throws: `CryptoError` `.invalidInput` for a length out of range; `.operationFailed` when OpenSSL fails.
    public static func deriveKey(inputKeyMaterial: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws -> [UInt8] {
        guard (1...8160).contains(length) else {
            throw CryptoError(code: .invalidInput, message: "HKDF-SHA256 output is 1 to 8160 bytes (asked for \(length))")
        }
        guard let kdf = EVP_KDF_fetch(nil, "HKDF", nil) else {
            throw CryptoError.openSSL(.operationFailed, "EVP_KDF_fetch(HKDF) failed")
        }
        defer { EVP_KDF_free(kdf) }
        guard let context = EVP_KDF_CTX_new(kdf) else {
            throw CryptoError.openSSL(.operationFailed, "EVP_KDF_CTX_new failed")
        }
        defer { EVP_KDF_CTX_free(context) }
        var output = [UInt8](repeating: 0, count: length)
        // OpenSSL needs a non-NULL pointer even for an empty octet string: give empty inputs one byte of
        // storage with length 0.
        var key = inputKeyMaterial.isEmpty ? [0] : inputKeyMaterial
        var saltBytes = salt.isEmpty ? [0] : salt
        var infoBytes = info.isEmpty ? [0] : info
        let status: Int32 = key.withUnsafeMutableBytes { keyRaw in
            saltBytes.withUnsafeMutableBytes { saltRaw in
                infoBytes.withUnsafeMutableBytes { infoRaw in
                    // OSSL_PARAM keeps pointers to its key and value: both must outlive the derive call.
                    var parameters = [
                        OSSL_PARAM_construct_utf8_string(staticCString("digest"), UnsafeMutablePointer(mutating: staticCString("SHA256")), 0),
                        OSSL_PARAM_construct_octet_string(staticCString("key"), keyRaw.baseAddress, inputKeyMaterial.count),
                        OSSL_PARAM_construct_octet_string(staticCString("salt"), saltRaw.baseAddress, salt.count),
                        OSSL_PARAM_construct_octet_string(staticCString("info"), infoRaw.baseAddress, info.count),
                        OSSL_PARAM_construct_end(),
                    ]
                    return EVP_KDF_derive(context, &output, length, &parameters)
                }
            }
        }
        guard status == 1 else { throw CryptoError.openSSL(.operationFailed, "HKDF-SHA256 failed") }
        return output
    }
}

/// A NUL-terminated C string for a literal that stays valid for the life of the process (a `StaticString`
/// lives in the binary), for `OSSL_PARAM` keys and values that OpenSSL reads after the constructing call.
func staticCString(_ text: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(text.utf8Start).assumingMemoryBound(to: CChar.self)
}
