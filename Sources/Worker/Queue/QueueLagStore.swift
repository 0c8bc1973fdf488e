import Postgres

/// The queue lag, read from the claim's per-app index without scanning the queue.
public enum QueueLagStore {
    /// The queue lag: how long the oldest due delivery (`run_at <= now()`, not leased) has waited, in seconds;
    /// 0 when none is due. Cheap on any queue size: a loose index scan of the claim's per-app index
    /// (``claimRangesCTE``) visits the first due entry of each app with queued deliveries and each of its
    /// priorities, rather than every due row.
    /// - Throws: ``PostgresError``.
    public static func lag(on connection: PostgresConnection) throws -> Double {
        let rows = try connection.query(
            """
            WITH RECURSIVE \(claimRangesCTE)
            SELECT coalesce(extract(epoch FROM now() - \(oldestDueRunAt)), 0)::float8 AS lag
            """)
        return max(0, try rows.first?.decode(Double.self, "lag") ?? 0)
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

    /// An expression over ``claimRangesCTE``: the `run_at` of the oldest due delivery (`run_at <= now()`), or
    /// NULL when none is due; the first due entry of each range, as the claim reads them.
    static let oldestDueRunAt = """
        (SELECT min(o.run_at) FROM queued_apps q CROSS JOIN priorities p CROSS JOIN LATERAL (
             SELECT d.run_at FROM deliveries d
             WHERE d.app_id = q.app_id AND d.priority = p.priority AND d.run_at <= now()
             ORDER BY d.app_id, d.priority DESC, d.run_at LIMIT 1) o
         WHERE p.priority IS NOT NULL)
        """
}
