import Foundation
import Testing
import Worker

/// systemd's own analyzer, when installed.
let systemdAnalyze: String? = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first {
    FileManager.default.isExecutableFile(atPath: $0)
}

/// The unit files in systemd/ as systemd itself reads them: `systemd-analyze verify` (syntax, unknown keys,
/// dependencies, the executable) and `systemd-analyze security --offline=yes` (the exposure score, at most 2.5).
/// Serialized: one systemd-analyze at a time (several at once, each setting up a test-mode manager as root,
/// slowed the rest of the suite on a loaded two-core machine).
@Suite(
    "systemd units", .serialized,
    .enabled(if: systemdAnalyze != nil, "systemd-analyze is not installed (Debian: systemd)"))
struct SystemdUnitTests {
    static let units = ["pushizo-worker.service", "pushizo-worker@.service", "pushizo-worker-migrate.service"]
    static let unitDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("systemd")

    static func text(_ unit: String) throws -> String {
        try String(contentsOf: unitDirectory.appendingPathComponent(unit), encoding: .utf8)
    }

    /// Copies every unit to a fresh directory with the built executable in place of /usr/local/bin's (verify
    /// checks that ExecStart= is executable); `edit` may change one unit's text first.
    static func installedCopy(editing unit: String? = nil, _ edit: (String) -> String = { $0 }) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("units-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for name in units {
            var text = try Self.text(name).replacingOccurrences(
                of: "/usr/local/bin/pushizo-worker", with: GracefulShutdownTests.executable)
            if name == unit { text = edit(text) }
            try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return directory
    }

    /// Runs systemd-analyze; returns its exit status, standard output and standard error.
    static func analyze(_ arguments: [String], in directory: URL) async throws -> (status: Int32, out: String, err: String) {
        try await onThread {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: systemdAnalyze!)
            process.arguments = arguments
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            let outData = out.fileHandleForReading.readDataToEndOfFile()
            let errData = err.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
        }
    }

    /// `verify` exits 0 on mere warnings (an unknown key is "ignored"), so any diagnostic counts as a failure.
    static func verify(_ units: [String], in directory: URL) async throws -> String? {
        let result = try await analyze(["verify", "--man=no"] + units.map { directory.appendingPathComponent($0).path }, in: directory)
        let diagnostics = result.err.trimmingCharacters(in: .whitespacesAndNewlines)
        return result.status == 0 && diagnostics.isEmpty ? nil : "exit \(result.status): \(diagnostics)"
    }

    /// The overall exposure `security --offline=yes` prints per unit ("→ Overall exposure level for X: 1.1 OK"),
    /// in the order given.
    static func exposures(_ units: [String], in directory: URL) async throws -> [Double] {
        let result = try await analyze(
            ["security", "--offline=yes", "--no-pager"] + units.map { directory.appendingPathComponent($0).path },
            in: directory)
        return result.out.split(separator: "\n").filter { $0.contains("Overall exposure level") }.compactMap { line in
            line.lastIndex(of: ":").flatMap { Double(line[line.index(after: $0)...].split(separator: " ").first ?? "") }
        }
    }

    /// One systemd-analyze run for all units (each run sets up a test-mode manager; fewer runs, less load).
    @Test func everyUnitVerifiesCleanly() async throws {
        let directory = try Self.installedCopy()
        defer { try? FileManager.default.removeItem(at: directory) }
        let problem = try await Self.verify(Self.units, in: directory)
        #expect(problem == nil, "\(problem ?? "")")
    }

    @Test func everyUnitsExposureIsAtMostTwoAndAHalf() async throws {
        let directory = try Self.installedCopy()
        defer { try? FileManager.default.removeItem(at: directory) }
        let scores = try await Self.exposures(Self.units, in: directory)
        #expect(scores.count == Self.units.count, "scores: \(scores)")
        for (unit, score) in zip(Self.units, scores) {
            #expect(score <= 2.5, "\(unit) scores \(score)")
        }
    }

    /// The checks above can fail: a misspelt hardening key is reported by verify and raises the score.
    @Test func aMisspeltHardeningKeyIsCaught() async throws {
        let unit = "pushizo-worker.service"
        let directory = try Self.installedCopy(editing: unit) {
            $0.replacingOccurrences(of: "\nCapabilityBoundingSet=\n", with: "\nCapabilityBoundingSett=\n")
        }
        defer { try? FileManager.default.removeItem(at: directory) }
        let problem = try await Self.verify([unit], in: directory)
        #expect(problem?.contains("CapabilityBoundingSett") == true, "\(problem ?? "no diagnostic")")
        let score = try #require(try await Self.exposures([unit], in: directory).first)
        #expect(score > 2.5, "an unbounded capability set still scores \(score)")
    }

    /// The template's hardening is the single unit's, line for line (one place to review, no drift).
    @Test func theTemplateIsHardenedLikeTheSingleUnit() throws {
        func hardening(_ unit: String) throws -> [Substring] {
            let text = try Self.text(unit)
            let start = try #require(text.range(of: "# --- Identity"), "\(unit) has no hardening block")
            let end = text.range(of: "\n[Install]", range: start.upperBound..<text.endIndex)?.lowerBound ?? text.endIndex
            return text[start.lowerBound..<end].split(separator: "\n")
        }
        let single = try hardening("pushizo-worker.service")
        #expect(single.count > 40)
        #expect(try hardening("pushizo-worker@.service") == single)
        #expect(try hardening("pushizo-worker-migrate.service") == single)
    }

    /// systemd's SIGKILL must not cut the worker's own shutdown short: TimeoutStopSec stays above
    /// PUSHIZO_SHUTDOWN_TIMEOUT's default plus the 10 s the process allows itself after it.
    @Test(arguments: ["pushizo-worker.service", "pushizo-worker@.service"])
    func theStopTimeoutCoversTheWorkersOwnDeadline(unit: String) throws {
        let text = try Self.text(unit)
        let value = try #require(
            text.split(separator: "\n").first { $0.hasPrefix("TimeoutStopSec=") }?.dropFirst("TimeoutStopSec=".count))
        let stop = try #require(DurationText.parse(String(value)))
        let defaults = try WorkerConfiguration(
            ConfigurationReader(environment: ["PUSHIZO_DATABASE_URL": "host=/tmp"], arguments: [], keys: WorkerConfiguration.keys))
        #expect(stop > defaults.shutdownTimeout + .seconds(10))
        #expect(text.contains("\nWatchdogSec="))
        #expect(text.contains("\nRequires=pushizo-worker-migrate.service\n"))
    }
}
