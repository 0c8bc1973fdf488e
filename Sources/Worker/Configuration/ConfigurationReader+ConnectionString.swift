import Postgres

extension ConfigurationReader {
    /// A libpq connection string setting (`PUSHIZO_DATABASE_URL` and its kin), checked with libpq's own parser
    /// without connecting; unset (or empty) gives nil.
    /// - Throws: ``ConfigurationError`` naming the key, with libpq's parse error in which only the password is
    ///   masked (``PostgresConnection/connectionStringProblem(_:)``), when libpq cannot parse it.
    public func connectionString(_ key: ConfigurationKey) throws -> String? {
        guard let value = string(key) else { return nil }
        if let problem = PostgresConnection.connectionStringProblem(value) {
            throw ConfigurationError(key: key.name, problem: problem)
        }
        return value
    }

    /// A required libpq connection string setting (``connectionString(_:)``).
    /// - Throws: ``ConfigurationError`` naming the key when it is unset or libpq cannot parse it.
    public func requiredConnectionString(_ key: ConfigurationKey) throws -> String {
        guard let value = try connectionString(key) else {
            throw ConfigurationError(key: key.name, problem: "is required")
        }
        return value
    }
}

extension ConfigurationError {
    /// A database error that trying again cannot cure (``PostgresError/needsReconfiguration``: a bad password, a role
    /// that may not log in, no such database, a missing right, a connection string libpq cannot parse), as the
    /// problem of the setting that led there; nil for any other error (the server down, starting up or out of
    /// connection slots, a timeout), which may pass by itself.
    /// - Parameter key: the connection string's key, e.g. ``ConfigurationKey/databaseURL``.
    public init?(refusal error: any Error, key: ConfigurationKey) {
        guard let error = error as? PostgresError, error.needsReconfiguration else { return nil }
        var message = error.message.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
        if let sqlState = error.sqlState { message += " (SQLSTATE \(sqlState))" }
        // The server's detail and hint as a database error shows them (``PostgresError/terminalLines``).
        self.init(
            key: key.name, problem: "PostgreSQL refused it, and trying again will not help: " + message,
            details: [error.detail.map { "detail: " + $0 }, error.hint.map { "hint: " + $0 }].compactMap { $0 })
    }
}
