import Foundation
import Glibc
import SocketTestSupport
import Testing

/// `pushizo-worker emulator` run out of file descriptors (util-linux's `prlimit` lowers the limit for it): its
/// listener must not spin on connections it cannot accept.
@Suite("The emulator at its descriptor limit")
struct EmulatorDescriptorLimitTests {
    /// Near its open-file limit the emulator closes new connections as soon as it accepts them, keeping the last
    /// descriptors for the runtime: libdispatch traps when it cannot create its own, and the emulator died with
    /// SIGILL at the limit while the full suite ran. Should accept still fail with EMFILE, it accepts and closes
    /// with a spare descriptor: the pending connection stayed queued before, which level-triggered epoll reported
    /// again at once, and the I/O thread took a whole core until connections closed. Either way the client sees
    /// its connection end, and the emulator stays idle and alive.
    @Test func acceptAtTheDescriptorLimitClosesInsteadOfSpinning() async throws {
        let prlimit = "/usr/bin/prlimit"
        try #require(FileManager.default.isExecutableFile(atPath: prlimit), "util-linux's prlimit is missing")
        let ready = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-port-\(UUID())").path
        defer { unlink(ready) }
        // The child may inherit this process's descriptors (the test runner holds many while other suites run):
        // its limit counts them in, and the connections below pass it whatever it inherited.
        let inherited = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        let limit = inherited + 64
        let process = Process()
        process.executableURL = URL(fileURLWithPath: prlimit)
        process.arguments = [
            "--nofile=\(limit):\(limit)", GracefulShutdownTests.executable, "emulator", "--emulator-cleartext",
            "--emulator-listen", "127.0.0.1:0", "--emulator-ready-file", ready, "--log-level", "warning",
        ]
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-log-\(UUID())").path
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        defer { unlink(log) }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        try process.run()
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        // Until the emulator writes its port or exits; the bound is only a hang guard (a start on two cores busy
        // with the rest of the suite has taken over 20 s).
        var port: Int?
        let guardEnd = ContinuousClock.now + .seconds(180)
        while port == nil, process.isRunning, ContinuousClock.now < guardEnd {
            port = (try? String(contentsOfFile: ready, encoding: .utf8)).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            if port == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let startLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let listening = try #require(
            port, "the emulator never wrote its port (\(process.isRunning ? "still running" : "exited \(process.terminationStatus)")): \(startLog)")
        // More idle connections than descriptors: the kernel completes each handshake, the emulator cannot accept
        // them all.
        let sockets = try await onThread { try (0..<(limit + 16)).map { _ in try RawTCP.connect(port: listening) } }
        defer { for fd in sockets { Glibc.close(fd) } }
        // Idle now: CPU over two seconds (clock ticks, 100 a second), far from the 200 a spinning thread takes.
        // All of it well inside the emulator's 10 s preface timeout, which would close the idle connections and
        // so free descriptors.
        let exited = "the emulator exited: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")"
        try #require(process.isRunning, "\(exited)")
        let before = try Self.cpuTicks(process.processIdentifier)
        try await Task.sleep(for: .seconds(2))
        let after = try Self.cpuTicks(process.processIdentifier)
        #expect(after - before < 60, "\(after - before) ticks of CPU in 2 s while idle at the descriptor limit")
        let last = try #require(sockets.last)
        #expect(try await onThread { RawTCP.readsEndOfStream(last, within: 3) }, "the connection past the limit was not closed")
    }

    /// User + system clock ticks of `pid` (`/proc/<pid>/stat` fields 14 and 15).
    static func cpuTicks(_ pid: Int32) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ")
        return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
    }
}
