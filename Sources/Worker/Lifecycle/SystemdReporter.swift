import Foundation
import Synchronization

/// One `STATUS=` line (sd_notify(3); `systemctl status` shows it): the send rate, the queue lag and the sends
/// in flight, led by the stuck loops while the watchdog is withheld and by the fleet's operator pause while it
/// lasts. No I/O.
public struct SystemdStatusLine: Sendable, Equatable {
    /// Completions written per second since the previous line (`nil` before there is a previous one).
    public var settledPerSecond: Double?
    /// Age in seconds of the oldest claimable delivery (0 when none is; due rows an operator's pause holds are
    /// left out, as in `status` and `pushizo_queue_oldest_due_age_seconds`); `nil` when not sampled yet or the
    /// sample failed.
    public var queueLagSeconds: Double?
    public var inFlight: Int
    public var stuck: [WatchdogPolicy.Stuck] = []
    /// The end of the fleet's operator pause as the last sample read it (`Date.distantFuture` until
    /// `resume --fleet`); nil when the fleet is not paused or not sampled yet.
    public var fleetPausedUntil: Date?

    public init(
        settledPerSecond: Double?, queueLagSeconds: Double?, inFlight: Int, stuck: [WatchdogPolicy.Stuck] = [],
        fleetPausedUntil: Date? = nil
    ) {
        self.settledPerSecond = settledPerSecond
        self.queueLagSeconds = queueLagSeconds
        self.inFlight = inFlight
        self.stuck = stuck
        self.fleetPausedUntil = fleetPausedUntil
    }

    /// Completions per second between two samples of a running count (0 when no time passed).
    public static func rate(
        from start: (count: Int, at: ContinuousClock.Instant), to end: (count: Int, at: ContinuousClock.Instant)
    ) -> Double {
        let seconds = (end.at - start.at).inSeconds
        return seconds > 0 ? Double(max(0, end.count - start.count)) / seconds : 0
    }

    /// E.g. `STATUS=sending 812.4/s, queue lag 2.1 s, 301 in flight`; with a stuck loop
    /// `STATUS=watchdog withheld: claim loop stuck for 75.0 s; sending 0.0/s, queue lag 80.2 s, 12 in flight`;
    /// with the fleet paused `STATUS=fleet paused by an operator until resumed; sending 0.0/s, queue lag 0.0 s, 0 in
    /// flight` (or `until 2026-12-07 16:40:00 UTC` for a timed pause).
    public var text: String {
        var parts: [String] = []
        parts.append("sending " + (settledPerSecond.map { Self.oneDecimal($0) + "/s" } ?? "?/s"))
        parts.append("queue lag " + (queueLagSeconds.map { Self.oneDecimal($0) + " s" } ?? "unknown"))
        parts.append("\(inFlight) in flight")
        var text = "STATUS="
        if !stuck.isEmpty {
            let loops = stuck.map { "\($0.name) stuck for \(Self.oneDecimal($0.overdue.inSeconds)) s" }
            text += "watchdog withheld: " + loops.joined(separator: ", ") + "; "
        }
        if let until = fleetPausedUntil {
            text += "fleet paused by an operator "
                + (until == .distantFuture ? "until resumed" : "until " + TerminalWords.instant(until)) + "; "
        }
        return text + parts.joined(separator: ", ")
    }

    private static func oneDecimal(_ value: Double) -> String {
        let tenths = (value * 10).rounded()
        return "\(Int64(tenths) / 10).\(abs(Int64(tenths) % 10))"
    }
}

/// Talks to systemd while `run` runs, from a thread of its own (a datagram to a full socket may block, and the
/// watchdog must not depend on the scheduler it watches): every half watchdog interval it probes the HTTP/2
/// I/O thread, asks ``WatchdogPolicy`` about every loop's ``LoopHeartbeat`` and sends `WATCHDOG=1` only on
/// `.ping`; every `statusInterval` it sends a ``SystemdStatusLine`` (and at once when the verdict changes),
/// with a queue-lag sample taken in the background meanwhile.
final class SystemdReporter: Sendable {
    /// How often a `STATUS=` line is sent: every 5 s (often enough for `systemctl status`, rare enough that
    /// its lag sample costs nothing), or every watchdog interval when that is shorter.
    let statusInterval: Duration

    struct Sources: Sendable {
        /// Loops stamped by their own code (the claim loop, the completer).
        var loops: [LoopHeartbeat]
        /// Stamped by this reporter's probes.
        var ioThread: LoopHeartbeat
        /// Runs its argument on the I/O thread; false once that loop is shut down.
        var probeIOThread: @Sendable (@escaping @Sendable () -> Void) -> Bool
        /// Completions written so far, and sends in flight now.
        var progress: @Sendable () -> (settled: Int, inFlight: Int)
        /// The queue lag and the fleet's operator pause, or nil when they could not be read.
        var sampleQueueLag: @Sendable () async -> QueueLagReading?
    }

    private let policy: WatchdogPolicy?
    private let sources: Sources
    private let logger: Logger
    private let send: @Sendable (String) -> Void
    private let stopped = Atomic<Bool>(false)
    /// Set once `READY=1` is sent (``markReady()``). systemd arms the watchdog when the start-up is complete
    /// (systemd.service(5), `WatchdogSec=`), and until then `STATUS=` says what the start waits for
    /// (``DatabaseStartWait``): neither a ping nor a rate line goes out before it.
    private let ready = Atomic<Bool>(false)
    /// Latest lag sample; nil = none.
    private let lag = Mutex<QueueLagReading?>(nil)
    private let sampling = Atomic<Bool>(false)

    /// - Parameter watchdog: `nil` when systemd's watchdog is off (then only `STATUS=` lines are sent).
    init(
        watchdog: Duration?, sources: Sources, logger: Logger,
        send: @escaping @Sendable (String) -> Void = SystemdNotifier.notify
    ) {
        policy = watchdog.map(WatchdogPolicy.init(interval:))
        statusInterval = min(.seconds(5), watchdog ?? .seconds(5))
        self.sources = sources
        self.logger = logger
        self.send = send
    }

    /// Called right after `READY=1` is sent: the pings and status lines begin.
    func markReady() {
        ready.store(true, ordering: .releasing)
    }

    func start() {
        let thread = Thread { [self] in loop() }
        thread.name = "pushizo-systemd"
        thread.start()
    }

    /// Ends the thread within a quarter second; nothing is sent after that.
    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    private func loop() {
        var previous = (count: sources.progress().settled, at: ContinuousClock.now)
        var rateKnown = false
        var nextPing = ContinuousClock.now
        var nextStatus = ContinuousClock.now
        var pinging = true
        var stuck: [WatchdogPolicy.Stuck] = []
        while !stopped.load(ordering: .acquiring) {
            guard ready.load(ordering: .acquiring) else {
                Thread.sleep(forTimeInterval: 0.05)
                previous = (count: sources.progress().settled, at: ContinuousClock.now)
                continue
            }
            let now = ContinuousClock.now
            if let policy, now >= nextPing {
                nextPing = now + policy.tick
                let io = sources.ioThread
                if io.workingUnlessAlready(now: now), !sources.probeIOThread({ io.waiting(for: nil) }) {
                    io.finished()
                }
                let watched = (sources.loops + [io]).map { (name: $0.name, activity: $0.activity) }
                switch policy.verdict(watched, now: now) {
                case .ping:
                    send("WATCHDOG=1")
                    if !pinging { logger.notice("watchdog: every loop makes progress again; WATCHDOG=1 resumed") }
                    pinging = true
                    stuck = []
                case .withhold(let found):
                    if pinging {
                        logger.error(
                            "watchdog: a loop is stuck; WATCHDOG=1 withheld (systemd restarts the worker once WatchdogSec passes)",
                            ["stuck": found.map(\.name).joined(separator: ","),
                             "overdue_s": found.map { String(Int($0.overdue.inSeconds)) }.joined(separator: ",")])
                        nextStatus = now
                    }
                    pinging = false
                    stuck = found
                }
            }
            if now >= nextStatus {
                nextStatus = now + statusInterval
                let progress = sources.progress()
                let reading = lag.withLock { $0 }
                let line = SystemdStatusLine(
                    settledPerSecond: rateKnown ? SystemdStatusLine.rate(from: previous, to: (progress.settled, now)) : nil,
                    queueLagSeconds: reading?.seconds, inFlight: progress.inFlight, stuck: stuck,
                    fleetPausedUntil: reading?.fleetPausedUntil)
                send(line.text)
                previous = (progress.settled, now)
                rateKnown = true
                sampleLag()
            }
            Thread.sleep(forTimeInterval: min(0.25, (policy?.tick ?? .seconds(1)).inSeconds / 2))
        }
    }

    /// Starts one lag sample unless one is still running (a slow database must not pile them up).
    private func sampleLag() {
        guard !sampling.exchange(true, ordering: .acquiringAndReleasing) else { return }
        Task.detached { [self] in
            let reading = await sources.sampleQueueLag()
            lag.withLock { $0 = reading }
            sampling.store(false, ordering: .releasing)
        }
    }
}
