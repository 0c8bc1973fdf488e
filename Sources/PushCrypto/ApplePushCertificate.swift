/// What an Apple push certificate ("Apple Push Notification service SSL") says about the app and environment it
/// serves, as Apple's developer portal issues them (Apple: "Establishing a certificate-based connection to
/// APNs"; the OIDs are those of Apple's WWDR certificate policy):
///
/// - the app's bundle ID in the subject `UID` (OID 0.9.2342.19200300.100.1.1);
/// - the topics it may push to in extension 1.2.840.113635.100.6.3.6 (universal certificates: the bundle ID,
///   `<bundle>.voip`, `<bundle>.complication`), a DER `SEQUENCE` of `UTF8String` topics each followed by a
///   `SEQUENCE` of its service names;
/// - the environments: extension 1.2.840.113635.100.6.3.1 (development, `api.sandbox.push.apple.com`) and
///   1.2.840.113635.100.6.3.2 (production, `api.push.apple.com`); a "Sandbox & Production" certificate has both.
///
/// A certificate that names neither a topic nor an environment (not issued by Apple, e.g. a test CA's) leaves
/// that check unknowable: ``allows(topic:)`` and ``serves(_:)`` then answer `true`.
public struct ApplePushCertificate: Sendable, Hashable {
    /// The APNs environments.
    public enum Environment: String, Sendable, Hashable, CaseIterable {
        case development, production
    }

    public static let userIDOID = "0.9.2342.19200300.100.1.1"
    public static let developmentOID = "1.2.840.113635.100.6.3.1"
    public static let productionOID = "1.2.840.113635.100.6.3.2"
    public static let topicsOID = "1.2.840.113635.100.6.3.6"

    /// The bundle ID (subject `UID`), when present.
    public var bundleID: String?
    /// The topics the certificate may push to: the topics extension's, else the bundle ID alone; empty when
    /// the certificate names none.
    public var topics: [String]
    /// The environments its extensions name; empty when it names none.
    public var environments: Set<Environment>

    public init(_ certificate: X509CertificateFacts) {
        bundleID = certificate.subjectUserID
        if let der = certificate.extensions[Self.topicsOID], let listed = ClientCertificateIdentity.sequenceStrings(der),
           !listed.isEmpty
        {
            topics = listed
        } else {
            topics = bundleID.map { [$0] } ?? []
        }
        var environments: Set<Environment> = []
        if certificate.extensions[Self.developmentOID] != nil { environments.insert(.development) }
        if certificate.extensions[Self.productionOID] != nil { environments.insert(.production) }
        self.environments = environments
    }

    /// Whether a request with `apns-topic: topic` is covered (always, when the certificate names no topic).
    public func allows(topic: String) -> Bool {
        topics.isEmpty || topics.contains(topic)
    }

    /// Whether the certificate may connect to `environment`'s host (always, when it names no environment).
    public func serves(_ environment: Environment) -> Bool {
        environments.isEmpty || environments.contains(environment)
    }

    /// The topics extension's DER for `bundleID` (what Apple's universal certificates carry): the bundle ID
    /// with service `app`, then `<bundle>.voip` with `voip` and `<bundle>.complication` with `complication` when
    /// asked. For test certificates and the emulator.
    public static func topicsExtension(bundleID: String, voip: Bool = true, complication: Bool = true) -> [UInt8] {
        var members: [UInt8] = []
        members += utf8String(bundleID) + sequence(utf8String("app"))
        if voip { members += utf8String(bundleID + ".voip") + sequence(utf8String("voip")) }
        if complication { members += utf8String(bundleID + ".complication") + sequence(utf8String("complication")) }
        return sequence(members)
    }

    /// DER `NULL`, the value of the environment extensions in test certificates.
    public static let nullExtension: [UInt8] = [0x05, 0x00]

    private static func utf8String(_ text: String) -> [UInt8] { tagged(0x0C, Array(text.utf8)) }
    private static func sequence(_ contents: [UInt8]) -> [UInt8] { tagged(0x30, contents) }
    private static func tagged(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        let count = contents.count
        if count < 0x80 { return [tag, UInt8(count)] + contents }
        if count < 0x100 { return [tag, 0x81, UInt8(count)] + contents }
        return [tag, 0x82, UInt8(count >> 8), UInt8(count & 0xFF)] + contents
    }
}
