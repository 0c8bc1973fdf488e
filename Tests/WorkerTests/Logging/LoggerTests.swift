import Foundation
import Testing
@testable import Worker

/// The log sink never ends the process: a line that cannot be written is dropped.
@Suite("Logging to a stderr that is gone")
struct LoggerTests {
    /// The real executable (the emulator command, which logs a line when it listens and one when it stops) with
    /// stderr a pipe whose reader has gone, as when a journal stream is closed: every write fails with `EPIPE`
    /// (SIGPIPE is ignored), and the process goes on and stops normally.
    @Test func aClosedStderrDropsLinesAndTheProcessGoesOn() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-log-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ready = directory + "/ready"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = [
            "emulator", "--emulator-listen", "127.0.0.1:0", "--emulator-cleartext", "--emulator-ready-file", ready,
        ]
        process.environment = ["PUSHIZO_LOG_LEVEL": "notice", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]
        let stderr = Pipe()
        process.standardError = stderr
        try stderr.fileHandleForReading.close()
        try process.run()
        try stderr.fileHandleForWriting.close()

        // The ready file comes after the "emulator listening" line (hang guard 30 s, not a timing assertion).
        let deadline = ContinuousClock.now + .seconds(30)
        while process.isRunning, !FileManager.default.fileExists(atPath: ready), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(FileManager.default.fileExists(atPath: ready))
        #expect(process.isRunning)
        process.terminate()
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 0)
    }
}
