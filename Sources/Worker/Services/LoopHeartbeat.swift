import Synchronization

/// What one of the worker's loops is doing, as the systemd watchdog sees it (see ``WatchdogPolicy``).
public enum LoopActivity: Sendable, Equatable {
    /// Waiting for work (a wake-up, a timer, a back-off) that is due by `until` at the latest; `nil` when the
    /// wait has no bound of its own (the HTTP/2 I/O thread between probes).
    case waiting(until: ContinuousClock.Instant?)
    /// Inside one iteration (a claim, a batch write, a probe not yet run) since `since`.
    case working(since: ContinuousClock.Instant)
    /// Returned for good (after a stop request); no longer watched.
    case finished
}

/// A loop's progress stamp: the loop writes its ``LoopActivity`` at each change (a lock, a few times per
/// iteration), the watchdog reads it. No I/O.
public final class LoopHeartbeat: Sendable {
    /// Names the loop in logs and `STATUS=` lines (`claim loop`, `completer`, `HTTP/2 I/O thread`).
    public let name: String
    private let state: Mutex<LoopActivity>

    public init(name: String, activity: LoopActivity = .waiting(until: nil)) {
        self.name = name
        state = Mutex(activity)
    }

    public var activity: LoopActivity { state.withLock { $0 } }

    /// The loop starts one iteration now.
    public func working(now: ContinuousClock.Instant = .now) {
        state.withLock { $0 = .working(since: now) }
    }

    /// The loop waits for work for at most `timeout` (`nil`: unbounded).
    public func waiting(for timeout: Duration?, now: ContinuousClock.Instant = .now) {
        state.withLock { $0 = .waiting(until: timeout.map { now + $0 }) }
    }

    /// Starts an iteration only if none is under way (a probe still outstanding keeps its start time).
    /// - Returns: whether a new iteration started.
    public func workingUnlessAlready(now: ContinuousClock.Instant = .now) -> Bool {
        state.withLock { activity in
            if case .working = activity { return false }
            activity = .working(since: now)
            return true
        }
    }

    public func finished() {
        state.withLock { $0 = .finished }
    }
}

/// Decides whether the worker may tell systemd `WATCHDOG=1` (sd_watchdog_enabled(3), `WatchdogSec=` in
/// systemd.service(5)): only while every watched loop makes progress. A loop waiting for work is alive until
/// its wait's own bound plus `interval` has passed (a wake-up that never comes back means a starved or
/// stuck scheduler); a loop inside one iteration is alive for `interval` after the iteration began. A
/// finished loop is not watched. No I/O: the owner gathers the stamps and sends (or withholds) the ping.
public struct WatchdogPolicy: Sendable {
    /// systemd's watchdog interval (`WATCHDOG_USEC`): longer than this inside one iteration is stuck.
    public var interval: Duration

    /// The verdict for one moment.
    public enum Verdict: Sendable, Equatable {
        case ping
        /// Withhold the ping: these loops (by name) have been stuck for (at least) these durations.
        case withhold(stuck: [Stuck])
    }

    public struct Stuck: Sendable, Equatable {
        public var name: String
        /// How long the loop has been inside its iteration, or past the end of its wait.
        public var overdue: Duration

        public init(name: String, overdue: Duration) {
            self.name = name
            self.overdue = overdue
        }
    }

    public init(interval: Duration) {
        self.interval = interval
    }

    /// How often to ask: systemd recommends pinging at half the interval (sd_watchdog_enabled(3)).
    public var tick: Duration { interval / 2 }

    /// - Parameter loops: each watched loop's name and activity.
    public func verdict(_ loops: [(name: String, activity: LoopActivity)], now: ContinuousClock.Instant) -> Verdict {
        var stuck: [Stuck] = []
        for loop in loops {
            switch loop.activity {
            case .finished, .waiting(until: nil):
                continue
            case .waiting(let until?):
                if now - until >= interval { stuck.append(Stuck(name: loop.name, overdue: now - until)) }
            case .working(let since):
                if now - since >= interval { stuck.append(Stuck(name: loop.name, overdue: now - since)) }
            }
        }
        return stuck.isEmpty ? .ping : .withhold(stuck: stuck)
    }
}
