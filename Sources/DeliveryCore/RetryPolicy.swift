import Foundation

/// When a transient failure is tried again: exponential backoff with "full jitter" (AWS Architecture Blog,
/// "Exponential Backoff And Jitter"), never earlier than what the provider asked for (`Retry-After`).
public struct RetryPolicy: Sendable, Equatable {
    /// Seconds before the first retry; the ceiling doubles with each attempt.
    public var baseDelay: Double
    /// Seconds: the ceiling never grows past this.
    public var maximumDelay: Double

    public init(baseDelay: Double, maximumDelay: Double) {
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
    }

    /// The instant of the next attempt after failed attempt number `attempt` (1-based).
    /// - Parameters:
    ///   - unitRandom: a value in `0..<1` drawing the jitter (injected so tests are deterministic).
    ///   - notBefore: the provider's `Retry-After`, honoured as a floor.
    /// The delay is drawn from `[ceiling / 2, ceiling)` so retries never bunch up at zero.
    public func nextAttempt(after attempt: Int, now: Date, unitRandom: Double, notBefore: Date? = nil) -> Date {
        let exponent = Double(max(0, min(attempt - 1, 40)))
        let ceiling = min(maximumDelay, baseDelay * pow(2, exponent))
        let delay = ceiling / 2 + (ceiling / 2) * min(max(unitRandom, 0), 0.999_999)
        let scheduled = now.addingTimeInterval(delay)
        if let notBefore, notBefore > scheduled { return notBefore }
        return scheduled
    }

    /// The next try for a retry that does not count as an attempt (the provider was unreachable, the
    /// channel paused): the ceiling grows with how long the message has waited (a tenth of its `age`, in
    /// seconds), between `baseDelay` and `maximumDelay`, so a long outage backs off instead of hammering,
    /// without consuming attempts. Jitter and `notBefore` as in ``nextAttempt(after:now:unitRandom:notBefore:)``.
    public func nextAttemptDuringOutage(age: Double, now: Date, unitRandom: Double, notBefore: Date? = nil) -> Date {
        let ceiling = min(maximumDelay, max(baseDelay, max(0, age) / 10))
        let delay = ceiling / 2 + (ceiling / 2) * min(max(unitRandom, 0), 0.999_999)
        let scheduled = now.addingTimeInterval(delay)
        if let notBefore, notBefore > scheduled { return notBefore }
        return scheduled
    }
}
