internal import COpenSSL

/// A failure in a PushCrypto operation.
///
/// `message` says what was attempted and appends OpenSSL's queued error strings (drained from
/// `ERR_get_error`, so they never leak into a later, unrelated error). It never contains key material,
/// PEM text or message bytes.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// A key could not be parsed, is not an EC P-256 key, or is otherwise unusable.
        public static let invalidKey = Code("invalidKey")
        /// OpenSSL could not produce a signature (or key generation failed).
        public static let signingFailed = Code("signingFailed")
        /// A signature did not verify (used where a throwing API needs a failure, e.g. JWT checks).
        public static let verificationFailed = Code("verificationFailed")
        /// Input text is not in the expected encoding (base64url, compact JWS, JSON).
        public static let invalidEncoding = Code("invalidEncoding")
        /// Authenticated decryption failed: wrong key, wrong secret, or a tampered body (AES-GCM tag mismatch),
        /// or the decrypted record's padding is malformed (RFC 8188 §2).
        public static let decryptionFailed = Code("decryptionFailed")
        /// An input has the wrong size or shape for the operation (e.g. a 15-byte Web Push auth secret, a
        /// body over 4096 bytes).
        public static let invalidInput = Code("invalidInput")
        /// Key agreement, key derivation or encryption failed inside OpenSSL.
        public static let operationFailed = Code("operationFailed")

        public var description: String { name }
    }

    public var code: Code
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "CryptoError(\(code)): \(message)" }

    /// An error with `message` plus every error OpenSSL has queued on this thread (the queue is emptied).
    static func openSSL(_ code: Code, _ message: String) -> CryptoError {
        let details = drainOpenSSLErrors()
        return CryptoError(code: code, message: details.isEmpty ? message : "\(message) (\(details.joined(separator: "; ")))")
    }
}

/// Empties OpenSSL's per-thread error queue, returning its entries as text. OpenSSL's reason strings name
/// the failing function and reason, never the data involved.
func drainOpenSSLErrors() -> [String] {
    var texts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        texts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return texts
}
