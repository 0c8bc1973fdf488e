/// How long a pool or a listener waits before its next connection attempt after failures: a value without I/O
/// (postgres-nio's style of state as a value), fed each failure and success, answering with a delay.
///
/// The delay doubles per consecutive failure from the policy's base to its cap, and is jittered into
/// `[delay / 2, delay]` ("equal jitter", AWS Architecture Blog, "Exponential Backoff And Jitter"), so workers
/// cut off together do not come back in step. The policy follows the last failure's cause:
/// - ``Cause/crowded``: the server refused the session for want of resources, SQLSTATE class 53 (`53300`
///   `too_many_connections`: every slot of `max_connections` is taken). Retrying soon would take the slot an
///   operator or a producer is waiting for: 1 s doubling to 60 s.
/// - ``Cause/unavailable``: anything else (server down or restarting, a read-only or recovering server
///   refused by `target_session_attrs=read-write`, a session cut): 0.1 s doubling to 5 s.
///
/// A success resets it. PostgreSQL docs, Appendix A "PostgreSQL Error Codes".
public struct PostgresReconnectBackoff: Sendable, Equatable {
    /// Why a connection attempt failed or a session was dropped, as far as the backoff cares.
    public enum Cause: Sendable, Equatable {
        /// The server is out of connection slots or other resources (SQLSTATE class 53).
        case crowded
        /// Any other reason to connect again later.
        case unavailable
    }

    /// A doubling backoff's first delay and its cap.
    public struct Policy: Sendable, Equatable {
        /// Delay after the first failure, before jitter.
        public var base: Duration
        /// Longest delay, before jitter.
        public var cap: Duration

        public init(base: Duration, cap: Duration) {
            self.base = base
            self.cap = cap
        }
    }

    /// 0.1 s doubling to 5 s.
    public static let unavailablePolicy = Policy(base: .milliseconds(100), cap: .seconds(5))
    /// 1 s doubling to 60 s.
    public static let crowdedPolicy = Policy(base: .seconds(1), cap: .seconds(60))

    /// Consecutive failures since the last success.
    public private(set) var failures = 0
    /// The cause of the latest failure; nil after a success.
    public private(set) var cause: Cause?

    public init() {}

    /// The cause a ``PostgresError`` stands for: ``Cause/crowded`` for SQLSTATE class 53, else
    /// ``Cause/unavailable``.
    public static func cause(of error: any Error) -> Cause {
        guard let error = error as? PostgresError, let state = error.sqlState else { return .unavailable }
        return state.hasPrefix("53") ? .crowded : .unavailable
    }

    /// Records a failure and returns the delay before the next attempt.
    /// - Parameter jitter: a number in `0...1` (random in production, fixed in tests): 0 gives half the
    ///   doubled delay, 1 the whole of it.
    public mutating func failed(_ cause: Cause, jitter: Double) -> Duration {
        failures += 1
        self.cause = cause
        return delay(jitter: jitter)
    }

    /// The delay for the failures recorded so far (zero when none), jittered by `jitter` (`0...1`).
    public func delay(jitter: Double) -> Duration {
        guard failures > 0 else { return .zero }
        let policy = cause == .crowded ? Self.crowdedPolicy : Self.unavailablePolicy
        // 2^(failures-1), capped well before it could overflow.
        let doubled = policy.base * (1 << min(failures - 1, 20))
        let whole = min(doubled, policy.cap)
        return whole / 2 + whole / 2 * min(max(jitter, 0), 1)
    }

    /// A connection was established: the next failure starts from the base again.
    public mutating func succeeded() {
        failures = 0
        cause = nil
    }
}
