internal import COpenSSL

/// SHA-256 (FIPS 180-4) through OpenSSL's `EVP_Digest`.
public enum SHA256 {
    /// The 32-byte digest of `bytes`.
    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let input = Array(bytes)
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let status = input.withUnsafeBytes { raw in
            EVP_Digest(raw.baseAddress, raw.count, &output, &length, EVP_sha256(), nil)
        }
        // EVP_Digest with a built-in digest only fails on allocation failure, which we cannot handle anyway.
        precondition(status == 1 && length == 32, "EVP_Digest(SHA-256) failed")
        return output
    }
}

/// HMAC-SHA256 (RFC 2104, test vectors RFC 4231) through OpenSSL's `HMAC`.
public enum HMACSHA256 {
    /// The 32-byte tag of `message` under `key` (any key length; longer than 64 bytes is hashed first,
    /// per RFC 2104 §2).
    public static func authenticationCode(key: [UInt8], message: some Collection<UInt8>) -> [UInt8] {
        let input = Array(message)
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        // OpenSSL rejects a NULL key pointer even with length 0, so an empty key is passed as one zero byte
        // with length 0.
        // A key longer than SHA-256's 64-byte block is replaced by its digest (RFC 2104 §2, what HMAC does
        // itself), so the length always fits HMAC's `int` parameter.
        let effectiveKey = key.count > 64 ? SHA256.hash(key) : key
        let keyBytes = effectiveKey.isEmpty ? [0] : effectiveKey
        let result = keyBytes.withUnsafeBytes { keyRaw in
            input.withUnsafeBytes { messageRaw in
                HMAC(EVP_sha256(), keyRaw.baseAddress, Int32(effectiveKey.count),
                     messageRaw.baseAddress?.assumingMemoryBound(to: UInt8.self), messageRaw.count,
                     &output, &length)
            }
        }
        precondition(result != nil && length == 32, "HMAC-SHA256 failed")
        return output
    }

    /// Compares two tags in time that depends only on their lengths (`CRYPTO_memcmp`), so an attacker
    /// cannot learn how many leading bytes of a forged tag were right. Different lengths are unequal.
    public static func isEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { left in
            b.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0 }
        }
    }
}

/// Cryptographically secure random bytes from OpenSSL's DRBG (`RAND_bytes`).
public enum SecureRandom {
    /// `count` random bytes. Traps if OpenSSL's generator cannot be seeded: continuing with weak
    /// randomness would be worse than stopping.
    public static func bytes(_ count: Int) -> [UInt8] {
        precondition(count >= 0)
        var output = [UInt8](repeating: 0, count: count)
        if count == 0 { return output }
        // RAND_bytes takes an `int` length: fill in chunks so no count can overflow `Int32`.
        output.withUnsafeMutableBufferPointer { buffer in
            var offset = 0
            while offset < count {
                let length = min(count - offset, 1 << 30)
                let status = RAND_bytes(buffer.baseAddress! + offset, Int32(length))
                precondition(status == 1, "RAND_bytes failed: the system random generator is unavailable")
                offset += length
            }
        }
        return output
    }
}
