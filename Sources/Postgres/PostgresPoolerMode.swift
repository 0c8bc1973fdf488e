/// What stands between the worker's connections and PostgreSQL: nothing, or a connection pooler (PgBouncer) in
/// one of its pool modes (PgBouncer docs, "pool_mode").
///
/// - `none` and `session`: a client connection keeps one server session for its whole life, so named prepared
///   statements, session-level advisory locks and `LISTEN` work as on PostgreSQL itself.
/// - `transaction`: the pooler hands the server session to another client after every transaction (and after
///   every statement outside one). Nothing may be left in the session between transactions: statements are sent
///   unnamed (`PQexecParams`), advisory locks are transaction-level (`pg_advisory_xact_lock`), and `LISTEN` needs a
///   connection of its own that does not go through the pooler.
///
/// PgBouncer's `statement` mode (no multi-statement transactions) cannot run the worker and has no case.
public enum PostgresPoolerMode: String, Sendable, CaseIterable {
    case none
    case session
    case transaction

    /// Whether a server session's state (prepared statements, session locks, `LISTEN`, `SET`) outlives the
    /// transaction that made it, as seen from the client connection.
    public var keepsSessionState: Bool { self != .transaction }
}
