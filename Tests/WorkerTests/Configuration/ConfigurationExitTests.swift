import Foundation
import Testing

/// The executable refuses bad settings before doing anything: exit 78 (EX_CONFIG) and a message naming the key.
@Suite("Configuration errors of the executable")
struct ConfigurationExitTests {
    /// Runs `pushizo-worker <arguments>` with `environment`; returns its exit status and stderr.
    static func run(_ arguments: [String], environment: [String: String]) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { old, _ in old }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = try await onThread { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        return (process.terminationStatus, text)
    }

    @Test(arguments: ["run", "check"])
    func aCAFileThatDoesNotParseStopsStartUp(command: String) async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-ca-\(UUID()).pem").path
        try "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        // The database URL points nowhere: the configuration must be refused before any connection.
        let (status, text) = try await Self.run(
            [command], environment: ["PUSHIZO_DATABASE_URL": "host=/nonexistent", "PUSHIZO_CA_FILE": path])
        #expect(status == 78)
        #expect(text.contains("PUSHIZO_CA_FILE"), "stderr: \(text)")
    }

    @Test func aDeadlineThatDoesNotFitTheLeaseStopsStartUp() async throws {
        let (status, text) = try await Self.run(
            ["run", "--lease-seconds", "10", "--request-timeout", "8"],
            environment: ["PUSHIZO_DATABASE_URL": "host=/nonexistent"])
        #expect(status == 78)
        #expect(text.contains("PUSHIZO_REQUEST_TIMEOUT") && text.contains("PUSHIZO_LEASE_SECONDS"), "stderr: \(text)")
    }

    /// `check` reports every configuration problem in one run: each unknown variable, a missing required key,
    /// and each bad value, not only the first.
    @Test func checkReportsEveryProblemAtOnce() async throws {
        let (status, text) = try await Self.run(
            ["check", "--claim-batch", "0", "--log-level", "loud"],
            environment: ["PUSHIZO_FOO": "1", "PUSHIZO_BAR": "2", "PUSHIZO_CONCURRENCY": "abc"])
        #expect(status == 78)
        for key in ["PUSHIZO_FOO", "PUSHIZO_BAR", "PUSHIZO_DATABASE_URL", "PUSHIZO_CONCURRENCY", "PUSHIZO_CLAIM_BATCH", "PUSHIZO_LOG_LEVEL"] {
            #expect(text.contains("configuration key \(key) "), "\(key) missing from: \(text)")
        }
        #expect(text.split(separator: "\n").count == 6, "\(text)")
    }
}
