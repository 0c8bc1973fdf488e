import Postgres

extension QueueStore {
    /// The queue lag: how long the oldest due delivery (`run_at <= now()`, not leased) has waited, in seconds;
    /// 0 when none is due. Cheap on any queue size: a loose index scan over `deliveries_claim_order`
    /// (`priority DESC, run_at`) visits the first index entry of each distinct priority (two in practice),
    /// rather than every due row.
    /// - Throws: ``PostgresError``.
    public static func queueLag(on connection: PostgresConnection) throws -> Double {
        let rows = try connection.query(
            """
            WITH RECURSIVE \(distinctPrioritiesCTE)
            SELECT coalesce(extract(epoch FROM now() - min(oldest.run_at)), 0)::float8 AS lag
            FROM priorities p
            CROSS JOIN LATERAL (
                SELECT d.run_at FROM deliveries d
                WHERE d.priority = p.priority AND d.run_at <= now()
                ORDER BY d.priority DESC, d.run_at LIMIT 1
            ) oldest
            WHERE p.priority IS NOT NULL
            """)
        return max(0, try rows.first?.decode(Double.self, "lag") ?? 0)
    }

    /// A `WITH RECURSIVE` element named `priorities`: the distinct `deliveries.priority` values, highest first,
    /// then one NULL row that ends the recursion (filter it out). A loose index scan: one probe of
    /// `deliveries_claim_order` per distinct priority (a handful), however long the queue; what lets the
    /// queue lag and `status`'s counts read ranges of that index instead of scanning it.
    static let distinctPrioritiesCTE = """
        priorities AS (
            SELECT max(priority) AS priority FROM deliveries
            UNION ALL
            SELECT (SELECT max(d.priority) FROM deliveries d WHERE d.priority < p.priority)
            FROM priorities p WHERE p.priority IS NOT NULL
        )
        """
}
