import Foundation

/// Whether a worker built with a given set of migrations may run against the migrations a database has applied
/// (``PostgresMigrator``'s bookkeeping table). The rule (docs/operations.md, "Upgrade: migrations first"):
///
/// - Every migration the worker was built with must be applied; otherwise it is ``Verdict/behind(pending:)``.
/// - Migrations it does not know (a newer release's) are allowed — the compatibility window: a migration keeps
///   the previous release's workers working unless its file declares `-- pushizo:oldest-worker NNNN`, and then
///   only workers whose newest migration is at least NNNN may run (``Verdict/beyondWindow(_:)`` otherwise).
public enum SchemaWindow {
    /// One row of the bookkeeping table.
    public struct Applied: Sendable, Equatable {
        /// The migration's number.
        public var version: Int
        /// The file name's part after the number (`producer_contract`).
        public var name: String
        /// The file's `-- pushizo:oldest-worker` version, nil without one (or applied by a runner before it).
        public var oldestWorker: Int?

        public init(version: Int, name: String, oldestWorker: Int? = nil) {
            self.version = version
            self.name = name
            self.oldestWorker = oldestWorker
        }

        /// `0030_name.sql`: the file name as the repository spells it (four digits at least).
        public var fileName: String { String(format: "%04d_%@.sql", version, name) }
    }

    /// An applied migration that needs a newer worker: its file name and its `-- pushizo:oldest-worker` version.
    public struct Refusal: Sendable, Equatable {
        public var fileName: String
        public var oldestWorker: Int

        public init(fileName: String, oldestWorker: Int) {
            self.fileName = fileName
            self.oldestWorker = oldestWorker
        }
    }

    /// What ``judge(known:applied:)`` found.
    public enum Verdict: Sendable, Equatable {
        /// The worker may run; `newer` names the applied migrations it does not know (empty when it knows them all).
        case compatible(newer: [String])
        /// The database lacks these migrations (file names) the worker needs.
        case behind(pending: [String])
        /// Applied migrations that need a worker built with a newer migration than this one's newest.
        case beyondWindow([Refusal])
    }

    /// Judges `applied` for a worker built with the migration files `known` (`NNNN_name.sql`; other names are
    /// ignored).
    public static func judge(known: [String], applied: [Applied]) -> Verdict {
        let knownVersions = Dictionary(
            known.compactMap { name in version(ofFileName: name).map { ($0, name) } }, uniquingKeysWith: { first, _ in first })
        let appliedVersions = Set(applied.map(\.version))
        let pending = knownVersions.keys.sorted().filter { !appliedVersions.contains($0) }.compactMap { knownVersions[$0] }
        if !pending.isEmpty { return .behind(pending: pending) }
        let newest = knownVersions.keys.max() ?? 0
        let newer = applied.filter { knownVersions[$0.version] == nil }.sorted { $0.version < $1.version }
        let refusing = newer.compactMap { row in
            row.oldestWorker.flatMap { $0 > newest ? Refusal(fileName: row.fileName, oldestWorker: $0) : nil }
        }
        if !refusing.isEmpty { return .beyondWindow(refusing) }
        return .compatible(newer: newer.map(\.fileName))
    }

    /// The bookkeeping rows (`table`, default `pushizo_schema_migrations`), empty when the table does not exist.
    /// `oldest_worker` is read when the column exists (the runner adds it for the first file that needs it).
    public static func applied(on connection: PostgresConnection, table: String = "pushizo_schema_migrations") throws -> [Applied] {
        let quoted = try connection.quoteIdentifier(table)
        let exists = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [quoted])
        guard try exists.first?.decode(Bool.self, "present") == true else { return [] }
        // to_jsonb of the row: the column may be missing, and a missing key reads NULL.
        return try connection.query(
            "SELECT version, name, (to_jsonb(m) ->> 'oldest_worker')::int AS oldest_worker FROM \(quoted) m ORDER BY version"
        ).map { row in
            Applied(
                version: try row.decode(Int.self, "version"), name: try row.decode(String.self, "name"),
                oldestWorker: row["oldest_worker"].flatMap { Int($0) })
        }
    }

    /// The number of a `NNNN_name.sql` file name, nil for another name.
    public static func version(ofFileName fileName: String) -> Int? {
        guard fileName.hasSuffix(".sql"), let underscore = fileName.firstIndex(of: "_") else { return nil }
        let digits = fileName[..<underscore]
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(digits)
    }
}
