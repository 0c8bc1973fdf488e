import Foundation
import DeliveryCore
import PushCrypto

/// Why an `app_channels.settings` document cannot configure a provider channel. Names the offending key;
/// never contains the private key or any other secret.
public struct ProviderConfigurationError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public static let missingKey = Code("missingKey")
        public static let invalidValue = Code("invalidValue")
        public var description: String { name }
    }

    public var code: Code
    /// The settings key at fault, e.g. `private_key`.
    public var key: String
    public var message: String

    public init(code: Code, key: String, message: String) {
        self.code = code
        self.key = key
        self.message = message
    }

    public var description: String { "app channel settings `\(key)`: \(message)" }
}

/// APNs token-based credentials of one app channel (Apple: "Establishing a token-based connection to
/// APNs"): the 10-character Team ID, the Key ID of the `.p8` signing key, the key itself, and the topic
/// (the app's bundle ID). `description` redacts the key.
public struct APNsCredentials: Sendable, CustomStringConvertible {
    public var teamID: String
    public var keyID: String
    public var privateKey: P256PrivateKey
    public var topic: String

    public init(teamID: String, keyID: String, privateKey: P256PrivateKey, topic: String) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
        self.topic = topic
    }

    /// Reads `app_channels.settings` for provider `apns`:
    /// `{"team_id": "DEF123GHIJ", "key_id": "ABC123DEFG", "private_key": "-----BEGIN PRIVATE KEY-----\n...", "topic": "com.example.app"}`.
    /// `team_id` and `key_id` must be non-empty ASCII letters and digits (Apple issues 10 characters; other
    /// lengths are accepted for emulators). `topic` must be visible ASCII (`0x21...0x7E`: no space, CR, LF or
    /// other control character, no non-ASCII), since it is sent as the `apns-topic` header and a bad value
    /// would fail every request at the HTTP/2 layer. Whitespace around any value is trimmed. A `private_key`
    /// whose line breaks were stored as the two characters `\n` (a common copy-paste accident) is repaired.
    /// - Throws: `ProviderConfigurationError` naming the missing or bad key; the PEM is never echoed.
    public init(settings: JSONValue) throws(ProviderConfigurationError) {
        guard settings.objectValue != nil else {
            throw ProviderConfigurationError(code: .invalidValue, key: "settings", message: "must be a JSON object")
        }
        func text(_ key: String) throws(ProviderConfigurationError) -> String {
            guard let value = settings[key], !value.isNull else {
                throw ProviderConfigurationError(code: .missingKey, key: key, message: "is required for APNs token authentication")
            }
            guard let text = value.stringValue?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else {
                throw ProviderConfigurationError(code: .invalidValue, key: key, message: "must be a non-empty string")
            }
            return text
        }
        func identifier(_ key: String) throws(ProviderConfigurationError) -> String {
            let value = try text(key)
            guard value.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) }) else {
                throw ProviderConfigurationError(code: .invalidValue, key: key, message: "must be ASCII letters and digits (Apple's 10-character identifier)")
            }
            return value
        }
        teamID = try identifier("team_id")
        keyID = try identifier("key_id")
        topic = try text("topic")
        guard HTTPFieldValue.isVisibleASCII(topic) else {
            throw ProviderConfigurationError(code: .invalidValue, key: "topic",
                                             message: "must be the app's bundle ID: visible ASCII without spaces or control characters")
        }
        var pem = try text("private_key")
        if !pem.contains("\n"), pem.contains("\\n") { pem = pem.replacingOccurrences(of: "\\n", with: "\n") }
        do {
            privateKey = try P256PrivateKey(pem: pem)
        } catch {
            throw ProviderConfigurationError(code: .invalidValue, key: "private_key", message: "is not a usable PKCS#8 P-256 key (\((error as? CryptoError)?.message ?? "unreadable"))")
        }
    }

    public var description: String {
        "APNsCredentials(teamID: \(teamID), keyID: \(keyID), topic: \(topic), privateKey: <redacted>)"
    }
}
