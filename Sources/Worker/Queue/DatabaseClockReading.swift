import Foundation

/// PostgreSQL's clock as one statement read it (docs/clocks.md): the statement's `now()`, this process's
/// monotonic instant when its answer arrived, and this worker's wall clock around the round trip.
///
/// One clock decides for the fleet: what the database judges in SQL (due `run_at`, leases, turns, buckets) and
/// what a worker judges about claimed rows (expiry, local times, quiet hours, channel pauses, next attempts)
/// are judged by PostgreSQL's clock. A worker carries that clock forward from the reading by its monotonic
/// clock, so neither its wall clock's offset nor a step of it (NTP, an operator's `date -s`) moves a judgement.
public struct DatabaseClockReading: Sendable, Equatable {
    /// The statement's `now()`: the start of its transaction, on PostgreSQL's clock.
    public let databaseNow: Date
    /// This process's monotonic instant when the statement's answer arrived.
    public let receivedAt: ContinuousClock.Instant
    /// Seconds of the round trip (statement sent to answer received), on the monotonic clock.
    public let roundTripSeconds: Double
    /// Seconds PostgreSQL's clock is ahead of this worker's wall clock (negative: behind): `databaseNow` minus
    /// the worker's wall clock half-way through the round trip. Off by at most half the round trip (`now()` is
    /// read somewhere inside it).
    public let offsetSeconds: Double

    /// - Parameters:
    ///   - databaseNow: the statement's `now()`.
    ///   - sent: when the statement was sent: this process's monotonic instant and its wall clock then.
    ///   - receivedAt: the monotonic instant the answer arrived.
    public init(databaseNow: Date, sent: StatementTiming, receivedAt: ContinuousClock.Instant = .now) {
        self.databaseNow = databaseNow
        self.receivedAt = receivedAt
        let trip = receivedAt - sent.monotonic
        roundTripSeconds = max(0, trip.inSeconds)
        offsetSeconds = databaseNow.timeIntervalSince(sent.wall.addingTimeInterval(roundTripSeconds / 2))
    }

    /// PostgreSQL's time at `instant` (by default now): ``databaseNow`` plus the monotonic time elapsed since the
    /// answer arrived. No later than PostgreSQL's clock reads at that instant, and earlier by at most the round
    /// trip (`now()` was read before the answer left), so a claimed row is never judged later than the
    /// database would judge it.
    public func now(at instant: ContinuousClock.Instant = .now) -> Date {
        let elapsed = instant - receivedAt
        return databaseNow.addingTimeInterval(elapsed.inSeconds)
    }

    /// When a statement was sent, on this process's two clocks: read just before sending it.
    public struct StatementTiming: Sendable, Equatable {
        public let monotonic: ContinuousClock.Instant
        public let wall: Date

        public init(monotonic: ContinuousClock.Instant = .now, wall: Date = Date()) {
            self.monotonic = monotonic
            self.wall = wall
        }
    }
}
