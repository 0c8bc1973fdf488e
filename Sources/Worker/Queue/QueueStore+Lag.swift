import Postgres

extension QueueStore {
    /// The queue lag: how long the oldest due delivery (`run_at <= now()`, not leased) has waited, in seconds;
    /// 0 when none is due. Cheap on any queue size: a loose index scan of the claim's two partial indexes
    /// (``claimRangesCTE``) visits the first due entry of each distinct priority of unlimited apps (two in
    /// practice) and of each limited app and priority, rather than every due row.
    /// - Throws: ``PostgresError``.
    public static func queueLag(on connection: PostgresConnection) throws -> Double {
        let rows = try connection.query(
            """
            WITH RECURSIVE \(claimRangesCTE)
            SELECT coalesce(extract(epoch FROM now() - \(oldestDueRunAt)), 0)::float8 AS lag
            """)
        return max(0, try rows.first?.decode(Double.self, "lag") ?? 0)
    }

    /// Two `WITH RECURSIVE` elements listing the ranges the claim's partial indexes hold, each ending with one
    /// NULL row that ends its recursion (filter it out):
    /// - `throttled_apps`: the distinct `app_id` of limited apps' rows (`deliveries_claim_throttled`,
    ///   `(app_id, priority DESC, run_at) WHERE throttled`), in order;
    /// - `priorities`: the distinct `deliveries.priority` values of all rows, highest first, read from
    ///   `deliveries_claim_unthrottled` (`(priority DESC, run_at) WHERE NOT throttled`) and from each limited
    ///   app's range of `deliveries_claim_throttled`.
    /// Loose index scans: one probe per distinct value (a handful), however long the queue; what lets the queue
    /// lag and `status`'s counts read ranges of those indexes instead of scanning them.
    static let claimRangesCTE = """
        throttled_apps AS (
            SELECT (SELECT d.app_id FROM deliveries d WHERE d.throttled ORDER BY d.app_id LIMIT 1) AS app_id
            UNION ALL
            SELECT (SELECT d.app_id FROM deliveries d WHERE d.throttled AND d.app_id > a.app_id ORDER BY d.app_id LIMIT 1)
            FROM throttled_apps a WHERE a.app_id IS NOT NULL
        ), priorities AS (
            SELECT greatest(
                (SELECT max(d.priority) FROM deliveries d WHERE NOT d.throttled),
                (SELECT max(t.priority) FROM throttled_apps a CROSS JOIN LATERAL (
                     SELECT max(d.priority) AS priority FROM deliveries d WHERE d.throttled AND d.app_id = a.app_id) t
                 WHERE a.app_id IS NOT NULL)) AS priority
            UNION ALL
            SELECT greatest(
                (SELECT max(d.priority) FROM deliveries d WHERE NOT d.throttled AND d.priority < p.priority),
                (SELECT max(t.priority) FROM throttled_apps a CROSS JOIN LATERAL (
                     SELECT max(d.priority) AS priority FROM deliveries d
                     WHERE d.throttled AND d.app_id = a.app_id AND d.priority < p.priority) t
                 WHERE a.app_id IS NOT NULL))
            FROM priorities p WHERE p.priority IS NOT NULL
        )
        """

    /// An expression over ``claimRangesCTE``: the `run_at` of the oldest due delivery (`run_at <= now()`), or
    /// NULL when none is due; the first due entry of each range, as the claim reads them.
    static let oldestDueRunAt = """
        least(
            (SELECT min(o.run_at) FROM priorities p CROSS JOIN LATERAL (
                 SELECT d.run_at FROM deliveries d
                 WHERE NOT d.throttled AND d.priority = p.priority AND d.run_at <= now()
                 ORDER BY d.priority DESC, d.run_at LIMIT 1) o
             WHERE p.priority IS NOT NULL),
            (SELECT min(o.run_at) FROM priorities p CROSS JOIN throttled_apps a CROSS JOIN LATERAL (
                 SELECT d.run_at FROM deliveries d
                 WHERE d.throttled AND d.app_id = a.app_id AND d.priority = p.priority AND d.run_at <= now()
                 ORDER BY d.app_id, d.priority DESC, d.run_at LIMIT 1) o
             WHERE p.priority IS NOT NULL AND a.app_id IS NOT NULL))
        """
}
