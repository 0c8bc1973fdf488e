/// How the worker's connections reach PostgreSQL (docs/operations.md, "Connection poolers"):
/// `PUSHIZO_DATABASE_POOLER` (what stands in between) and `PUSHIZO_LISTEN_DATABASE_URL` (the `LISTEN`
/// connection's own route).
///
/// A pooler cannot be asked its pool mode over a client connection (PgBouncer answers `SHOW pool_mode` on its
/// admin console only), but it can be seen: it answers the connection with a process ID of its own (a cancel
/// key, PgBouncer docs "cancel requests"), which differs from `pg_backend_pid()`. So a pooler found where
/// `PUSHIZO_DATABASE_POOLER=none` says there is none is refused, as is one found on the `LISTEN` route
/// (``verify(_:listen:)``, in the runtime, asks the connection).
public struct DatabaseRoute: Sendable, Equatable {
    /// `PUSHIZO_DATABASE_POOLER`.
    public var poolerMode: DatabasePooler
    /// The `LISTEN` connection's connection string; nil: no `LISTEN`, the worker polls every
    /// `PUSHIZO_POLL_INTERVAL` (a transaction-mode pooler without `PUSHIZO_LISTEN_DATABASE_URL`).
    public var listenURL: String?

    public init(poolerMode: DatabasePooler, listenURL: String?) {
        self.poolerMode = poolerMode
        self.listenURL = listenURL
    }

    /// Reads both keys.
    /// - Parameter databaseURL: `PUSHIZO_DATABASE_URL`, the `LISTEN` route unless a transaction-mode pooler is on it.
    /// - Throws: ``ConfigurationError`` for `statement` or an unknown mode, or a `PUSHIZO_LISTEN_DATABASE_URL` libpq
    ///   cannot parse.
    public init(_ reader: ConfigurationReader, databaseURL: String) throws {
        if reader.string(.databasePooler)?.lowercased() == "statement" {
            throw ConfigurationError(
                key: ConfigurationKey.databasePooler.name,
                problem: "statement pool mode cannot run the worker, whose claims and expansions are transactions of several statements: use pool_mode = transaction or session for its database (docs/operations.md)")
        }
        let mode = DatabasePooler(rawValue: try reader.choice(.databasePooler)) ?? DatabasePooler.none
        poolerMode = mode
        listenURL = try reader.connectionString(.listenDatabaseURL) ?? (mode.keepsSessionState ? databaseURL : nil)
    }

    /// Why the database connection cannot be used as configured, or nil when it can.
    /// - Parameters:
    ///   - announcedProcessID: the process ID the connection was answered with (`PQbackendPID`).
    ///   - serverProcessID: `pg_backend_pid()` on that connection.
    public func databaseRefusal(announcedProcessID: Int32, serverProcessID: Int32) -> ConfigurationError? {
        guard poolerMode == .none, announcedProcessID != serverProcessID else { return nil }
        return ConfigurationError(
            key: ConfigurationKey.databasePooler.name,
            problem: "is none, but PUSHIZO_DATABASE_URL goes through a connection pooler (it answered as process \(announcedProcessID), PostgreSQL runs the session as \(serverProcessID)): set PUSHIZO_DATABASE_POOLER to the pooler's pool_mode, transaction or session (docs/operations.md)")
    }

    /// Why the `LISTEN` connection cannot be used, or nil when it can: it must reach PostgreSQL itself, as a pooler
    /// in transaction mode would let the `LISTEN` go with the server session it ran on.
    public func listenRefusal(announcedProcessID: Int32, serverProcessID: Int32) -> ConfigurationError? {
        guard poolerMode == .transaction, announcedProcessID != serverProcessID else { return nil }
        return ConfigurationError(
            key: ConfigurationKey.listenDatabaseURL.name,
            problem: "goes through a connection pooler (it answered as process \(announcedProcessID), PostgreSQL runs the session as \(serverProcessID)): with PUSHIZO_DATABASE_POOLER=transaction it must connect to PostgreSQL directly, or be unset for polling only (docs/operations.md)")
    }

    /// One line for `check` and the start-up log: the pooler and how wake-ups come.
    public var summary: String {
        let pooler = poolerMode == .none ? "no pooler" : "a \(poolerMode.rawValue)-mode pooler"
        guard listenURL != nil else { return "\(pooler); no LISTEN (PUSHIZO_LISTEN_DATABASE_URL unset): polling only" }
        return "\(pooler); LISTEN on \(poolerMode == .transaction ? "PUSHIZO_LISTEN_DATABASE_URL" : "the same route")"
    }
}
