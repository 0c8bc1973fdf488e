import Foundation

/// Watches this host's clock against PostgreSQL's (docs/clocks.md): each reading taken with a claim
/// (``DatabaseClockReading``) sets `pushizo_database_clock_offset_seconds`, and an offset past `bound` seconds
/// either way logs a warning, at most one every ``warningInterval``. Nothing is decided by the offset itself:
/// PostgreSQL's clock already decides; the warning is for what still reads this host's clock (TLS certificate
/// checks, the `iat` of provider tokens, log timestamps).
final class DatabaseClockWatch: Sendable {
    /// The least time between two warnings.
    static let warningInterval: Duration = .seconds(600)

    private let bound: Double
    private let logger: Logger
    private let metrics: WorkerMetrics
    private let warnings = LogRateLimiter(interval: DatabaseClockWatch.warningInterval)

    /// - Parameter bound: seconds of offset (either way) past which a warning is logged.
    init(bound: Double, logger: Logger, metrics: WorkerMetrics) {
        self.bound = bound
        self.logger = logger
        self.metrics = metrics
    }

    /// Records one reading: the gauge always, a warning when its offset is past the bound and none was logged
    /// within ``warningInterval``.
    func record(_ reading: DatabaseClockReading) {
        metrics.databaseClockRead(offsetSeconds: reading.offsetSeconds)
        // Within half the round trip of the bound the offset may be either side of it: no warning on a slow
        // answer alone.
        guard abs(reading.offsetSeconds) - reading.roundTripSeconds / 2 > bound, warnings.allow("offset") else { return }
        logger.warning(
            "this host's clock is off PostgreSQL's; PostgreSQL's decides due times, expiry, local times and retries, "
                + "but TLS certificate checks and provider tokens' iat use this host's: fix its time synchronization",
            [
                "offset_seconds": String(format: "%.3f", reading.offsetSeconds),
                "round_trip_seconds": String(format: "%.3f", reading.roundTripSeconds),
                "bound_seconds": String(format: "%g", bound),
            ])
    }
}
