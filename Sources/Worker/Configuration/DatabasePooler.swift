/// `PUSHIZO_DATABASE_POOLER`: what stands between the worker's connections and PostgreSQL, nothing or a
/// connection pooler (PgBouncer) in one of its pool modes (PgBouncer docs, "pool_mode"). The configuration's own
/// value; the runtime hands the Postgres module its `PostgresPoolerMode` (`PostgresPoolerMode(_:)`).
///
/// PgBouncer's `statement` mode (no multi-statement transactions) cannot run the worker and has no case.
public enum DatabasePooler: String, Sendable, CaseIterable {
    /// The worker connects to PostgreSQL itself.
    case none
    /// A pooler that gives a client one server session for the client connection's whole life.
    case session
    /// A pooler that hands the server session to another client after every transaction.
    case transaction

    /// Whether a server session's state (prepared statements, session locks, `LISTEN`, `SET`) outlives the
    /// transaction that made it, as seen from the client connection.
    public var keepsSessionState: Bool { self != .transaction }
}
