import Foundation

/// Applies the `NNNN_name.sql` files of a directory to a database, in numeric order, once each.
///
/// - File names: decimal digits, `_`, a name, `.sql` (e.g. `0001_producer_contract.sql`). Other `.sql`
///   names, two files with the same number, or non-UTF-8 content are rejected by `init`, naming the file.
///   Files not ending in `.sql` are ignored.
/// - Bookkeeping: a table (default `pushizo_schema_migrations`: `version int PRIMARY KEY, name text,
///   checksum text, applied_at timestamptz`) created if missing. `checksum` is the SHA-256 of the file's
///   bytes in lower-case hex, the same as PostgreSQL's `encode(sha256(bytes), 'hex')`.
/// - Concurrency: the whole run holds the session-level advisory lock ``advisoryLockKey``, so instances
///   starting together apply each file once; the later one waits, then finds nothing pending. It waits by
///   asking `pg_try_advisory_lock` again every ``lockRetryInterval``, not in `pg_advisory_lock`: a backend
///   blocked in a statement keeps a snapshot, and `CREATE INDEX CONCURRENTLY` on the holder's session waits for
///   every older snapshot to end (a deadlock PostgreSQL would break by failing one of the two runs). Behind a
///   transaction-mode pooler (``PostgresConnection/poolerMode``) each file's transaction holds the
///   transaction-level lock instead and skips a file applied meanwhile.
/// - Safety: before anything is applied, every applied version must still have its file with the same
///   checksum; otherwise nothing is applied (`.migrationChecksumMismatch` / `.migrationFailed`). Applied
///   versions above the newest file are a newer release's (the compatibility window, ``SchemaWindow``): they
///   are reported (``Report/newer``), not refused, so an older release's `migrate` (which its workers' units
///   require) finds nothing to do; whether its workers may run is ``SchemaWindow``'s rule, checked by `run`.
/// - Each pending file runs in its own transaction together with its bookkeeping row, through the
///   simple-query protocol (several statements allowed). So such a file must not contain transaction control
///   (`BEGIN`/`COMMIT`) or statements that refuse transactions (`CREATE INDEX CONCURRENTLY`, `VACUUM`).
/// - Header directives: the file's leading `-- pushizo:` comment lines (any other `-- pushizo:` line there is
///   refused by `init`):
///   - `-- pushizo:no-transaction`: the file runs outside a transaction, one statement at a time
///     (``SQLStatements/split(_:)``), then its bookkeeping row is written; for `CREATE INDEX CONCURRENTLY` on
///     tables that may be large (migrations/README.md). Such a file must be safe to run again from the top after
///     a failure: every `CREATE INDEX` in it is `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name` (`init`
///     refuses others), and before running one the runner drops an index of that name PostgreSQL marked invalid
///     (`pg_index.indisvalid` false: what an interrupted concurrent build leaves), so it is built again. Refused
///     behind a transaction-mode pooler, where the session lock cannot be held.
///   - `-- pushizo:oldest-worker NNNN`: workers built with migrations up to a version below NNNN cannot run once
///     this file is applied (it drops or changes something they use); recorded in the bookkeeping table's
///     `oldest_worker` column (added when first needed) for ``SchemaWindow``. Without it a file must keep the
///     previous release's workers working (docs/operations.md, "Upgrade: migrations first").
/// - A file numbered below an applied one (e.g. after a merge) is applied too, in numeric order.
public struct PostgresMigrator: Sendable {
    /// One migration file.
    public struct Migration: Sendable, Equatable {
        /// The number before the first `_` (leading zeros dropped).
        public var version: Int
        /// The part between the `_` and `.sql`.
        public var name: String
        /// SHA-256 of the file's bytes, 64 lower-case hex digits.
        public var checksum: String
        /// The file's text.
        public var sql: String
        /// The file name, e.g. `0001_producer_contract.sql`.
        public var fileName: String
        /// False for a file headed `-- pushizo:no-transaction`.
        public var runsInTransaction: Bool
        /// NNNN of a `-- pushizo:oldest-worker NNNN` header: the lowest newest-migration version a worker may be
        /// built with and still run once this file is applied; nil without one.
        public var oldestWorker: Int?

        public init(
            version: Int, name: String, checksum: String, sql: String, fileName: String, runsInTransaction: Bool = true,
            oldestWorker: Int? = nil
        ) {
            self.version = version
            self.name = name
            self.checksum = checksum
            self.sql = sql
            self.fileName = fileName
            self.runsInTransaction = runsInTransaction
            self.oldestWorker = oldestWorker
        }
    }

    /// What a run did.
    public struct Report: Sendable, Equatable {
        /// File names applied by this run, in order.
        public var applied: [String]
        /// How many files had already been applied before this run.
        public var alreadyApplied: Int
        /// Applied migrations above the newest file (`0030_name.sql`): a newer release's, left as they are.
        public var newer: [String]

        public init(applied: [String], alreadyApplied: Int, newer: [String] = []) {
            self.applied = applied
            self.alreadyApplied = alreadyApplied
            self.newer = newer
        }
    }

    /// The `pg_advisory_lock` key held during ``migrate(on:)``: the ASCII bytes of `PUSHIZOM`
    /// (0x505553_48495A4F4D = 5788359109826973517).
    public static let advisoryLockKey: Int64 = 0x5055_5348_495A_4F4D

    /// How long a run waits between two `pg_try_advisory_lock` attempts while another run holds the lock.
    public static let lockRetryInterval: TimeInterval = 0.2

    /// The migrations found, sorted by version.
    public let migrations: [Migration]
    /// The bookkeeping table's name (unquoted).
    public let table: String

    /// Reads and validates every `*.sql` file of `directory`.
    /// - Throws: `.migrationFailed` naming the file for a bad name, a duplicate version, unreadable or
    ///   non-UTF-8 content, or when the directory cannot be listed.
    public init(directory: URL, table: String = "pushizo_schema_migrations") throws {
        self.table = table
        let fileNames: [String]
        do {
            fileNames = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw PostgresError(code: .migrationFailed, message: "cannot list migrations directory \(directory.path): \(error.localizedDescription)")
        }
        var byVersion: [Int: Migration] = [:]
        for fileName in fileNames.sorted() where fileName.hasSuffix(".sql") {
            let stem = fileName.dropLast(4)
            guard let underscore = stem.firstIndex(of: "_"),
                  case let digits = stem[..<underscore], !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
                  let version = Int(digits),
                  case let name = String(stem[stem.index(after: underscore)...]), !name.isEmpty
            else {
                throw PostgresError(
                    code: .migrationFailed,
                    message: "migration file \(fileName) is not named NNNN_name.sql (digits, underscore, name)")
            }
            let url = directory.appendingPathComponent(fileName)
            guard let data = FileManager.default.contents(atPath: url.path) else {
                throw PostgresError(code: .migrationFailed, message: "cannot read migration file \(fileName)")
            }
            let bytes = [UInt8](data)
            guard let sql = String(validating: bytes, as: UTF8.self) else {
                throw PostgresError(code: .migrationFailed, message: "migration file \(fileName) is not valid UTF-8")
            }
            if let other = byVersion[version] {
                throw PostgresError(
                    code: .migrationFailed,
                    message: "migration files \(other.fileName) and \(fileName) have the same version \(version)")
            }
            let header = try MigrationHeader(sql: sql, fileName: fileName)
            byVersion[version] = Migration(
                version: version, name: name, checksum: SHA256.hex(bytes), sql: sql, fileName: fileName,
                runsInTransaction: !header.noTransaction, oldestWorker: header.oldestWorker)
        }
        migrations = byVersion.values.sorted { $0.version < $1.version }
    }

    /// Applies every pending migration under the advisory lock (see the type's documentation).
    /// - Returns: the files applied and how many were applied before.
    /// - Throws: `.migrationChecksumMismatch` (naming the file) or `.migrationFailed` (an applied version
    ///   without its file; a failing file, with the server's SQLSTATE / detail / hint) — nothing after the
    ///   failing file is applied; `.connectionLost` / `.queryFailed` for lock or bookkeeping failures.
    public func migrate(on connection: PostgresConnection) throws -> Report {
        guard connection.poolerMode.keepsSessionState else { return try migrateLockingEachTransaction(on: connection) }
        while try connection.query("SELECT pg_try_advisory_lock($1) AS locked", [Self.advisoryLockKey]).first?
            .decode(Bool.self, "locked") != true
        {
            Thread.sleep(forTimeInterval: Self.lockRetryInterval)
        }
        defer {
            if !connection.isConnectionBad {
                _ = try? connection.query("SELECT pg_advisory_unlock($1)", [Self.advisoryLockKey])
            }
        }
        let quoted = try connection.quoteIdentifier(table)
        try createTableIfMissing(on: connection, quotedTable: quoted)
        let (pending, appliedCount, newer) = try check(on: connection, quotedTable: quoted)
        var applied: [String] = []
        for migration in pending {
            try apply(migration, on: connection, quotedTable: quoted)
            applied.append(migration.fileName)
        }
        return Report(applied: applied, alreadyApplied: appliedCount, newer: newer)
    }

    /// ``migrate(on:)`` behind a transaction-mode pooler (``PostgresPoolerMode/transaction``), where a session
    /// lock would stay on a server session the pooler hands to other clients: the bookkeeping table's creation
    /// and each file's transaction take the transaction-level lock (`pg_advisory_xact_lock`, same key), and each
    /// file's transaction looks again, under it, whether another instance applied that file meanwhile.
    private func migrateLockingEachTransaction(on connection: PostgresConnection) throws -> Report {
        let quoted = try connection.quoteIdentifier(table)
        try connection.transaction { connection in
            _ = try connection.query("SELECT pg_advisory_xact_lock($1)", [Self.advisoryLockKey])
            try createTableIfMissing(on: connection, quotedTable: quoted)
        }
        let (pending, appliedCount, newer) = try check(on: connection, quotedTable: quoted)
        if let outside = pending.first(where: { !$0.runsInTransaction }) {
            throw PostgresError(
                code: .migrationFailed,
                message: "migration \(outside.fileName) runs outside a transaction (-- pushizo:no-transaction) and needs a session of its own: run migrate through a direct connection (PUSHIZO_MIGRATE_DATABASE_URL), not a transaction-mode pooler")
        }
        var applied: [String] = []
        for migration in pending {
            let ran = try connection.transaction { connection -> Bool in
                _ = try connection.query("SELECT pg_advisory_xact_lock($1)", [Self.advisoryLockKey])
                let done = try connection.query("SELECT 1 FROM \(quoted) WHERE version = $1", [migration.version])
                if done.first != nil { return false }
                try apply(migration, on: connection, quotedTable: quoted)
                return true
            }
            if ran { applied.append(migration.fileName) }
        }
        return Report(applied: applied, alreadyApplied: appliedCount, newer: newer)
    }

    private func createTableIfMissing(on connection: PostgresConnection, quotedTable quoted: String) throws {
        // Created only when missing: `CREATE TABLE IF NOT EXISTS` needs CREATE on the schema even when the table
        // exists, and a role without it (a worker role) may still run this to find nothing pending.
        let exists = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [quoted])
        if try exists.first?.decode(Bool.self, "present") != true {
            try connection.execute("""
                CREATE TABLE IF NOT EXISTS \(quoted) (
                    version    integer PRIMARY KEY,
                    name       text NOT NULL,
                    checksum   text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
        }
    }

    /// Runs one file and its bookkeeping row in a transaction (a savepoint inside one), or, for a file outside
    /// transactions, each statement on its own and then the row.
    private func apply(_ migration: Migration, on connection: PostgresConnection, quotedTable quoted: String) throws {
        do {
            if migration.oldestWorker != nil {
                // Only the files that declare it need the column: a table made before it stays readable by the
                // workers (``SchemaWindow`` reads the column only when present).
                try connection.execute("ALTER TABLE \(quoted) ADD COLUMN IF NOT EXISTS oldest_worker integer")
            }
            let record = { (connection: PostgresConnection) in
                var parameters: [any PostgresEncodable] = [migration.version, migration.name, migration.checksum]
                var columns = "version, name, checksum"
                if let oldestWorker = migration.oldestWorker {
                    parameters.append(oldestWorker)
                    columns += ", oldest_worker"
                }
                let placeholders = (1...parameters.count).map { "$\($0)" }.joined(separator: ", ")
                _ = try connection.query("INSERT INTO \(quoted) (\(columns)) VALUES (\(placeholders))", parameters)
            }
            if migration.runsInTransaction {
                // A schema change may rebuild an index of a large table: no statement timeout of the session's.
                // One statement at a time, as psql runs a file: Citus propagates a DDL statement on a distributed
                // table to its shards with the statement's text, and a script sent as one simple query gives it
                // the whole script, which the shards refuse ("cannot insert multiple commands into a prepared
                // statement"). In one transaction it is the same change.
                try connection.transaction(localSettings: ["statement_timeout": "0"]) { connection in
                    for statement in SQLStatements.split(migration.sql) {
                        try connection.execute(statement)
                    }
                    try record(connection)
                }
            } else {
                try connection.execute("SET statement_timeout = 0")
                defer { if !connection.isConnectionBad { try? connection.execute("RESET statement_timeout") } }
                for statement in SQLStatements.split(migration.sql) {
                    if let index = MigrationHeader.concurrentIndexName(statement) {
                        try dropIfInvalid(index: index, on: connection)
                    }
                    try connection.execute(statement)
                }
                try record(connection)
            }
        } catch let error as PostgresError {
            throw PostgresError(
                code: error.isConnectionProblem ? error.code : .migrationFailed,
                message: "migration \(migration.fileName) failed: \(error.message)",
                sqlState: error.sqlState, detail: error.detail, hint: error.hint,
                isConnectionProblem: error.isConnectionProblem)
        }
    }

    /// Drops `index` when PostgreSQL marked it invalid: what a `CREATE INDEX CONCURRENTLY` interrupted by a
    /// failure, a cancel or a lost session leaves behind. `IF NOT EXISTS` would otherwise keep it, unused by the
    /// planner yet maintained on every write.
    private func dropIfInvalid(index: String, on connection: PostgresConnection) throws {
        let rows = try connection.query(
            "SELECT NOT indisvalid AS invalid FROM pg_index WHERE indexrelid = to_regclass($1)", [index])
        if try rows.first?.decode(Bool.self, "invalid") == true {
            try connection.execute("DROP INDEX CONCURRENTLY IF EXISTS \(index)")
        }
    }

    /// The migrations not applied yet, in order (no lock taken; the table may be missing).
    /// - Throws: as ``migrate(on:)`` for mismatched or missing applied files.
    public func pending(on connection: PostgresConnection) throws -> [Migration] {
        let quoted = try connection.quoteIdentifier(table)
        let exists = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [quoted])
        guard try exists.first?.decode(Bool.self, "present") == true else { return migrations }
        return try check(on: connection, quotedTable: quoted).pending
    }

    /// Compares the applied rows with the files; returns the files still to apply, the applied count and the
    /// applied migrations above the newest file (a newer release's: the compatibility window).
    private func check(on connection: PostgresConnection, quotedTable: String) throws
        -> (pending: [Migration], applied: Int, newer: [String])
    {
        let rows = try connection.query("SELECT version, name, checksum FROM \(quotedTable) ORDER BY version")
        var appliedVersions = Set<Int>()
        var newer: [String] = []
        let files = Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, $0) })
        let newestFile = migrations.last?.version ?? 0
        for row in rows {
            let version = try row.decode(Int.self, "version")
            let name = try row.decode(String.self, "name")
            let checksum = try row.decode(String.self, "checksum")
            appliedVersions.insert(version)
            if files[version] == nil, version > newestFile {
                // A newer release's migration: this release's files end before it, nothing of it is checked.
                newer.append(SchemaWindow.Applied(version: version, name: name).fileName)
                continue
            }
            guard let file = files[version] else {
                throw PostgresError(
                    code: .migrationFailed,
                    message: "migration \(version) (\(name)) was applied but its file is missing from the migrations directory")
            }
            guard file.checksum == checksum else {
                throw PostgresError(
                    code: .migrationChecksumMismatch,
                    message: "migration file \(file.fileName) changed after it was applied (checksum \(file.checksum), applied \(checksum)); restore it and add a new migration instead")
            }
        }
        return (migrations.filter { !appliedVersions.contains($0.version) }, appliedVersions.count, newer)
    }
}
