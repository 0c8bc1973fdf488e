import Foundation
import Testing
@testable import Worker

/// The per-delivery deadline and the CA file are checked at start-up.
@Suite("Deadlines and the CA file in the configuration")
struct DeadlineConfigurationTests {
    let base = ["PUSHIZO_DATABASE_URL": "host=/tmp"]

    func configuration(_ extra: [String: String]) throws -> WorkerConfiguration {
        try WorkerConfiguration(
            ConfigurationReader(environment: base.merging(extra) { _, new in new }, arguments: [], keys: WorkerConfiguration.keys))
    }

    /// What reading the configuration and mapping it for the runtime (``WorkerConfiguration/trustRoots()``) refuses.
    func refusal(_ extra: [String: String]) -> ConfigurationError? {
        do {
            _ = try configuration(extra).trustRoots()
            return nil
        } catch {
            return error as? ConfigurationError
        }
    }

    @Test func theDefaultDeadlineFitsTheLease() throws {
        let defaults = try configuration([:])
        #expect(defaults.deliveryTimeout == .seconds(60))
        #expect(defaults.maxUncountedRetries == 100)
        let short = try configuration(["PUSHIZO_LEASE_SECONDS": "5", "PUSHIZO_REQUEST_TIMEOUT": "1"])
        #expect(short.deliveryTimeout == .seconds(2))
    }

    @Test func aDeadlineOverHalfTheLeaseNamesBothKeys() throws {
        let refused = try #require(refusal(["PUSHIZO_LEASE_SECONDS": "60", "PUSHIZO_DELIVERY_TIMEOUT": "40"]))
        #expect(refused.key == "PUSHIZO_DELIVERY_TIMEOUT")
        #expect(refused.description.contains("PUSHIZO_LEASE_SECONDS"))
    }

    @Test func aRequestTimeoutOverTheDeadlineNamesBothKeys() throws {
        let explicit = try #require(refusal(["PUSHIZO_REQUEST_TIMEOUT": "30", "PUSHIZO_DELIVERY_TIMEOUT": "20"]))
        #expect(explicit.key == "PUSHIZO_REQUEST_TIMEOUT")
        #expect(explicit.description.contains("PUSHIZO_DELIVERY_TIMEOUT"))
        // The derived deadline is half the lease: a request timeout above it names the lease.
        let derived = try #require(refusal(["PUSHIZO_LEASE_SECONDS": "40", "PUSHIZO_REQUEST_TIMEOUT": "30"]))
        #expect(derived.key == "PUSHIZO_REQUEST_TIMEOUT")
        #expect(derived.description.contains("PUSHIZO_LEASE_SECONDS"))
    }

    /// A lease too short for the default request timeout names the lease, the key the operator set, and the rule
    /// (twice the request timeout); a delivery timeout set below the default request timeout names itself.
    @Test func aShortLeaseWithTheDefaultRequestTimeoutNamesTheLease() throws {
        let lease = try #require(refusal(["PUSHIZO_LEASE_SECONDS": "30s"]))
        #expect(lease.key == "PUSHIZO_LEASE_SECONDS", "\(lease)")
        #expect(lease.description.contains("twice the request timeout"), "\(lease)")
        let delivery = try #require(refusal(["PUSHIZO_DELIVERY_TIMEOUT": "10"]))
        #expect(delivery.key == "PUSHIZO_DELIVERY_TIMEOUT", "\(delivery)")
    }

    /// `help` states the lease's real rule, not "above the request timeout".
    @Test func helpStatesTheLeasesRule() {
        let line = ConfigurationKey.leaseSeconds.summary
        #expect(line.contains("at least twice PUSHIZO_REQUEST_TIMEOUT"), "\(line)")
    }

    @Test func aCAFileThatIsNotPEMCertificatesIsRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ca-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let garbage = "\(directory)/garbage.pem"
        try "not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        let broken = "\(directory)/broken.pem"
        try "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".write(toFile: broken, atomically: true, encoding: .utf8)
        for path in ["\(directory)/missing.pem", directory, garbage, broken] {
            let refused = try #require(refusal(["PUSHIZO_CA_FILE": path]), "\(path) accepted")
            #expect(refused.key == "PUSHIZO_CA_FILE")
        }
    }
}
