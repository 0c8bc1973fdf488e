import Foundation
internal import CLibPQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A LISTEN/NOTIFY notification (PostgreSQL docs, `NOTIFY`; libpq docs §34.9 "Asynchronous Notification").
public struct PostgresNotification: Sendable, Equatable {
    /// The channel name as given to `NOTIFY` / `pg_notify`.
    public var channel: String
    /// The payload string, empty when none was given.
    public var payload: String
    /// The process ID of the notifying backend.
    public var processID: Int32

    public init(channel: String, payload: String, processID: Int32) {
        self.channel = channel
        self.payload = payload
        self.processID = processID
    }
}

/// One statement of a ``PostgresConnection/pipeline(_:)`` batch: SQL with `$n` placeholders and values.
public struct PostgresStatement: Sendable {
    public var sql: String
    public var parameters: [any PostgresEncodable]

    public init(_ sql: String, _ parameters: [any PostgresEncodable] = []) {
        self.sql = sql
        self.parameters = parameters
    }
}

/// One libpq connection (`PGconn`): blocking, thread-confined.
///
/// Use it from one thread at a time (libpq docs §34.19 "Behavior in Threaded Programs": a `PGconn` must not
/// be used by several threads at once); ``PostgresClient`` gives each connection its own dedicated thread.
/// Never call it from Swift's cooperative pool: every method blocks on the network.
///
/// Every session is set up with `DateStyle=ISO`, `TimeZone=UTC`, `bytea_output=hex`,
/// `extra_float_digits=3` and `client_encoding=UTF8`, so text results parse the same way everywhere, and with
/// this module's own timeouts (``sessionTimeouts``), so the server's or the database's settings (`ALTER
/// DATABASE ... SET statement_timeout`, which only sessions started later see) cannot starve the session.
///
/// It connects only to a server that accepts writes (libpq's `target_session_attrs=read-write`, unless the
/// connection string sets `target_session_attrs`): a standby, or a primary with `default_transaction_read_only`
/// on, is refused at connect. A session that turns read-only later answers writes with SQLSTATE `25006`
/// (`read_only_sql_transaction`); the connection then counts as bad (``isConnectionBad``), so a pool replaces it.
/// Server notices (e.g. from `CREATE TABLE IF NOT EXISTS`) are dropped instead of going to stderr.
public final class PostgresConnection {
    private var conn: OpaquePointer?
    /// SQL text -> server-side prepared statement name, for ``preparedQuery(_:_:)``.
    private var preparedNames: [String: String] = [:]
    private var preparedCounter = 0
    private var savepointDepth = 0
    /// What stands between this connection and PostgreSQL (``PostgresPoolerMode``): behind a transaction-mode
    /// pooler, ``preparedQuery(_:_:)`` sends unnamed statements and no session state is set up.
    public let poolerMode: PostgresPoolerMode

    /// The server answered with an error that says this session cannot do the work (``PostgresError/isConnectionProblem``,
    /// e.g. SQLSTATE 25006 on a session that turned read-only): replace it.
    private var sessionUnusable = false

    /// Run-time parameters every session sets right after connecting (PostgreSQL docs, "Client Connection
    /// Defaults"), overriding the server's, the database's and the role's values:
    /// - `statement_timeout` 5 min: far above any statement of the worker (bounded chunks, claims, completions),
    ///   low enough that a statement hung on a broken server does not hold its connection for ever. Callers that
    ///   want shorter set it per transaction (`SET LOCAL`).
    /// - `lock_timeout` 1 min: the worker's statements skip locked rows; a lock wait this long is a table lock
    ///   held by someone else (a migration, an operator's session).
    /// - `idle_in_transaction_session_timeout` 5 min: the worker never idles inside a transaction; a session
    ///   that does is stuck, and the server ends it and frees its locks.
    public static let sessionTimeouts: KeyValuePairs<String, String> = [
        "statement_timeout": "5min", "lock_timeout": "1min", "idle_in_transaction_session_timeout": "5min",
    ]

    /// Connects (blocking) and sets up the session.
    ///
    /// - Parameters:
    ///   - connectionString: a libpq connection string, `postgresql://user:pass@host:5432/db?sslmode=...`
    ///     or `host=... port=... dbname=...` (libpq docs §34.1.1). Its values win over this module's
    ///     defaults (`application_name`, `connect_timeout=10`, TCP keepalives after 30 s idle,
    ///     `target_session_attrs=read-write`).
    ///   - applicationName: shown in `pg_stat_activity.application_name` unless the string sets one.
    ///   - poolerMode: what stands between this connection and PostgreSQL (``PostgresPoolerMode``).
    /// - Throws: ``PostgresError`` `.connectionFailed`, its message free of passwords, with the server's
    ///   SQLSTATE when the server refused the session (`53300` `too_many_connections`, `57P03`
    ///   `cannot_connect_now`, `28P01` ...); `.invalidConnectionString` when libpq cannot parse the string
    ///   (``connectionStringProblem(_:)``).
    public convenience init(
        connectionString: String, applicationName: String = "pushizo-worker", poolerMode: PostgresPoolerMode = .none
    ) throws {
        try self.init(
            connectionString: connectionString, applicationName: applicationName, wakeFD: nil, poolerMode: poolerMode)
    }

    /// Why libpq cannot parse `connectionString` (libpq docs §34.1.1 "Connection Strings"), its own message with only
    /// the passwords masked (`invalid connection string: missing "=" after "********" in connection info string`
    /// for `password=Sup3r S3cret`, whose password libpq cut at the space), or nil when it parses. Contacts nothing:
    /// for settings checked at start-up.
    ///
    /// A string that parses may still hold a value libpq refuses when connecting (`sslmode=bogus`:
    /// `invalid sslmode value: "bogus"`): libpq is asked about the values too (``PostgresOptionCheck``), still
    /// without contacting a server.
    public static func connectionStringProblem(_ connectionString: String) -> String? {
        switch PostgresRedaction.parse(connectionString) {
        case .failure(let error): return invalidConnectionStringMessage(error)
        case .success(let secrets):
            return PostgresOptionCheck.problem(connectionString, secrets: secrets).map { "invalid connection option: " + $0 }
        }
    }

    private static func invalidConnectionStringMessage(_ error: RedactedParseError) -> String {
        "invalid connection string: " + error.message.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Connects with `PQconnectStartParams` / `PQconnectPoll`, so a wake-up on `wakeFD` aborts the attempt
    /// (``PostgresListener`` shutdown). The deadline is the connection's `connect_timeout` (whole attempt).
    init(connectionString: String, applicationName: String, wakeFD: Int32?, poolerMode: PostgresPoolerMode = .none) throws {
        self.poolerMode = poolerMode
        // Entries before `dbname` can be overridden by the expanded connection string (libpq docs §34.1,
        // PQconnectdbParams: "array entries appearing before an expanded dbname entry can be overridden").
        let parameters: [(String, String)] = [
            ("connect_timeout", "10"),
            ("keepalives_idle", "30"),
            ("keepalives_interval", "10"),
            ("keepalives_count", "3"),
            // A standby or a read-only primary cannot take the worker's writes: refuse it at connect (libpq
            // docs §34.1.2; from PostgreSQL 14 libpq reads `default_transaction_read_only` and `in_hot_standby`
            // from the startup's ParameterStatus, else it asks `SHOW transaction_read_only`).
            ("target_session_attrs", "read-write"),
            ("application_name", applicationName),
            ("client_encoding", "UTF8"),
            ("dbname", connectionString),
        ]
        // libpq's own parse finds the passwords to mask; a string it cannot parse fails here, its message masked.
        let secrets: [String]
        switch PostgresRedaction.parse(connectionString) {
        case .success(let found): secrets = found
        case .failure(let error):
            throw PostgresError(code: .invalidConnectionString, message: Self.invalidConnectionStringMessage(error))
        }
        func failure(_ message: String) -> PostgresError {
            let (sqlState, text) = Self.splitSQLState(message)
            return PostgresError(
                code: .connectionFailed, message: PostgresRedaction.redact(text, secrets: secrets), sqlState: sqlState)
        }
        let started: OpaquePointer? = withCStringArray(parameters.map(\.0)) { keys in
            withCStringArray(parameters.map(\.1)) { values in
                PQconnectStartParams(keys, values, 1)
            }
        }
        guard let conn = started else { throw failure("could not allocate a libpq connection") }
        // Verbose while connecting, so a refusal's message carries its SQLSTATE (`FATAL:  53300: ...`): a pool
        // backs off longer when the server has no slot left. Back to the default once connected.
        PQsetErrorVerbosity(conn, PQERRORS_VERBOSE)
        if PQstatus(conn) == CONNECTION_BAD {
            let message = Self.errorText(conn)
            PQfinish(conn)
            throw failure(message)
        }
        let timeout = Self.connectTimeout(conn)
        let deadline = ContinuousClock.now + .seconds(timeout)
        var status = PGRES_POLLING_WRITING
        while status != PGRES_POLLING_OK {
            if status == PGRES_POLLING_FAILED {
                let message = Self.errorText(conn)
                PQfinish(conn)
                throw failure(message)
            }
            let remaining = ContinuousClock.now.duration(to: deadline)
            let events = Int16(status == PGRES_POLLING_READING ? POLLIN : POLLOUT)
            // No socket yet (between host attempts): poll libpq again at once, unless it is time to stop.
            let socket = PQsocket(conn)
            let outcome: PostgresSocketWait.Outcome
            if socket >= 0 {
                outcome = PostgresSocketWait.wait(fd: socket, events: events, wakeFD: wakeFD, timeout: remaining)
            } else if remaining <= .zero {
                outcome = .timedOut
            } else if let wakeFD, PostgresSocketWait.wait(fd: -1, events: 0, wakeFD: wakeFD, timeout: .zero) == .woken {
                outcome = .woken
            } else {
                outcome = .ready
            }
            switch outcome {
            case .ready: break
            case .timedOut:
                PQfinish(conn)
                throw failure("timed out connecting after \(timeout) s")
            case .woken:
                PQfinish(conn)
                throw PostgresError(code: .shutdown, message: "connecting was interrupted by shutdown")
            }
            status = PQconnectPoll(conn)
        }
        PQsetErrorVerbosity(conn, PQERRORS_DEFAULT)
        // Drop notices instead of libpq's default of printing them to stderr.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        self.conn = conn
        do {
            // Behind a transaction-mode pooler a session-level SET stays on whichever server session ran it, for
            // other clients to inherit, and is missing from the next one this connection gets. PgBouncer carries
            // DateStyle and TimeZone to every server session it links (they are reported parameters); bytea_output
            // and extra_float_digits are left at the server's defaults, which the decoders read as well (bytea's
            // escape format; the shortest exact float text of PostgreSQL 12 on), and the timeouts are the pooler
            // role's to set (docs/operations.md, "Connection poolers"). Otherwise the timeouts come first: the
            // statements after them run under the worker's statement_timeout, not a database's tiny one.
            let timeouts = Self.sessionTimeouts.map { "SET \($0.key) TO '\($0.value)'" }
            try execute(
                poolerMode.keepsSessionState
                    ? (timeouts + ["SET DateStyle TO ISO", "SET TimeZone TO 'UTC'", "SET bytea_output TO hex",
                                   "SET extra_float_digits TO 3"]).joined(separator: "; ")
                    : "SET DateStyle TO ISO; SET TimeZone TO 'UTC'")
        } catch let error as PostgresError {
            close()
            throw failure("session setup failed: \(error.message)")
        }
    }

    /// A handle that cancels this connection's running statement from another thread
    /// (``PostgresCanceller``); nil when the connection is closed.
    public func makeCanceller() -> PostgresCanceller? {
        conn.flatMap { PostgresCanceller(conn: $0) }
    }

    deinit {
        if let conn { PQfinish(conn) }
    }

    /// Closes the connection (`PQfinish`). Later calls throw `.connectionLost`. Idempotent.
    public func close() {
        if let conn { PQfinish(conn) }
        conn = nil
    }

    /// True when the connection is closed, libpq reports it broken (`PQstatus == CONNECTION_BAD`), or a
    /// statement's error said the session cannot do the work (``PostgresError/isConnectionProblem``: SQLSTATE
    /// class 08, 57P01-57P03, or 25006 `read_only_sql_transaction` from a server that turned read-only); it must
    /// then be replaced.
    public var isConnectionBad: Bool {
        guard let conn else { return true }
        return sessionUnusable || PQstatus(conn) == CONNECTION_BAD
    }

    /// The server process ID of this session (`PQbackendPID`), as in `pg_stat_activity.pid`; 0 if closed.
    public var processID: Int32 {
        guard let conn else { return 0 }
        return PQbackendPID(conn)
    }

    /// The process ID of the PostgreSQL backend that runs this connection's statements now
    /// (`SELECT pg_backend_pid()`). Without a pooler it is ``processID``; a pooler answers the connection with a
    /// process ID (a cancel key) of its own, so a difference shows that one stands in between.
    /// - Throws: as ``query(_:_:)``.
    public func serverProcessID() throws -> Int32 {
        try query("SELECT pg_backend_pid() AS pid")[0].decode(Int32.self, "pid")
    }

    /// The server this session is connected to (`PQhost`, `PQport`): after a failover through a multi-host
    /// connection string, the host that took over. Nil if closed.
    public var serverAddress: PostgresServerAddress? {
        guard let conn, let host = PQhost(conn), let port = PQport(conn) else { return nil }
        return PostgresServerAddress(host: String(cString: host), port: String(cString: port))
    }

    /// True while a transaction block is open (including a failed one awaiting ROLLBACK).
    public var isInTransaction: Bool {
        guard let conn else { return false }
        let status = PQtransactionStatus(conn)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    // MARK: Statements

    /// Runs one parameterized statement with the extended protocol (`PQexecParams`), parameters and
    /// results in text format.
    ///
    /// - Parameters:
    ///   - sql: one statement; parameters are `$1`, `$2`, ... (never interpolate values into `sql`).
    ///   - parameters: values for `$1...`; nil-valued ones are SQL NULL. Cast where the server cannot
    ///     infer the type, e.g. `$1::uuid[]`.
    /// - Returns: the rows (empty for commands) and the affected-row count.
    /// - Throws: ``PostgresError`` `.queryFailed` (with SQLSTATE, detail, hint), `.connectionLost`
    ///   (``PostgresError/isConnectionProblem`` set), or `.unexpectedResult` (e.g. `COPY`).
    public func query(_ sql: String, _ parameters: [any PostgresEncodable] = []) throws -> PostgresQueryResult {
        let conn = try open()
        let result: OpaquePointer?
        if parameters.isEmpty {
            result = PQexecParams(conn, sql, 0, nil, nil, nil, nil, 0)
        } else {
            result = withParameterPointers(parameters) { pointers, lengths, formats in
                PQexecParams(conn, sql, Int32(parameters.count), nil, pointers, lengths, formats, 0)
            }
        }
        return try check(result, conn)
    }

    /// Runs `sql` as a named prepared statement of this session: prepared (`PQprepare`, types inferred by
    /// the server) the first time this connection sees this exact text, then executed
    /// (`PQexecPrepared`) with text parameters, saving the parse/plan work of ``query(_:_:)`` on hot
    /// statements. Meant for a fixed set of statements: every distinct text stays prepared for the
    /// session's life. If the statement vanished (`DISCARD ALL`, SQLSTATE 26000) or its cached plan no
    /// longer fits the schema (0A000), it is prepared again and run once more, outside transactions only
    /// (inside one the error has already aborted it: the error is thrown, and the next call prepares afresh).
    ///
    /// Behind a transaction-mode pooler (``poolerMode``) it is ``query(_:_:)``: a named statement prepared on one
    /// server session would be missing from, or clash with another client's in, the next one the pooler gives.
    /// - Throws: as ``query(_:_:)``.
    public func preparedQuery(_ sql: String, _ parameters: [any PostgresEncodable] = []) throws -> PostgresQueryResult {
        guard poolerMode.keepsSessionState else { return try query(sql, parameters) }
        do {
            return try runPrepared(sql, parameters)
        } catch let error as PostgresError where error.sqlState == "26000" || error.sqlState == "0A000" {
            preparedNames[sql] = nil
            if isInTransaction { throw error }
            return try runPrepared(sql, parameters)
        }
    }

    private func runPrepared(_ sql: String, _ parameters: [any PostgresEncodable]) throws -> PostgresQueryResult {
        let conn = try open()
        let name: String
        if let existing = preparedNames[sql] {
            name = existing
        } else {
            preparedCounter += 1
            name = "pushizo_\(preparedCounter)"
            _ = try check(PQprepare(conn, name, sql, 0, nil), conn)
            preparedNames[sql] = name
        }
        let result: OpaquePointer?
        if parameters.isEmpty {
            result = PQexecPrepared(conn, name, 0, nil, nil, nil, 0)
        } else {
            result = withParameterPointers(parameters) { pointers, lengths, formats in
                PQexecPrepared(conn, name, Int32(parameters.count), pointers, lengths, formats, 0)
            }
        }
        return try check(result, conn)
    }

    /// Sends every statement at once and reads all results, one network round trip for the batch (libpq
    /// pipeline mode, libpq docs §34.5 "Pipeline Mode"), followed by a single Sync.
    ///
    /// Outside an explicit transaction the batch is one implicit transaction (protocol docs §55.2.4: the
    /// statements before a Sync commit together): if one fails, the later ones are skipped and all are
    /// rolled back. Inside ``transaction(_:)`` the failure aborts that transaction.
    /// - Returns: one result per statement, in order.
    /// - Throws: the first failing statement's ``PostgresError``; `.connectionLost` (the connection is
    ///   then closed) when sending or receiving fails.
    public func pipeline(_ statements: [PostgresStatement]) throws -> [PostgresQueryResult] {
        let conn = try open()
        if statements.isEmpty { return [] }
        guard PQenterPipelineMode(conn) == 1 else {
            throw PostgresError(code: .queryFailed, message: "cannot enter pipeline mode: \(Self.errorText(conn))")
        }
        func broken() -> PostgresError {
            let error = PostgresError(code: .connectionLost, message: Self.errorText(conn))
            close()  // Half-sent pipelines leave the protocol state unknown: start over.
            return error
        }
        // Non-blocking while sending, so a large batch cannot deadlock with a server that is itself
        // blocked writing results we are not reading yet (libpq docs §34.5.1).
        _ = PQsetnonblocking(conn, 1)
        for statement in statements {
            let sent: Int32
            if statement.parameters.isEmpty {
                sent = PQsendQueryParams(conn, statement.sql, 0, nil, nil, nil, nil, 0)
            } else {
                sent = withParameterPointers(statement.parameters) { pointers, lengths, formats in
                    PQsendQueryParams(conn, statement.sql, Int32(statement.parameters.count), nil, pointers, lengths, formats, 0)
                }
            }
            if sent != 1 { throw broken() }
        }
        if PQpipelineSync(conn) != 1 { throw broken() }
        while true {
            let flushed = PQflush(conn)
            if flushed == 0 { break }
            if flushed < 0 { throw broken() }
            let events = Int16(POLLIN | POLLOUT)
            _ = PostgresSocketWait.wait(fd: PQsocket(conn), events: events, wakeFD: nil, timeout: .seconds(3600))
            if PQconsumeInput(conn) == 0 { throw broken() }
        }
        _ = PQsetnonblocking(conn, 0)

        var results: [PostgresQueryResult] = []
        results.reserveCapacity(statements.count)
        var firstError: PostgresError?
        for _ in statements {
            // Each statement yields its result(s), then NULL.
            var gotResult = false
            while let result = PQgetResult(conn) {
                gotResult = true
                if PQresultStatus(result) == PGRES_PIPELINE_ABORTED || firstError != nil {
                    PQclear(result)
                } else {
                    do { results.append(try check(result, conn)) } catch let error as PostgresError { firstError = error }
                }
                if PQstatus(conn) == CONNECTION_BAD { throw firstError ?? broken() }
            }
            if !gotResult, PQstatus(conn) == CONNECTION_BAD { throw broken() }
        }
        // The Sync's own result ends the pipeline.
        while let result = PQgetResult(conn) {
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        if PQexitPipelineMode(conn) != 1 { throw firstError ?? broken() }
        if let firstError { throw firstError }
        return results
    }

    /// Runs `sql` with the simple-query protocol (`PQexec`): several `;`-separated statements allowed, no
    /// parameters. Without an explicit `BEGIN` they run as one implicit transaction (PostgreSQL docs
    /// §55.2.2 "Simple Query"). For migration files and session setup, not for values.
    /// - Throws: as ``query(_:_:)``; the error of the first failing statement.
    public func execute(_ sql: String) throws {
        let conn = try open()
        _ = try check(PQexec(conn, sql), conn)
    }

    /// Runs `body` inside `BEGIN` / `COMMIT`; `ROLLBACK`s and rethrows when `body` throws.
    ///
    /// Called while a transaction is already open, it nests with a savepoint instead (`SAVEPOINT`,
    /// `RELEASE SAVEPOINT`, `ROLLBACK TO SAVEPOINT` on throw), so only the inner work is undone.
    /// If `body` swallowed a statement error, PostgreSQL turns the `COMMIT` into a rollback; that is
    /// detected (command tag `ROLLBACK`) and thrown as `.queryFailed`, SQLSTATE `25P02`.
    /// - Parameter localSettings: run-time parameters set with `SET LOCAL` (PostgreSQL docs, `SET`) in the same
    ///   round trip as `BEGIN` (or the savepoint), for the rest of the transaction: names as PostgreSQL spells
    ///   them, values quoted with `PQescapeLiteral`. Nested, they stay set after the savepoint is released, until
    ///   the enclosing transaction ends.
    /// - Throws: `body`'s error, or ``PostgresError`` from `BEGIN` / `COMMIT` / the savepoint commands /
    ///   `SET LOCAL` (an unknown parameter or value).
    public func transaction<T>(
        localSettings: KeyValuePairs<String, String> = [:], _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        var settings: [String] = []
        for (name, value) in localSettings {
            guard Self.isParameterName(name) else {
                throw PostgresError(code: .queryFailed, message: "not a run-time parameter name: \(name)")
            }
            settings.append("SET LOCAL \(name) TO \(try quoteLiteral(value))")
        }
        if isInTransaction {
            savepointDepth += 1
            defer { savepointDepth -= 1 }
            let savepoint = "pushizo_savepoint_\(savepointDepth)"
            // Apart from the settings, so that a refused one is undone by rolling back to a savepoint that exists.
            try execute("SAVEPOINT \(savepoint)")
            if !settings.isEmpty {
                do {
                    try execute(settings.joined(separator: "; "))
                } catch {
                    if !isConnectionBad { try? execute("ROLLBACK TO SAVEPOINT \(savepoint); RELEASE SAVEPOINT \(savepoint)") }
                    throw error
                }
            }
            let value: T
            do {
                value = try body(self)
            } catch {
                if !isConnectionBad { try? execute("ROLLBACK TO SAVEPOINT \(savepoint); RELEASE SAVEPOINT \(savepoint)") }
                throw error
            }
            try execute("RELEASE SAVEPOINT \(savepoint)")
            return value
        }
        do {
            try execute(settings.isEmpty ? "BEGIN" : (["BEGIN"] + settings).joined(separator: "; "))
        } catch {
            // A refused setting leaves the block open and aborted.
            if !isConnectionBad && isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
        let value: T
        do {
            value = try body(self)
        } catch {
            if !isConnectionBad && isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
        let conn = try open()
        let result = try check(PQexec(conn, "COMMIT"), conn, keepCommandTag: true)
        if result.commandTag == "ROLLBACK" {
            throw PostgresError(
                code: .queryFailed,
                message: "the transaction was rolled back at COMMIT because a statement in it failed",
                sqlState: "25P02")
        }
        return value
    }

    // MARK: LISTEN / NOTIFY

    /// Quotes `identifier` for SQL with `PQescapeIdentifier` (double quotes, inner quotes doubled).
    /// - Throws: `.queryFailed` if libpq refuses it (e.g. invalid encoding), `.connectionLost` if closed.
    public func quoteIdentifier(_ identifier: String) throws -> String {
        let conn = try open()
        let utf8Count = identifier.utf8.count
        guard let escaped = PQescapeIdentifier(conn, identifier, utf8Count) else {
            throw PostgresError(code: .queryFailed, message: "cannot quote identifier: \(Self.errorText(conn))")
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    /// A run-time parameter's name as `SET` takes it unquoted: lower-case letters, digits and `_`, not starting with
    /// a digit, optionally one `.` between two such parts (a custom one, as `auto_explain.log_min_duration`).
    static func isParameterName(_ name: String) -> Bool {
        let parts = name.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count) else { return false }
        return parts.allSatisfy { part in
            guard let first = part.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
            return part.allSatisfy { byte in
                byte == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            }
        }
    }

    /// Quotes `text` as an SQL string literal with `PQescapeLiteral` (single quotes, inner quotes doubled,
    /// `E'...'` when it holds a backslash).
    /// - Throws: `.queryFailed` if libpq refuses it (e.g. invalid encoding), `.connectionLost` if closed.
    public func quoteLiteral(_ text: String) throws -> String {
        let conn = try open()
        guard let escaped = PQescapeLiteral(conn, text, text.utf8.count) else {
            throw PostgresError(code: .queryFailed, message: "cannot quote literal: \(Self.errorText(conn))")
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    /// Subscribes this session to `channel` (`LISTEN "channel"`, quoted with `PQescapeIdentifier`).
    /// - Throws: as ``query(_:_:)``.
    public func listen(_ channel: String) throws {
        try execute("LISTEN " + quoteIdentifier(channel))
    }

    /// Returns pending notifications, waiting up to `timeout` for the first one.
    ///
    /// Notifications already received (for example during an earlier query) are returned at once;
    /// otherwise the socket (`PQsocket`) is polled, input consumed (`PQconsumeInput`) and `PQnotifies`
    /// drained. Returns an empty array on timeout.
    /// - Throws: `.connectionLost` when the connection breaks while waiting.
    public func waitForNotifications(timeout: Duration) throws -> [PostgresNotification] {
        try waitForNotifications(timeout: timeout, wakeFD: nil) ?? []
    }

    /// As the public variant; nil when woken through `wakeFD`.
    func waitForNotifications(timeout: Duration, wakeFD: Int32?) throws -> [PostgresNotification]? {
        let conn = try open()
        var notifications = drainNotifications(conn)
        if !notifications.isEmpty { return notifications }
        let deadline = ContinuousClock.now + max(timeout, .zero)
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            switch PostgresSocketWait.wait(fd: PQsocket(conn), events: Int16(POLLIN), wakeFD: wakeFD, timeout: remaining) {
            case .woken: return nil
            case .timedOut: return []
            case .ready: break
            }
            if PQconsumeInput(conn) == 0 || PQstatus(conn) == CONNECTION_BAD {
                throw PostgresError(code: .connectionLost, message: Self.errorText(conn))
            }
            notifications = drainNotifications(conn)
            if !notifications.isEmpty { return notifications }
            if remaining <= .zero { return [] }
        }
    }

    private func drainNotifications(_ conn: OpaquePointer) -> [PostgresNotification] {
        var notifications: [PostgresNotification] = []
        while let notify = PQnotifies(conn) {
            let value = notify.pointee
            notifications.append(
                PostgresNotification(
                    channel: String(cString: value.relname),
                    payload: value.extra.map { String(cString: $0) } ?? "",
                    processID: value.be_pid))
            PQfreemem(notify)
        }
        return notifications
    }

    // MARK: Internals

    private func open() throws -> OpaquePointer {
        guard let conn else {
            throw PostgresError(code: .connectionLost, message: "the connection is closed")
        }
        return conn
    }

    /// Turns a libpq result into a ``PostgresQueryResult`` or a thrown error; always clears error results.
    private func check(_ result: OpaquePointer?, _ conn: OpaquePointer, keepCommandTag: Bool = false) throws -> PostgresQueryResult {
        guard let result else {
            // NULL from PQexec*: out of memory or the command could not be sent (connection broken).
            let bad = PQstatus(conn) == CONNECTION_BAD
            throw PostgresError(code: bad ? .connectionLost : .queryFailed, message: Self.errorText(conn), isConnectionProblem: bad)
        }
        let status = PQresultStatus(result)
        switch status {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY, PGRES_SINGLE_TUPLE:
            let affected = PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? 0
            var commandTag: String? = nil
            if keepCommandTag { commandTag = PQcmdStatus(result).map { String(cString: $0) } }
            if PQnfields(result) == 0 {
                PQclear(result)
                return PostgresQueryResult(storage: nil, affectedRows: affected, commandTag: commandTag)
            }
            return PostgresQueryResult(storage: PostgresResultStorage(taking: result), affectedRows: affected, commandTag: commandTag)
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            let error = Self.error(from: result, conn)
            PQclear(result)
            if error.isConnectionProblem { sessionUnusable = true }
            throw error
        default:
            PQclear(result)
            // COPY and other streaming states: end them so the connection stays usable.
            if status == PGRES_COPY_IN || status == PGRES_COPY_BOTH {
                _ = PQputCopyEnd(conn, "COPY is not supported by PostgresConnection.query")
            }
            while let next = PQgetResult(conn) { PQclear(next) }
            throw PostgresError(
                code: .unexpectedResult,
                message: "unexpected result status \(String(cString: PQresStatus(status)))")
        }
    }

    private static func error(from result: OpaquePointer, _ conn: OpaquePointer) -> PostgresError {
        func field(_ code: Character) -> String? {
            PQresultErrorField(result, Int32(code.asciiValue!)).map { String(cString: $0) }
        }
        let sqlState = field("C")
        var message = field("M") ?? ""
        if message.isEmpty {
            message = PQresultErrorMessage(result).map { String(cString: $0) } ?? ""
            message = message.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if message.isEmpty { message = errorText(conn) }
        // Class 08 = connection exception; 57P01..03 = admin/crash shutdown, cannot connect now; 25006 = the
        // session is read-only (a demoted primary, `default_transaction_read_only` turned on): this session
        // cannot write, a new one may reach a writable primary.
        let connectionProblem = PQstatus(conn) == CONNECTION_BAD
            || sqlState?.hasPrefix("08") == true
            || ["57P01", "57P02", "57P03", "25006"].contains(sqlState ?? "")
        return PostgresError(
            code: connectionProblem ? .connectionLost : .queryFailed,
            message: message, sqlState: sqlState, detail: field("D"), hint: field("H"),
            isConnectionProblem: connectionProblem)
    }

    /// Splits a verbose libpq connect error (`... failed: FATAL:  53300: sorry, too many clients already` and
    /// a `LOCATION:` line) into the SQLSTATE and the message without them; messages without one pass unchanged.
    static func splitSQLState(_ message: String) -> (sqlState: String?, message: String) {
        var sqlState: String?
        var lines: [Substring] = []
        for line in message.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("LOCATION:") { continue }
            var kept = line
            for severity in ["FATAL:  ", "ERROR:  "] {
                guard let range = kept.range(of: severity) else { continue }
                let rest = kept[range.upperBound...]
                let code = rest.prefix(5)
                guard code.count == 5, code.utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) }),
                    rest.dropFirst(5).hasPrefix(": ")
                else { continue }
                if sqlState == nil { sqlState = String(code) }
                kept = kept[..<range.upperBound] + rest.dropFirst(7)
            }
            lines.append(kept)
        }
        let text = lines.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        return (sqlState, text)
    }

    static func errorText(_ conn: OpaquePointer) -> String {
        let text = PQerrorMessage(conn).map { String(cString: $0) } ?? ""
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? "unknown libpq error" : trimmed
    }

    /// The connection's `connect_timeout` in seconds (libpq: values below 2 mean 2; 0 or unset means
    /// forever, here capped at one day).
    private static func connectTimeout(_ conn: OpaquePointer) -> Int {
        var timeout = 0
        if let options = PQconninfo(conn) {
            var option = options
            while let keyword = option.pointee.keyword {
                if String(cString: keyword) == "connect_timeout", let value = option.pointee.val {
                    timeout = Int(String(cString: value).trimmingCharacters(in: .whitespaces)) ?? 0
                }
                option += 1
            }
            PQconninfoFree(options)
        }
        if timeout <= 0 { return 86_400 }
        return max(timeout, 2)
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
func withCStringArray<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    var pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) }
    pointers.append(nil)
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Calls `body` with libpq's `paramValues`, `paramLengths` and `paramFormats`: one contiguous buffer holding
/// NUL-terminated texts and binary values, nil for NULL. Lengths and formats are nil (all text) unless some
/// parameter is binary (``PostgresEncodable/postgresBinary``).
private func withParameterPointers<R>(
    _ parameters: [any PostgresEncodable],
    _ body: (UnsafePointer<UnsafePointer<CChar>?>, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
) -> R {
    let binaries: [[UInt8]?] = parameters.map { $0.postgresBinary }
    var texts: [String?] = parameters.indices.map { binaries[$0] == nil ? parameters[$0].postgresText : nil }
    let anyBinary = binaries.contains { $0 != nil }
    var total = 0
    for index in parameters.indices {
        if let binary = binaries[index] { total += binary.count } else if let text = texts[index] { total += text.utf8.count + 1 }
    }
    let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(total, 1))
    defer { buffer.deallocate() }
    let pointers = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: parameters.count)
    defer { pointers.deallocate() }
    var lengths = [Int32](repeating: 0, count: anyBinary ? parameters.count : 0)
    var formats = [Int32](repeating: 0, count: anyBinary ? parameters.count : 0)
    var offset = 0
    for index in parameters.indices {
        let start = offset
        if let binary = binaries[index] {
            binary.withUnsafeBufferPointer { bytes in
                if let base = bytes.baseAddress { (buffer + offset).update(from: base, count: bytes.count) }
            }
            offset += binary.count
            lengths[index] = Int32(clamping: binary.count)
            formats[index] = 1
        } else if texts[index] != nil {
            texts[index]!.withUTF8 { utf8 in
                if let base = utf8.baseAddress { (buffer + offset).update(from: base, count: utf8.count) }
                offset += utf8.count
            }
            buffer[offset] = 0
            offset += 1
        } else {
            pointers[index] = nil
            continue
        }
        pointers[index] = UnsafeRawPointer(buffer + start).assumingMemoryBound(to: CChar.self)
    }
    if !anyBinary { return body(UnsafePointer(pointers), nil, nil) }
    return lengths.withUnsafeBufferPointer { lengths in
        formats.withUnsafeBufferPointer { formats in
            body(UnsafePointer(pointers), lengths.baseAddress, formats.baseAddress)
        }
    }
}
