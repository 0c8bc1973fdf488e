import Foundation
import Testing

/// The sd_notify protocol as systemd sees it (`Type=notify`): the test binds the `$NOTIFY_SOCKET` datagram
/// socket and starts the real executable. `READY=1` means the database answered, not merely that the process
/// started.
@Suite("systemd notifications of pushizo-worker run")
struct SystemdNotifyTests {
    /// A Unix datagram socket bound at a fresh path, read with a timeout.
    final class NotifySocket: @unchecked Sendable {
        let path: String
        private let fd: Int32

        init() throws {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID()).sock").path
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            guard fd >= 0 else { throw POSIXError(.EMFILE) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard bound == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        }

        deinit {
            close(fd)
            unlink(path)
        }

        /// The datagrams waiting now, without blocking.
        func pending() -> [String] {
            var messages: [String] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if count <= 0 { return messages }
                messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
            }
        }

        /// Waits (on its own thread) up to `seconds` for one datagram; nil on timeout. A signal (SIGCHLD of
        /// another test's child process) interrupts the wait with EINTR; it then goes on for the time left.
        func next(within seconds: Int) async throws -> String? {
            try await onThread { [fd] in
                let deadline = ContinuousClock.now + .seconds(seconds)
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let left = deadline - ContinuousClock.now
                    guard left > .zero else { return nil }
                    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    let ready = poll(&entry, 1, Int32(left.components.seconds * 1000 + 1))
                    if ready < 0 && errno == EINTR { continue }
                    guard ready > 0 else { return nil }
                    let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                    if count > 0 { return String(decoding: buffer[0..<count], as: UTF8.self) }
                    if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                    return nil
                }
            }
        }
    }

    static func start(databaseURL: String, notifySocket: String, extra: [String: String] = [:]) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["run", "--poll-interval", "0.05"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "NOTIFY_SOCKET": notifySocket,
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ].merging(extra) { _, new in new }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return (process, errors)
    }

    @Test func readyIsSentOnlyOnceTheDatabaseAnswered() async throws {
        let socket = try NotifySocket()

        // Nothing listens on port 1: the worker retries and must not claim readiness. Wait for its first
        // failed attempt to reach the database (proof it tried: the start-up check of the database's route, or a
        // claim), then look at what it sent by then.
        let (down, downErrors) = try Self.start(
            databaseURL: "host=127.0.0.1 port=1 dbname=pushizo connect_timeout=2", notifySocket: socket.path)
        // Hang guard: a worker that never logs the failure is killed after 60 s, which ends the read below.
        let guardKill = Task {
            try await Task.sleep(for: .seconds(60))
            kill(down.processIdentifier, SIGKILL)
        }
        let failures = ["waiting for PostgreSQL", "claiming deliveries failed"]
        let sawFailure = try await onThread {
            var text = ""
            while !failures.contains(where: text.contains) {
                let chunk = downErrors.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return failures.contains(where: text.contains)
        }
        guardKill.cancel()
        #expect(sawFailure)
        let whileDown = socket.pending()
        #expect(!whileDown.contains { $0.contains("READY=1") }, "sent while the database was down: \(whileDown)")
        kill(down.processIdentifier, SIGKILL)
        try await onThread { down.waitUntilExit() }

        try await TestDatabase.withMigratedDatabase { url in
            let (up, _) = try Self.start(databaseURL: url, notifySocket: socket.path)
            defer { kill(up.processIdentifier, SIGKILL); up.waitUntilExit() }
            // Hang guard: 2 minutes without a datagram (a loaded machine included); the first claim answers at once.
            var ready = false
            while let message = try await socket.next(within: 120) {
                if message.contains("READY=1") { ready = true; break }
            }
            #expect(ready)
        }
    }

    /// Reads datagrams until `done` says so (given every line so far), or for 3 minutes at most (a hang guard, not
    /// a timing assertion: the caller's expectations then fail).
    /// Whether `line` is anything but a rate `STATUS=` line.
    static func isNoRateLine(_ line: String) -> Bool { !line.hasPrefix("STATUS=sending") }

    static func collect(_ socket: NotifySocket, until done: ([String]) -> Bool) async throws -> [String] {
        var lines: [String] = []
        let guardDeadline = ContinuousClock.now + .seconds(180)
        while !done(lines), ContinuousClock.now < guardDeadline, let message = try await socket.next(within: 60) {
            lines += message.split(separator: "\n").map(String.init)
        }
        return lines
    }

    /// With `WATCHDOG_USEC` set the worker pings at half the interval and reports its rate and lag; a claim
    /// loop stuck inside one iteration (the debug-only fault `PUSHIZO_TEST_STALL_CLAIM_LOOP`) stops the pings
    /// while `STATUS=` says why, and they resume once the loop moves again.
    @Test func watchdogPingsOnlyWhileTheLoopsMakeProgress() async throws {
        let socket = try NotifySocket()
        let stallFile = FileManager.default.temporaryDirectory.appendingPathComponent("stall-\(UUID())").path
        defer { unlink(stallFile) }
        try await TestDatabase.withMigratedDatabase { url in
            let (worker, _) = try Self.start(
                databaseURL: url, notifySocket: socket.path,
                extra: ["WATCHDOG_USEC": "1000000", "PUSHIZO_TEST_STALL_CLAIM_LOOP": stallFile])
            defer { kill(worker.processIdentifier, SIGKILL); worker.waitUntilExit() }

            // Ready, pinging, and a status line with a measured rate and a sampled lag (the second line).
            let running = try await Self.collect(socket) { lines in
                guard let ready = lines.firstIndex(of: "READY=1") else { return false }
                return lines[ready...].filter { $0 == "WATCHDOG=1" }.count >= 2
                    && lines.contains { $0.hasPrefix("STATUS=sending ") && !$0.contains("?/s") && !$0.contains("unknown") }
            }
            let ready = try #require(running.firstIndex(of: "READY=1"), "no READY=1 in \(running)")
            #expect(running[ready...].filter { $0 == "WATCHDOG=1" }.count >= 2, "\(running)")
            // systemd arms the watchdog at READY=1: no ping and no rate line before it.
            #expect(!running[..<ready].contains("WATCHDOG=1"), "\(running)")
            #expect(running[..<ready].allSatisfy(Self.isNoRateLine), "\(running)")
            // The same line the wait above ended on: an earlier one may carry a rate but no sampled lag yet.
            let status = running.first {
                $0.hasPrefix("STATUS=sending ") && !$0.contains("?/s") && !$0.contains("unknown")
            }
            #expect(status?.contains("/s, queue lag 0.0 s, 0 in flight") == true, "\(running)")

            // Stuck: the claim loop blocks inside an iteration; once the interval passes the status says so.
            #expect(FileManager.default.createFile(atPath: stallFile, contents: nil))
            let stuck = try await Self.collect(socket) { $0.contains { $0.hasPrefix("STATUS=watchdog withheld") } }
            let withheld = stuck.first { $0.hasPrefix("STATUS=watchdog withheld") }
            // Only that the stuck loop is named: on a loaded machine another loop's wake-up can be late by a whole
            // 1 s interval too, and then it is rightly named beside it (which loops the policy names is
            // WatchdogPolicyTests', with instants as values).
            #expect(withheld?.contains("claim loop stuck for") == true, "\(stuck)")
            // From then on no ping: the datagrams up to the second status line after it (the reporter still runs;
            // it sends one every watchdog interval when that is below 5 s), two whole intervals.
            _ = socket.pending()
            let silent = try await Self.collect(socket) { $0.filter { $0.hasPrefix("STATUS=") }.count >= 2 }
            #expect(silent.contains { $0.hasPrefix("STATUS=watchdog withheld: claim loop") }, "\(silent)")
            #expect(!silent.contains("WATCHDOG=1"), "pinged while the claim loop was stuck: \(silent)")

            // The loop moves again: pings resume.
            unlink(stallFile)
            let resumed = try await Self.collect(socket) { $0.contains("WATCHDOG=1") }
            #expect(resumed.contains("WATCHDOG=1"))
        }
    }

    /// The expand loop is watched too: one stuck inside a pass from the start (the debug-only fault
    /// `PUSHIZO_TEST_STALL_EXPANSION_LOOP`) withholds the pings once the claim loop has made the worker ready,
    /// with `STATUS=` naming it, and they resume once it moves.
    @Test func watchdogWatchesTheExpansionLoop() async throws {
        let socket = try NotifySocket()
        let stallFile = FileManager.default.temporaryDirectory.appendingPathComponent("stall-\(UUID())").path
        #expect(FileManager.default.createFile(atPath: stallFile, contents: nil))
        defer { unlink(stallFile) }
        try await TestDatabase.withMigratedDatabase { url in
            let (worker, _) = try Self.start(
                databaseURL: url, notifySocket: socket.path,
                extra: ["WATCHDOG_USEC": "1000000", "PUSHIZO_TEST_STALL_EXPANSION_LOOP": stallFile])
            defer { kill(worker.processIdentifier, SIGKILL); worker.waitUntilExit() }
            let stuck = try await Self.collect(socket) { $0.contains { $0.hasPrefix("STATUS=watchdog withheld") } }
            #expect(stuck.contains("READY=1"), "\(stuck)")
            let withheld = stuck.first { $0.hasPrefix("STATUS=watchdog withheld") }
            #expect(withheld?.contains("expansion loop stuck for") == true, "\(stuck)")
            _ = socket.pending()
            let silent = try await Self.collect(socket) { $0.filter { $0.hasPrefix("STATUS=") }.count >= 2 }
            #expect(!silent.contains("WATCHDOG=1"), "pinged while the expansion loop was stuck: \(silent)")
            unlink(stallFile)
            let resumed = try await Self.collect(socket) { $0.contains("WATCHDOG=1") }
            #expect(resumed.contains("WATCHDOG=1"))
        }
    }
}
