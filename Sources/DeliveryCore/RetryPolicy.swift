import Foundation

/// When a transient failure is tried again: exponential backoff with "full jitter" (AWS Architecture Blog,
/// "Exponential Backoff And Jitter"), never earlier than what the provider asked for (`Retry-After`).
public struct RetryPolicy: Sendable, Equatable {
    /// The ceiling of the first retry's delay; it doubles with each attempt.
    public var baseDelay: Duration
    /// The ceiling never grows past this.
    public var maximumDelay: Duration

    public init(baseDelay: Duration, maximumDelay: Duration) {
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
    }

    /// The instant of the next attempt after failed attempt number `attempt` (1-based).
    /// - Parameters:
    ///   - unitRandom: a value in `0..<1` drawing the jitter (injected so tests are deterministic).
    ///   - notBefore: the provider's `Retry-After`, honoured as a floor.
    /// The delay is drawn from `[ceiling / 2, ceiling)` so retries never bunch up at zero. Any `attempt`
    /// (even `Int.min` / `Int.max`) and any configuration (negative, or past ``maximumSupportedDelay``) give a
    /// finite delay between 0 and ``maximumSupportedDelay``:
    /// a non-finite instant would trap where it is encoded.
    public func nextAttempt(after attempt: Int, now: Date, unitRandom: Double, notBefore: Date? = nil) -> Date {
        // `attempt - 1` would overflow for Int.min; compare first.
        let exponent = attempt <= 1 ? 0.0 : Double(min(attempt, 41) - 1)
        let ceiling = Self.sanitized(
            min(Self.sanitized(maximumDelay.inSeconds), Self.sanitized(baseDelay.inSeconds) * pow(2, exponent)))
        return Self.schedule(ceiling: ceiling, now: now, unitRandom: unitRandom, notBefore: notBefore)
    }

    /// The next try for a retry that does not count as an attempt (the provider was unreachable, the
    /// channel paused): the ceiling grows with how long the message has waited (a tenth of its `age`), between
    /// `baseDelay` and `maximumDelay`, so a long outage backs off instead of hammering,
    /// without consuming attempts. Jitter and `notBefore` as in ``nextAttempt(after:now:unitRandom:notBefore:)``.
    public func nextAttemptDuringOutage(age: Duration, now: Date, unitRandom: Double, notBefore: Date? = nil) -> Date {
        let ceiling = Self.sanitized(
            min(
                Self.sanitized(maximumDelay.inSeconds),
                max(Self.sanitized(baseDelay.inSeconds), Self.sanitized(age.inSeconds) / 10)))
        return Self.schedule(ceiling: ceiling, now: now, unitRandom: unitRandom, notBefore: notBefore)
    }

    /// `now` plus a delay drawn from `[ceiling / 2, ceiling)`, never before `notBefore`.
    private static func schedule(ceiling: Double, now: Date, unitRandom: Double, notBefore: Date?) -> Date {
        let random = unitRandom.isFinite ? min(max(unitRandom, 0), 0.999_999) : 0
        let scheduled = now.addingTimeInterval(sanitized(ceiling / 2 + (ceiling / 2) * random))
        if let notBefore, notBefore > scheduled { return notBefore }
        return scheduled
    }

    /// The longest delay ``nextAttempt(after:now:unitRandom:notBefore:)`` computes (365 days): a bound for
    /// misconfiguration, far beyond any useful retry.
    public static let maximumSupportedDelay: Duration = .seconds(31_536_000)

    /// `seconds` within `0...maximumSupportedDelay`; NaN and negative become 0.
    static func sanitized(_ seconds: Double) -> Double {
        guard seconds.isFinite || seconds == .infinity, seconds > 0 else { return 0 }
        return min(seconds, maximumSupportedDelay.inSeconds)
    }
}
