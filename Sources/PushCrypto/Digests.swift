internal import COpenSSL
import Synchronization

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

/// HMAC-SHA256 (RFC 2104, test vectors RFC 4231) through OpenSSL's `EVP_MAC` "HMAC".
public enum HMACSHA256 {
    /// The 32-byte tag of `message` under `key` (any key length; longer than 64 bytes is hashed first,
    /// per RFC 2104 §2). Keys the MAC for this one call; a key used for many messages is cheaper as a ``Key``.
    public static func authenticationCode(key: [UInt8], message: some Collection<UInt8>) -> [UInt8] {
        Key(key).authenticationCode(message: message)
    }

    /// A key ready for many messages: HMAC contexts keyed once, each message computed in one of them after
    /// `EVP_MAC_init` with no key (which restores the keyed state, the hashed key pads, without allocating).
    /// OpenSSL 3's one-shot `HMAC()` fetched the MAC and the digest from the provider store on every call, which
    /// cost more than the hashing; a worker that signs every delivery's msgId spent a tenth of its CPU there.
    public final class Key: Sendable {
        /// Keyed contexts not in use. One is taken per message, so threads never share one; a thread that finds
        /// none copies one more (`EVP_MAC_CTX_dup` of the first), and at most ``spareLimit`` are kept.
        private let spare: Mutex<[KeyedContext]>
        /// The keyed context the others are copied from; only read (copied) under the `spare` lock.
        private let original: KeyedContext
        static let spareLimit = 8

        /// Keys a context. Traps only if OpenSSL cannot provide HMAC-SHA256 or allocate, which no caller could
        /// handle either.
        public init(_ key: [UInt8]) {
            guard let mac = EVP_MAC_fetch(nil, "HMAC", nil) else { preconditionFailure("EVP_MAC_fetch(HMAC) failed") }
            defer { EVP_MAC_free(mac) }
            guard let context = EVP_MAC_CTX_new(mac) else { preconditionFailure("EVP_MAC_CTX_new failed") }
            // OpenSSL leaves the key unset for a NULL pointer, so an empty key is passed as one zero byte with
            // length 0. A key longer than SHA-256's block is hashed by HMAC itself (RFC 2104 §2).
            let keyBytes = key.isEmpty ? [0] : key
            let status = "SHA256".withCString { digest in
                var parameters = [
                    // The name must outlive this array: a Swift `String` (the imported macro) passed here would
                    // be a temporary C string, freed before `EVP_MAC_init` reads it.
                    OSSL_PARAM_construct_utf8_string(staticCString("digest"), UnsafeMutablePointer(mutating: digest), 0),
                    OSSL_PARAM_construct_end(),
                ]
                return keyBytes.withUnsafeBufferPointer { EVP_MAC_init(context, $0.baseAddress, key.count, &parameters) }
            }
            precondition(status == 1, "EVP_MAC_init(HMAC-SHA256) failed")
            original = KeyedContext(pointer: context)
            spare = Mutex([])
        }

        deinit {
            spare.withLock { contexts in for context in contexts { EVP_MAC_CTX_free(context.pointer) } }
            EVP_MAC_CTX_free(original.pointer)
        }

        /// The 32-byte tag of `message`. Safe to call from many threads at once.
        public func authenticationCode(message: some Collection<UInt8>) -> [UInt8] {
            let taken = spare.withLock { contexts in contexts.popLast() ?? KeyedContext(pointer: EVP_MAC_CTX_dup(original.pointer)) }
            guard let context = taken.pointer else { preconditionFailure("EVP_MAC_CTX_dup failed") }
            var output = [UInt8](repeating: 0, count: 32)
            var length = 0
            // No key: the keyed state of the first init is restored (EVP_MAC_init(3)).
            let started = EVP_MAC_init(context, nil, 0, nil)
            let updated: Int32 =
                message.withContiguousStorageIfAvailable { EVP_MAC_update(context, $0.baseAddress, $0.count) }
                ?? Array(message).withUnsafeBufferPointer { EVP_MAC_update(context, $0.baseAddress, $0.count) }
            let finished = EVP_MAC_final(context, &output, &length, output.count)
            precondition(started == 1 && updated == 1 && finished == 1 && length == 32, "HMAC-SHA256 failed")
            let kept = spare.withLock { contexts in
                guard contexts.count < Self.spareLimit else { return false }
                contexts.append(taken)
                return true
            }
            if !kept { EVP_MAC_CTX_free(context) }
            return output
        }
    }

    /// An `EVP_MAC_CTX` pointer, movable into and out of a key's lock (a context is used by one thread at a time:
    /// the one that took it from the spares).
    private struct KeyedContext: @unchecked Sendable {
        var pointer: OpaquePointer?
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
