import DeliveryCore
import Foundation
import PushCrypto

/// APNs certificate-based credentials of one app channel (Apple: "Establishing a certificate-based connection
/// to APNs"): a client certificate and its key, presented in the TLS handshake instead of a provider token on
/// every request, and the topic (bundle ID) the app's pushes go to. `description` redacts the key.
///
/// Settings, one of:
/// - PEM: `{"certificate": "-----BEGIN CERTIFICATE-----...", "private_key": "-----BEGIN PRIVATE KEY-----...",
///   "private_key_password": "...", "topic": "com.example.app"}`; `private_key` may be left out when
///   `certificate` holds the key too; `private_key_password` only for an `ENCRYPTED PRIVATE KEY` (or a
///   traditional encrypted PEM).
/// - PKCS#12: `{"pkcs12": "<base64 of the .p12>", "pkcs12_password": "...", "topic": "com.example.app"}`, the
///   file as Keychain Access or the developer portal's export gives it.
///
/// `topic` defaults to the certificate's bundle ID (subject `UID`); when given, it must be one the certificate
/// covers (``ApplePushCertificate/allows(topic:)``).
public struct APNsCertificateCredentials: Sendable, CustomStringConvertible {
    public var identity: ClientCertificateIdentity
    /// Apple's reading of the certificate: bundle ID, topics, environments.
    public var apple: ApplePushCertificate
    public var topic: String

    /// Whether `settings` configure certificate-based authentication: they hold `certificate` or `pkcs12`.
    public static func isCertificateSettings(_ settings: JSONValue) -> Bool {
        settings["certificate"] != nil || settings["pkcs12"] != nil
    }

    /// Reads `app_channels.settings` for provider `apns` with certificate-based authentication (see the type's
    /// documentation for the shapes). Whitespace around values is trimmed; a PEM whose line breaks were stored
    /// as the two characters `\n` is repaired; base64 may be wrapped over lines.
    /// - Throws: ``ProviderConfigurationError`` naming the key at fault: both `certificate` and `pkcs12`,
    ///   token fields (`team_id`, `key_id`) mixed in, an unreadable certificate, key or PKCS#12, a wrong password,
    ///   a key that does not match the certificate, or a `topic` the certificate does not cover. Messages carry
    ///   OpenSSL's reason and public certificate facts only: never the key, the PKCS#12 data or a password.
    public init(settings: JSONValue) throws(ProviderConfigurationError) {
        guard settings.objectValue != nil else {
            throw ProviderConfigurationError(code: .invalidValue, key: "settings", message: "must be a JSON object")
        }
        func optionalText(_ key: String, trim: Bool = true) throws(ProviderConfigurationError) -> String? {
            guard let value = settings[key], !value.isNull else { return nil }
            guard let text = value.stringValue else {
                throw ProviderConfigurationError(code: .invalidValue, key: key, message: "must be a string")
            }
            return trim ? text.trimmingCharacters(in: .whitespacesAndNewlines) : text
        }
        func pem(_ key: String) throws(ProviderConfigurationError) -> [UInt8]? {
            guard var text = try optionalText(key), !text.isEmpty else { return nil }
            if !text.contains("\n"), text.contains("\\n") { text = text.replacingOccurrences(of: "\\n", with: "\n") }
            return Array(text.utf8)
        }
        for tokenKey in ["team_id", "key_id"] where settings[tokenKey] != nil {
            throw ProviderConfigurationError(
                code: .invalidValue, key: tokenKey,
                message: "is a token-based setting; a certificate-based channel (`certificate` or `pkcs12`) must not have it")
        }
        if settings["certificate"] != nil, settings["pkcs12"] != nil {
            throw ProviderConfigurationError(code: .invalidValue, key: "pkcs12", message: "give either `certificate` (PEM) or `pkcs12`, not both")
        }
        if settings["pkcs12"] != nil {
            guard let base64 = try optionalText("pkcs12"), !base64.isEmpty,
                  let data = Data(base64Encoded: base64, options: .ignoreUnknownCharacters), !data.isEmpty
            else {
                throw ProviderConfigurationError(code: .invalidValue, key: "pkcs12", message: "must be the base64 of a .p12 file")
            }
            // A password is a password: spaces around it are part of it.
            let password = try optionalText("pkcs12_password", trim: false) ?? ""
            do throws(CryptoError) {
                identity = try ClientCertificateIdentity(pkcs12: Array(data), password: password)
            } catch {
                throw ProviderConfigurationError(code: .invalidValue, key: "pkcs12", message: "is not a usable PKCS#12 identity (\(error.message))")
            }
        } else {
            guard let certificate = try pem("certificate") else {
                throw ProviderConfigurationError(code: .invalidValue, key: "certificate", message: "must be a non-empty PEM string")
            }
            let password = try optionalText("private_key_password", trim: false)
            let privateKey = try pem("private_key")
            do throws(CryptoError) {
                identity = try ClientCertificateIdentity(certificatePEM: certificate, privateKeyPEM: privateKey, password: password)
            } catch {
                let key = error.code == .invalidKey ? (settings["private_key"] != nil ? "private_key" : "certificate") : "certificate"
                throw ProviderConfigurationError(code: .invalidValue, key: key, message: "is not usable (\(error.message))")
            }
        }
        apple = ApplePushCertificate(identity.certificate)
        if let configured = try optionalText("topic"), !configured.isEmpty {
            topic = configured
        } else if let bundleID = apple.bundleID {
            topic = bundleID
        } else {
            throw ProviderConfigurationError(
                code: .missingKey, key: "topic", message: "is required: the certificate names no bundle ID (subject UID)")
        }
        guard HTTPFieldValue.isVisibleASCII(topic) else {
            throw ProviderConfigurationError(
                code: .invalidValue, key: "topic", message: "must be the app's bundle ID: visible ASCII without spaces or control characters")
        }
        guard apple.allows(topic: topic) else {
            throw ProviderConfigurationError(
                code: .invalidValue, key: "topic",
                message: "`\(topic)` is not covered by the certificate (it covers \(apple.topics.joined(separator: ", ")))")
        }
    }

    /// Whole days until the certificate's `notAfter` (negative once expired), rounded down.
    public func daysLeft(now: Date) -> Int {
        Int((identity.certificate.notAfter.timeIntervalSince(now) / 86400).rounded(.down))
    }

    public var description: String {
        "APNsCertificateCredentials(topic: \(topic), certificate: \(identity.certificate.fingerprint), privateKey: <redacted>)"
    }
}
