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
            WITH RECURSIVE priorities AS (
                (SELECT priority FROM deliveries ORDER BY priority DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT d.priority FROM deliveries d WHERE d.priority < p.priority
                        ORDER BY d.priority DESC LIMIT 1)
                FROM priorities p WHERE p.priority IS NOT NULL
            )
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
}
