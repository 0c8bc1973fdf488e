import Foundation
import Postgres
import Testing
@testable import Worker

/// Which signal does what (``SignalPolicy``), without a process.
@Suite struct SignalPolicyTests {
    @Test func stopAndIgnoreAreDisjointAndNamed() {
        #expect(Set(SignalPolicy.stopSignals).isDisjoint(with: SignalPolicy.ignoredSignals))
        for number in SignalPolicy.handledSignals {
            #expect(SignalPolicy.name(of: number).hasPrefix("SIG"), "\(number)")
        }
        #expect(SignalPolicy.action(for: SIGTERM) == .stop)
        #expect(SignalPolicy.action(for: SIGQUIT) == .stop)
        #expect(SignalPolicy.action(for: SIGHUP) == .ignore)
        #expect(SignalPolicy.action(for: SIGUSR1) == .ignore)
        #expect(SignalPolicy.action(for: SIGABRT) == nil)
        #expect(SignalPolicy.action(for: SIGPIPE) == nil)
        #expect(SignalPolicy.reasonIgnored(SIGHUP).contains("nothing to reopen"))
    }

    /// kill(1)'s names for the real-time signals: counted from the nearer end.
    @Test func realTimeSignalNames() {
        #expect(SignalPolicy.realTimeSignals.first == 34)
        #expect(SignalPolicy.realTimeSignals.last == 64)
        #expect(SignalPolicy.name(of: 34) == "SIGRTMIN")
        #expect(SignalPolicy.name(of: 37) == "SIGRTMIN+3")
        #expect(SignalPolicy.name(of: 49) == "SIGRTMIN+15")
        #expect(SignalPolicy.name(of: 50) == "SIGRTMAX-14")
        #expect(SignalPolicy.name(of: 64) == "SIGRTMAX")
        #expect(SignalPolicy.name(of: 99) == "signal 99")
    }

    /// Every signal whose default action ends a process (signal(7): "Term" or "Core") is handled, except those
    /// left alone on purpose: SIGKILL (cannot be caught), SIGPIPE (ignored outright), SIGABRT (abort() and the
    /// watchdog's core dump) and the faults of a failing instruction.
    @Test func everyTerminatingSignalIsHandledOrLeftAloneOnPurpose() {
        let leftAlone: Set<Int32> = [SIGKILL, SIGPIPE, SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS]
        let defaultIgnoreOrStop: Set<Int32> = [SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH]
        for number in Int32(1)...64 where !leftAlone.contains(number) && !defaultIgnoreOrStop.contains(number) {
            // 32 and 33 are glibc's own (thread cancellation and set*id), never sent to a process from outside.
            if number == 32 || number == 33 { continue }
            #expect(SignalPolicy.action(for: number) != nil, "\(SignalPolicy.name(of: number)) would end the process")
        }
    }
}

/// Signals a running worker may be sent, through the real executable mid-broadcast: a reload's or log
/// rotator's SIGHUP and stray signals are logged and ignored while sending goes on; every stop signal takes the
/// graceful path (in-flight sends finished, their events written, exit 0), a second one too.
@Suite("Signals to pushizo-worker run", .serialized)
struct SignalTests {
    /// A broadcast of `count` subscriptions, seeded for the emulator.
    static func seedBroadcast(_ url: String, _ emulator: EmulatorHarness, count: Int) async throws {
        try await onThread {
            let seed = try Seed(url)
            try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
            _ = try seed.connection.query(
                """
                INSERT INTO subscriptions (app_id, platform, token)
                SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('s' || n), 1, 30) FROM generate_series(1, $2::int) n
                """, [seed.appID, count])
            _ = try seed.notification(message: #"{"contents": {"en": "hello"}}"#, target: #"{"all": true}"#)
        }
    }

    /// The worker, logging at `notice` into a file the test reads.
    static func startWorker(_ url: String, _ emulator: EmulatorHarness, log: String) throws -> Process {
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let process = emulator.workerProcess(
            databaseURL: url, arguments: ["run", "--concurrency", "40", "--claim-batch", "20", "--poll-interval", "0.05"],
            extra: ["PUSHIZO_LOG_LEVEL": "notice"])
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
        return process
    }

    /// Waits while the process runs until `condition` holds; a hang guard, not a timing assertion.
    static func waitUntil(_ process: Process, guard seconds: Int = 60, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            if !process.isRunning { return try await condition() }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    static func logLines(_ log: String) -> [String] {
        (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
    }

    /// Whether `log` has a line with `message` about `signal` (fields are `key=value`, in key order).
    static func logged(_ log: String, _ message: String, signal name: String) -> Bool {
        logLines(log).contains { line in
            line.contains(message) && (line.hasSuffix(" signal=\(name)") || line.contains(" signal=\(name) "))
        }
    }

    static func count(_ database: PostgresClient, _ sql: String) async throws -> Int {
        try await database.query(sql)[0].decode(Int.self, "n")
    }

    /// A signal mask line of /proc/PID/status or /proc/PID/task/TID/status (`SigBlk:`, `SigCgt:`), as bits.
    static func mask(_ key: String, in path: String) -> UInt64? {
        // A thread may end between the listing and the read.
        guard let status = try? String(contentsOfFile: path, encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key + ":") })
        else { return nil }
        return UInt64(line.dropFirst(key.count + 1).trimmingCharacters(in: .whitespaces), radix: 16)
    }

    /// The signals blocked in each thread but the main thread (which libdispatch parks in sigsuspend(2) with an
    /// empty mask) and the signal thread, by thread name.
    static func blockedSignalsOfOtherThreads(_ pid: Int32) -> [String: UInt64] {
        let tasks = "/proc/\(pid)/task"
        var result: [String: UInt64] = [:]
        for thread in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] where thread != "\(pid)" {
            let name = (try? String(contentsOfFile: "\(tasks)/\(thread)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            guard name != "pushizo-signals", let blocked = mask("SigBlk", in: "\(tasks)/\(thread)/status") else { continue }
            result["\(thread) \(name)"] = blocked
        }
        return result
    }

    /// The size of the broadcast the worker sends.
    static let broadcast = 300

    /// A worker sending a broadcast of ``broadcast`` subscriptions through an emulator that answers after
    /// `latency` seconds, logging at `notice` into the file `body` gets; `body` runs once a push was sent.
    static func withWorkerSendingABroadcast(
        latency: Double,
        _ body: @Sendable (_ worker: Process, _ log: String, _ database: PostgresClient, _ emulator: EmulatorHarness) async throws -> Void
    ) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: latency) { emulator in
                try await seedBroadcast(url, emulator, count: broadcast)
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-signals-\(UUID().uuidString).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                let process = try startWorker(url, emulator, log: log)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let sending = try await waitUntil(process) {
                    try await count(database, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") > 0
                }
                #expect(sending)
                try await body(process, log, database, emulator)
                if process.isRunning { process.terminate() }
                try await onThread { process.waitUntilExit() }
                await database.shutdown()
            }
        }
    }

    @Test func reloadAndStraySignalsAreLoggedAndIgnoredWhileSendingGoesOn() async throws {
        // Each answer takes 0.3 s, so sends are in flight whenever a signal arrives.
        try await Self.withWorkerSendingABroadcast(latency: 0.3) { process, log, database, emulator in
            // The running worker catches every handled signal (none has its default action left), and its
            // other threads (cooperative pool, I/O, resolvers, libpq) block them but SIGPROF (the crash
            // handler's), so no system call of theirs is interrupted.
            let handledMask = SignalPolicy.handledSignals.reduce(UInt64(0)) { $0 | (1 << UInt64($1 - 1)) }
            let caught = Self.mask("SigCgt", in: "/proc/\(process.processIdentifier)/status") ?? 0
            #expect(caught & handledMask == handledMask, "not caught: \(String(handledMask & ~caught, radix: 16))")
            let blockedMask = SignalHandling.blockedSignals.reduce(UInt64(0)) { $0 | (1 << UInt64($1 - 1)) }
            #expect(blockedMask == handledMask & ~(1 << UInt64(SIGPROF - 1)))
            let masks = Self.blockedSignalsOfOtherThreads(process.processIdentifier)
            #expect(masks.count > 1)
            for (thread, mask) in masks {
                #expect(mask & blockedMask == blockedMask, "thread \(thread) lets \(String(blockedMask & ~mask, radix: 16)) through")
            }

            let strays: [Int32] = [SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGSTKFLT, SIGXFSZ,
                                   SignalPolicy.realTimeSignals.first ?? 34, SignalPolicy.realTimeSignals.last ?? 64]
            for number in strays {
                let name = SignalPolicy.name(of: number)
                #expect(kill(process.processIdentifier, number) == 0)
                // One at a time: a second standard signal sent while the first is pending would merge with it.
                let logged = try await Self.waitUntil(process, guard: 30) { Self.logged(log, "signal ignored", signal: name) }
                #expect(logged, "\(name): \(Self.logLines(log).suffix(3))")
                #expect(process.isRunning, "\(name) ended the worker")
                guard process.isRunning else { break }
            }
            let hup = Self.logLines(log).first { $0.hasSuffix(" signal=SIGHUP") }
            #expect(hup?.contains("sender_pid=\(getpid())") == true, "\(hup ?? "-")")

            // Sending went on: the whole broadcast goes out, once.
            let drained = try await Self.waitUntil(process) {
                try await Self.count(database, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == Self.broadcast
            }
            #expect(drained)
            process.terminate()
            try await onThread { process.waitUntilExit() }
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 0)
            #expect(try await Self.count(database, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == Self.broadcast)
            #expect(emulator.apns.acceptedCount == Self.broadcast)
        }
    }

    /// SIGQUIT (Ctrl-\\), SIGXCPU (the CPU limit), SIGPWR (power failing) and SIGINT end the worker as SIGTERM
    /// does, and a second stop signal does not cut the stop short.
    @Test(arguments: [SIGQUIT, SIGXCPU, SIGPWR, SIGINT])
    func everyStopSignalTakesTheGracefulPath(number: Int32) async throws {
        // Each answer takes 1 s, so sends are still in flight when the second signal arrives.
        try await Self.withWorkerSendingABroadcast(latency: 1) { process, log, database, emulator in
            let name = SignalPolicy.name(of: number)
            #expect(kill(process.processIdentifier, number) == 0)
            let received = try await Self.waitUntil(process, guard: 30) { Self.logged(log, "signal received", signal: name) }
            #expect(received, "\(Self.logLines(log).suffix(3))")
            // The operator insists, with the same signal and with SIGTERM (ESRCH if the stop already ended).
            _ = kill(process.processIdentifier, number)
            _ = kill(process.processIdentifier, SIGTERM)
            try await onThread { process.waitUntilExit() }
            #expect(process.terminationReason == .exit, "\(name)")
            #expect(process.terminationStatus == 0, "\(name)")

            // Every delivery it claimed has its event, each sent push once; the rest wait for the next worker,
            // queued or (the expansion paced by the sends) not yet expanded.
            #expect(try await Self.count(database, "SELECT count(*) AS n FROM deliveries WHERE attempt > 0") == 0)
            let sent = try await Self.count(database, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")
            #expect(sent == emulator.apns.acceptedCount)
            let left = try await Self.count(
                database,
                """
                SELECT (SELECT count(*) FROM deliveries)
                       + \(Self.broadcast) - (SELECT coalesce(max(targeted_count), 0) FROM notifications) AS n
                """)
            #expect(left + sent == Self.broadcast)
        }
    }
}
