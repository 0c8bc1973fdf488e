/// An error from the `Postgres` module: a connection that failed or was lost, a statement PostgreSQL
/// rejected, a value that could not be decoded, or a migration problem.
///
/// Modelled on postgres-nio's `PSQLError`: a struct with an extensible ``Code`` rather than a closed enum,
/// so new codes do not break callers' `switch`es. The fields for server errors come from libpq's
/// `PQresultErrorField` (PostgreSQL docs, "Error Message Fields" / protocol "ErrorResponse").
///
/// Secrets never appear here: connection failures are built from libpq's message with every password of
/// the connection string (URL user-info or `password=`) replaced by `********`.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is. Compare with `==`; new codes may be added in later versions.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// Establishing a connection failed (bad address, authentication, server down, ...).
        public static let connectionFailed = Code("connectionFailed")
        /// libpq could not parse the connection string (libpq docs §34.1.1 "Connection Strings"); nothing was sent.
        public static let invalidConnectionString = Code("invalidConnectionString")
        /// An established connection broke (server restarted, backend terminated, network down).
        public static let connectionLost = Code("connectionLost")
        /// PostgreSQL rejected a statement; see ``PostgresError/sqlState``.
        public static let queryFailed = Code("queryFailed")
        /// libpq returned a result of a kind this module does not handle (for example `COPY`).
        public static let unexpectedResult = Code("unexpectedResult")
        /// A column's text could not be converted to the requested Swift type, or was NULL / missing.
        public static let decodingFailed = Code("decodingFailed")
        /// A migration file is invalid, or applying one failed.
        public static let migrationFailed = Code("migrationFailed")
        /// An already applied migration's file changed since it was applied.
        public static let migrationChecksumMismatch = Code("migrationChecksumMismatch")
        /// The client or listener was shut down.
        public static let shutdown = Code("shutdown")

        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// The five-character SQLSTATE (`PG_DIAG_SQLSTATE`), e.g. `"23505"` for a unique violation; nil when
    /// the error did not come from the server. PostgreSQL docs, Appendix A "PostgreSQL Error Codes".
    public var sqlState: String?
    /// The primary message. Never contains a password from the connection string.
    public var message: String
    /// The server's `DETAIL` field (`PG_DIAG_MESSAGE_DETAIL`), if any.
    public var detail: String?
    /// The server's `HINT` field (`PG_DIAG_MESSAGE_HINT`), if any.
    public var hint: String?
    /// True when the connection is unusable and must be re-established (the connection failed, was lost,
    /// or the server said so with an SQLSTATE of class 08 / 57P0x).
    public var isConnectionProblem: Bool

    /// True when the failure is the session's or the server's state, not the statement's or its rows' fault:
    /// ``isConnectionProblem``, or SQLSTATE class 08 (connection exception), `25006` (read-only session), `57014` (`query_canceled`: a statement
    /// timeout or a cancel request), `55P03` (`lock_not_available`), `40001` / `40P01` (serialization failure,
    /// deadlock), class 53 (insufficient resources), 57 (operator intervention) or 58 (system error). The same
    /// statement may succeed later: back off and retry, never set a row aside for it (PostgreSQL docs, Appendix
    /// A "PostgreSQL Error Codes").
    public var isSessionLevel: Bool {
        if isConnectionProblem { return true }
        guard let sqlState else { return false }
        return ["25006", "57014", "55P03", "40001", "40P01"].contains(sqlState)
            || ["08", "53", "57", "58"].contains(String(sqlState.prefix(2)))
    }

    /// True when connecting again with the same connection string to the same server cannot succeed until an
    /// operator changes something (the string, a role, a grant, `pg_hba.conf`, the database):
    /// ``Code/invalidConnectionString``, or the server's SQLSTATE `28P01` (`invalid_password`), `28000`
    /// (`invalid_authorization_specification`: no `pg_hba.conf` entry, an unknown role, a role without `LOGIN`),
    /// `3D000` (`invalid_catalog_name`: no such database) or `42501` (`insufficient_privilege`: no `CONNECT` on the
    /// database, or a right the caller checked for). Everything else a connection meets (refused, timed out, the
    /// server starting up `57P03`, out of slots `53300`, a standby) can pass by itself. PostgreSQL docs, Appendix A
    /// "PostgreSQL Error Codes".
    public var needsReconfiguration: Bool {
        if code == .invalidConnectionString { return true }
        guard let sqlState else { return false }
        return ["28P01", "28000", "3D000", "42501"].contains(sqlState)
    }

    /// Creates an error; `isConnectionProblem` defaults to true for `.connectionFailed`, `.invalidConnectionString`
    /// and `.connectionLost`.
    public init(
        code: Code, message: String, sqlState: String? = nil, detail: String? = nil, hint: String? = nil,
        isConnectionProblem: Bool? = nil
    ) {
        self.code = code
        self.message = message
        self.sqlState = sqlState
        self.detail = detail
        self.hint = hint
        self.isConnectionProblem = isConnectionProblem
            ?? (code == .connectionFailed || code == .invalidConnectionString || code == .connectionLost)
    }

    /// `message (SQLSTATE 23505; detail: ...; hint: ...)`: the server's or libpq's words, no Swift names. libpq's
    /// own messages may span lines (`connection to server ... failed: Connection refused\n\tIs the server
    /// running ...`); a terminal prints them with ``terminalLines``.
    public var description: String {
        var extras: [String] = []
        if let sqlState { extras.append("SQLSTATE \(sqlState)") }
        if let detail { extras.append("detail: \(detail)") }
        if let hint { extras.append("hint: \(hint)") }
        return extras.isEmpty ? message : message + " (" + extras.joined(separator: "; ") + ")"
    }

    /// The error for a person at a terminal: the first line of the message with its SQLSTATE, then libpq's further
    /// lines, the server's detail and hint, each indented by two spaces. Not yet made safe to print
    /// (the caller's `TerminalText`).
    public var terminalLines: [String] {
        let lines = message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
        var first = lines.first ?? "unknown PostgreSQL error"
        if let sqlState { first += " (SQLSTATE \(sqlState))" }
        var result = [first] + lines.dropFirst().map { "  " + $0 }
        if let detail { result.append("  detail: " + detail) }
        if let hint { result.append("  hint: " + hint) }
        return result
    }
}
