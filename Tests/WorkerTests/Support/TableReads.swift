import Postgres

/// Rows of `table` that `body` read on `connection`, from PostgreSQL's own counters for the current transaction
/// (`pg_stat_xact_user_tables`: rows returned by sequential scans plus rows fetched through indexes): how tests
/// check that a statement, trigger included, costs its input and not the table. `body` runs in a transaction
/// that is rolled back afterwards.
/// - Throws: `PostgresError` from `body` or the counters' query.
func rowsRead(of table: String, on connection: PostgresConnection, during body: () throws -> Void) throws -> Int {
    func counted() throws -> Int {
        try connection.query(
            """
            SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint AS n
            FROM pg_stat_xact_user_tables WHERE relname = $1
            """, [table])[0].decode(Int.self, "n")
    }
    try connection.execute("BEGIN")
    defer { try? connection.execute("ROLLBACK") }
    let before = try counted()
    try body()
    return try counted() - before
}
