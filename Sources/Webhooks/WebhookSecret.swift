import Foundation
import PushCrypto

/// An endpoint's signing secret in the Standard Webhooks form: `whsec_` followed by the key's bytes in base64
/// (Standard Webhooks specification, "Signature scheme": symmetric keys of 24 to 64 bytes, shown with the
/// `whsec_` prefix).
///
/// The key never leaves this value as text: its description, debug description and reflection all read
/// `whsec_<redacted>`, so interpolating a secret into a log line, an error or `status` cannot show it.
public struct WebhookSecret: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The prefix the specification gives secrets, so they are recognisable when pasted or leaked.
    public static let prefix = "whsec_"
    /// The key lengths the specification allows, in bytes.
    public static let keyLengths = 24...64

    /// The HMAC-SHA256 key, keyed once for every message signed with it.
    let key: HMACSHA256.Key

    /// Why a text is not a secret. The message never repeats the text.
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Parses `whsec_<base64>`: the standard alphabet, with or without `=` padding (the reference libraries
    /// accept both).
    /// - Throws: ``ParseError`` without the prefix, with bytes outside base64, or with a key outside ``keyLengths``.
    public init(parsing text: String) throws(ParseError) {
        guard text.hasPrefix(Self.prefix) else {
            throw ParseError(message: "a webhook secret starts with \(Self.prefix)")
        }
        var encoded = String(text.dropFirst(Self.prefix.count))
        encoded += String(repeating: "=", count: (4 - encoded.utf8.count % 4) % 4)
        guard let bytes = Data(base64Encoded: encoded) else {
            throw ParseError(message: "a webhook secret is \(Self.prefix) followed by base64")
        }
        guard Self.keyLengths.contains(bytes.count) else {
            throw ParseError(message: "a webhook secret's key is \(Self.keyLengths.lowerBound) to \(Self.keyLengths.upperBound) bytes, not \(bytes.count)")
        }
        self.key = HMACSHA256.Key(Array(bytes))
    }

    /// A new random secret of `length` bytes (OpenSSL's DRBG) and its `whsec_` text, for producers' tools and tests.
    public static func generate(length: Int = 32) -> (secret: WebhookSecret, text: String) {
        precondition(keyLengths.contains(length), "a webhook key is 24 to 64 bytes")
        let text = prefix + Data(SecureRandom.bytes(length)).base64EncodedString()
        // A text made just now from the right number of bytes always parses.
        return (try! WebhookSecret(parsing: text), text)
    }

    public var description: String { "\(Self.prefix)<redacted>" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}
