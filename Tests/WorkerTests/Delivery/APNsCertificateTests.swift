import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Providers
import PushCrypto
import Testing
@testable import Worker

/// Certificate-based APNs credentials: PEM and PKCS#12 read with OpenSSL, Apple's bundle/topic/environment
/// extensions, the checks made before sending, one HTTP/2 client per certificate, and no secret in any error.
@Suite("APNs certificate credentials")
struct APNsCertificateTests {
    static let bundleID = "dev.pushizo.cert"

    static func credentials(_ json: String) throws -> APNsCertificateCredentials {
        try APNsCertificateCredentials(settings: try JSONValue(parsing: json))
    }

    static func settingsError(_ json: String) -> ProviderConfigurationError? {
        do {
            _ = try credentials(json)
            return nil
        } catch let error as ProviderConfigurationError {
            return error
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    @Test func pemCertificateAndKeyGiveTheBundleTopicsEnvironmentsAndFingerprint() throws {
        let fixtures = try ClientCertificateFixtures([ClientCertificateFixtures.apple("main", bundleID: Self.bundleID)])
        defer { fixtures.remove() }
        let credentials = try Self.credentials(try fixtures.pemSettings("main"))
        #expect(credentials.topic == Self.bundleID)  // defaulted from the subject UID
        #expect(credentials.apple.bundleID == Self.bundleID)
        #expect(credentials.apple.topics == [Self.bundleID, "\(Self.bundleID).voip", "\(Self.bundleID).complication"])
        #expect(credentials.apple.environments == [.development, .production])
        #expect(credentials.identity.certificate.fingerprint.count == 64)
        #expect(credentials.daysLeft(now: Date()) == 364)
        #expect(credentials.apple.allows(topic: "\(Self.bundleID).voip"))
        #expect(!credentials.apple.allows(topic: "dev.pushizo.other"))
        #expect(!"\(credentials)".contains("PRIVATE KEY"))

        // The certificate and key in one PEM text: `private_key` may be left out.
        let combined = ClientCertificateFixtures.json(["certificate": try fixtures.certificatePEM("main") + fixtures.keyPEM("main")])
        #expect(try Self.credentials(combined).identity.certificate == credentials.identity.certificate)
    }

    @Test func pkcs12WithItsPasswordIsTheSameIdentityAsThePEM() throws {
        let fixtures = try ClientCertificateFixtures([ClientCertificateFixtures.apple("main", bundleID: Self.bundleID)])
        defer { fixtures.remove() }
        let fromPEM = try Self.credentials(try fixtures.pemSettings("main"))
        let fromP12 = try Self.credentials(try fixtures.pkcs12Settings("main"))
        #expect(fromP12.identity.certificate == fromPEM.identity.certificate)
        #expect(fromP12.topic == Self.bundleID)

        let wrong = Self.settingsError(try fixtures.pkcs12Settings("main", password: "not-it"))
        #expect(wrong?.key == "pkcs12")
        #expect(wrong?.message.contains("wrong password") == true, "\(String(describing: wrong))")
        let base64 = Data(try fixtures.pkcs12("main")).base64EncodedString()
        #expect(!"\(String(describing: wrong))".contains(base64.prefix(40)))
        #expect(!"\(String(describing: wrong))".contains("not-it"))
        #expect(Self.settingsError(#"{"pkcs12": "%%% not base64 %%%"}"#)?.key == "pkcs12")
        #expect(Self.settingsError(#"{"pkcs12": "aGVsbG8="}"#)?.message.contains("not a DER PKCS#12") == true)
    }

    /// Keychain Access and `openssl pkcs12 -export -legacy` encrypt with RC2-40 / 3DES, which OpenSSL 3 keeps in
    /// its legacy provider: such a file must still open.
    @Test func legacyEncryptedPKCS12AsKeychainExportsIt() async throws {
        guard let openssl = findExecutable("openssl") else {
            print("SKIPPED legacyEncryptedPKCS12AsKeychainExportsIt: the openssl command is not installed")
            return
        }
        let fixtures = try ClientCertificateFixtures([ClientCertificateFixtures.apple("main", bundleID: Self.bundleID)])
        defer { fixtures.remove() }
        let path = fixtures.directory + "/legacy.p12"
        let (status, output) = try await runTool(openssl, [
            "pkcs12", "-export", "-legacy", "-in", fixtures.files["main"]!.certificate, "-inkey", fixtures.files["main"]!.privateKey,
            "-passout", "pass:legacy-pass", "-out", path,
        ])
        #expect(status == 0, "\(output)")
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let credentials = try Self.credentials(
            ClientCertificateFixtures.json(["pkcs12": data.base64EncodedString(options: .lineLength64Characters), "pkcs12_password": "legacy-pass"]))
        #expect(credentials.topic == Self.bundleID)
    }

    @Test func encryptedPEMKeyNeedsItsPasswordAndNeverPrompts() async throws {
        guard let openssl = findExecutable("openssl") else {
            print("SKIPPED encryptedPEMKeyNeedsItsPasswordAndNeverPrompts: the openssl command is not installed")
            return
        }
        let fixtures = try ClientCertificateFixtures([ClientCertificateFixtures.apple("main", bundleID: Self.bundleID)])
        defer { fixtures.remove() }
        let path = fixtures.directory + "/encrypted.pem"
        let (status, output) = try await runTool(openssl, [
            "pkey", "-in", fixtures.files["main"]!.privateKey, "-aes256", "-passout", "pass:key-pass", "-out", path,
        ])
        #expect(status == 0, "\(output)")
        let encrypted = try String(contentsOfFile: path, encoding: .utf8)
        #expect(encrypted.contains("ENCRYPTED PRIVATE KEY"))
        let certificate = try fixtures.certificatePEM("main")
        let good = try Self.credentials(ClientCertificateFixtures.json(
            ["certificate": certificate, "private_key": encrypted, "private_key_password": "key-pass"]))
        #expect(good.topic == Self.bundleID)
        // Without a password (OpenSSL's default callback would read the terminal) and with a wrong one: errors.
        let missing = Self.settingsError(ClientCertificateFixtures.json(["certificate": certificate, "private_key": encrypted]))
        #expect(missing?.key == "private_key")
        #expect(missing?.message.contains("no password given") == true, "\(String(describing: missing))")
        let wrong = Self.settingsError(ClientCertificateFixtures.json(
            ["certificate": certificate, "private_key": encrypted, "private_key_password": "guess-pass"]))
        #expect(wrong?.key == "private_key")
        #expect(!"\(String(describing: wrong))".contains("guess-pass"))
        #expect(!"\(String(describing: wrong))".contains("BEGIN"))
    }

    @Test func aKeyOfAnotherCertificateIsRefused() throws {
        let fixtures = try ClientCertificateFixtures([
            ClientCertificateFixtures.apple("main", bundleID: Self.bundleID), ClientCertificateFixtures.apple("other", bundleID: "dev.pushizo.other"),
        ])
        defer { fixtures.remove() }
        let error = Self.settingsError(ClientCertificateFixtures.json(
            ["certificate": try fixtures.certificatePEM("main"), "private_key": try fixtures.keyPEM("other")]))
        #expect(error?.key == "private_key")
        #expect(error?.message.contains("does not belong to the certificate") == true, "\(String(describing: error))")
        #expect(Self.settingsError(ClientCertificateFixtures.json(["certificate": "not a pem"]))?.key == "certificate")
    }

    @Test func aTopicTheCertificateDoesNotCoverIsAConfigurationError() throws {
        let fixtures = try ClientCertificateFixtures([
            ClientCertificateFixtures.apple("main", bundleID: Self.bundleID),
            ClientCertificateFixtures.apple("plain", bundleID: "dev.pushizo.plain", topics: false),
        ])
        defer { fixtures.remove() }
        #expect(try Self.credentials(try fixtures.pemSettings("main", topic: "\(Self.bundleID).voip")).topic == "\(Self.bundleID).voip")
        let error = Self.settingsError(try fixtures.pemSettings("main", topic: "com.example.someone-else"))
        #expect(error?.key == "topic")
        // Without the topics extension the bundle ID (UID) alone is covered.
        let plain = try Self.credentials(try fixtures.pemSettings("plain"))
        #expect(plain.apple.topics == ["dev.pushizo.plain"])
        #expect(!plain.apple.allows(topic: "dev.pushizo.plain.voip"))
        // Certificate and token settings mixed, or both certificate forms: refused, naming the key.
        let mixed = try JSONValue(parsing: try fixtures.pemSettings("main"))
        var object = mixed.objectValue!
        object["team_id"] = .string("TEAM123456")
        #expect(Self.settingsError(JSONValue.object(object).jsonText)?.key == "team_id")
    }

    @Test func certificateRequestsCarryNoAuthorizationHeader() throws {
        let delivery = APNsDelivery(
            deviceToken: Seed.token(), topic: Self.bundleID, apnsID: UUID(),
            message: try NotificationMessage(json: ["contents": ["en": "hi"]]), msgID: "m", now: Date())
        let request = try APNsRequestFactory.makeCertificateRequest(delivery)
        #expect(!request.headers.contains { $0.name == "authorization" })
        #expect(request.headers.contains { $0.name == "apns-topic" && $0.value == Self.bundleID })
        let tokenRequest = try APNsRequestFactory.makeRequest(delivery, bearerToken: "abc.def.ghi")
        #expect(request.headers == tokenRequest.headers.filter { $0.name != "authorization" })
        #expect(request.body == tokenRequest.body)
    }

    /// Apps sharing a certificate share its client (one pool); different certificates never do. Past the bound
    /// the least recently used client is dropped.
    @Test func oneClientPerCertificate() async throws {
        let fixtures = try ClientCertificateFixtures([
            ClientCertificateFixtures.apple("a", bundleID: "dev.pushizo.a", notAfterOffset: 90 * 86400),
            ClientCertificateFixtures.apple("b", bundleID: "dev.pushizo.b", notAfterOffset: 30 * 86400),
            ClientCertificateFixtures.apple("c", bundleID: "dev.pushizo.c"),
        ])
        defer { fixtures.remove() }
        let a = try Self.credentials(try fixtures.pemSettings("a"))
        let aFromP12 = try Self.credentials(try fixtures.pkcs12Settings("a"))
        let b = try Self.credentials(try fixtures.pemSettings("b"))
        let c = try Self.credentials(try fixtures.pemSettings("c"))
        let loop = try HTTP2EventLoop(name: "test-cert-clients")
        defer { loop.shutdown() }
        let metrics = WorkerMetrics()
        let gauge = metrics.credentialExpiry
        let made = Counter()
        let clients = APNsSender.CertificateClients(capacity: 2, expiry: gauge) { identity in
            made.increment()
            return HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(clientIdentity: identity))
        }
        let first = clients.client(for: a.identity)
        #expect(clients.client(for: aFromP12.identity) === first)
        let second = clients.client(for: b.identity)
        #expect(second !== first)
        #expect(made.value == 2)
        let kind = LabelValues(APNsSender.CertificateClients.expiryKind)
        #expect(gauge.value(kind) == b.identity.certificate.notAfter.timeIntervalSince1970)
        _ = clients.client(for: c.identity)  // evicts a (least recently used)
        #expect(clients.count == 2)
        #expect(clients.client(for: a.identity) !== first)
        #expect(made.value == 4)
        await clients.shutdown()
        #expect(clients.count == 0)
    }

    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func increment() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }
}
