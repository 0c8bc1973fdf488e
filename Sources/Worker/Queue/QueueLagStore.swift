import Foundation
import Postgres

/// The queue lag and the fleet's operator pause as one sample read them (``QueueLagStore/reading(on:)``).
public struct QueueLagReading: Sendable, Equatable {
    /// Age in seconds of the oldest claimable delivery (0 when none is).
    public var seconds: Double
    /// The end of the fleet's operator pause (`fleet_settings.paused_until`; `Date.distantFuture` for
    /// `infinity`, a pause until `resume --fleet`), nil when the fleet is not paused.
    public var fleetPausedUntil: Date?

    public init(seconds: Double, fleetPausedUntil: Date?) {
        self.seconds = seconds
        self.fleetPausedUntil = fleetPausedUntil
    }
}

/// The queue lag, read from the claim's per-app index without scanning the queue.
public enum QueueLagStore {
    /// The queue lag: how long the oldest claimable delivery (`run_at <= now()`, not leased, and no operator's
    /// pause of its app or of the fleet holding it) has waited, in seconds; 0 when none is due. Cheap on any queue
    /// size: a loose index scan of the claim's per-app index (``claimRangesCTE``) visits the first due entry of
    /// each unpaused app with queued deliveries and each of its priorities, rather than every due row.
    /// - Throws: ``PostgresError``.
    public static func lag(on connection: PostgresConnection) throws -> Double {
        try reading(on: connection).seconds
    }

    /// ``lag(on:)`` with the fleet's operator pause (the one-row `fleet_settings`), in one statement: what the
    /// `STATUS=` line shows.
    /// - Throws: ``PostgresError``.
    public static func reading(on connection: PostgresConnection) throws -> QueueLagReading {
        let rows = try connection.query(
            """
            WITH RECURSIVE \(claimRangesCTE)
            SELECT coalesce(extract(epoch FROM now() - \(oldestDueRunAt(queuedAppCondition: claimable))), 0)::float8 AS lag,
                   (SELECT paused_until FROM fleet_settings WHERE paused_until > now()) AS fleet_paused_until
            """)
        guard let row = rows.first else { return QueueLagReading(seconds: 0, fleetPausedUntil: nil) }
        return QueueLagReading(
            seconds: max(0, try row.decode(Double.self, "lag")),
            fleetPausedUntil: try row.decodeIfPresent(Date.self, "fleet_paused_until"))
    }

    /// Two `WITH RECURSIVE` elements listing the ranges of the claim's index `deliveries_claim_app`
    /// (`(app_id, priority DESC, run_at)`):
    /// - `queued_apps`: the apps that may have queued deliveries (`app_claim_turns` rows whose turn is not
    ///   `'infinity'`, which the claim sets only when an app has none left);
    /// - `priorities`: the distinct `deliveries.priority` values of those apps' rows, highest first, ending with
    ///   one NULL row that ends its recursion (filter it out).
    /// Loose index scans: one probe per app and distinct value (a handful of values), however long the queue;
    /// what lets the queue lag and `status`'s counts read ranges of the index instead of scanning it.
    static let claimRangesCTE = """
        queued_apps AS (
            SELECT app_id FROM app_claim_turns WHERE turn_at < 'infinity'
        ), priorities AS (
            SELECT (SELECT max(m.priority) FROM queued_apps q CROSS JOIN LATERAL (
                        SELECT max(d.priority) AS priority FROM deliveries d WHERE d.app_id = q.app_id) m) AS priority
            UNION ALL
            SELECT (SELECT max(m.priority) FROM queued_apps q CROSS JOIN LATERAL (
                        SELECT max(d.priority) AS priority FROM deliveries d
                        WHERE d.app_id = q.app_id AND d.priority < p.priority) m)
            FROM priorities p WHERE p.priority IS NOT NULL
        )
        """

    /// An expression over ``claimRangesCTE``: the `run_at` of the oldest due delivery (`run_at <= now()`) of the
    /// queued apps `q` that `queuedAppCondition` admits, or NULL when none is due; the first due entry of each
    /// range, as the claim reads them.
    static func oldestDueRunAt(queuedAppCondition: String) -> String {
        """
        (SELECT min(o.run_at) FROM queued_apps q CROSS JOIN priorities p CROSS JOIN LATERAL (
             SELECT d.run_at FROM deliveries d
             WHERE d.app_id = q.app_id AND d.priority = p.priority AND d.run_at <= now()
             ORDER BY d.app_id, d.priority DESC, d.run_at LIMIT 1) o
         WHERE p.priority IS NOT NULL AND \(queuedAppCondition))
        """
    }

    /// A condition on the queued app `q`: its due rows are claimable, no operator's pause of the app or of the
    /// fleet holding them (``ClaimPauses``, as the claim's visit reads them). One InitPlan each per statement.
    static let claimable = "q.app_id <> ALL(ARRAY(\(ClaimPauses.pausedApps))) AND \(ClaimPauses.fleetNotPaused)"
}
