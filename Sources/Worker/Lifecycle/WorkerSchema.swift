import BuildInfo
import Foundation
import Postgres

/// The schema `run` and `check` need: every migration this build was made with (``BuildInfo/migrations``)
/// applied, and none applied that declares it needs a newer worker (``SchemaWindow``; docs/operations.md,
/// "Upgrade: migrations first").
public enum WorkerSchema {
    /// Reads the bookkeeping table and judges it for this build.
    /// - Returns: the applied migrations this build does not know (a newer release's, within the window).
    /// - Throws: ``ConfigurationError`` on `PUSHIZO_DATABASE_URL` (exit 78) when the schema is behind, naming each
    ///   pending file and saying to run `pushizo-worker migrate`, or beyond the window, naming each migration
    ///   that needs a newer worker; the query's own error otherwise.
    @discardableResult
    public static func verify(on connection: PostgresConnection, known: [String] = BuildInfo.migrations) throws -> [String] {
        switch SchemaWindow.judge(known: known, applied: try SchemaWindow.applied(on: connection)) {
        case .compatible(let newer):
            return newer
        case .behind(let pending):
            throw behind(pending, key: .databaseURL)
        case .beyondWindow(let refusals):
            let newest = known.compactMap { SchemaWindow.version(ofFileName: $0) }.max() ?? 0
            throw ConfigurationError(
                key: ConfigurationKey.databaseURL.name,
                problem: "the database's schema is beyond what this worker (\(BuildInfo.version), migrations up to "
                    + "\(fileNumber(newest))) can run with: "
                    + refusals.map { "\($0.fileName) needs workers built with migration \(fileNumber($0.oldestWorker)) or later" }
                        .joined(separator: ", ")
                    + "; this worker is too old for it: run a newer release's binary (docs/operations.md, \"Upgrade: migrations first\")")
        }
    }

    /// Refuses a schema that lacks a migration this build was made with; a newer one is no concern here. For the
    /// commands that change the owner's tables (`pause`, `resume`, `cancel`, `retry`), which must not fail half-way on
    /// a missing relation.
    /// - Throws: ``ConfigurationError`` on `key` (exit 78) naming each pending file and `pushizo-worker migrate`.
    public static func requireApplied(
        on connection: PostgresConnection, key: ConfigurationKey, known: [String] = BuildInfo.migrations
    ) throws {
        if case .behind(let pending) = SchemaWindow.judge(known: known, applied: try SchemaWindow.applied(on: connection)) {
            throw behind(pending, key: key)
        }
    }

    private static func behind(_ pending: [String], key: ConfigurationKey) -> ConfigurationError {
        ConfigurationError(
            key: key.name,
            problem: "the database lacks \(pending.count) migration(s) this worker (\(BuildInfo.version)) needs: "
                + pending.joined(separator: ", ")
                + "; run `pushizo-worker migrate` with this release's migrations first (docs/operations.md, \"Upgrade: migrations first\")")
    }

    /// A migration's number as its file name spells it: four digits at least (`0031`), as `NNNN_name.sql`.
    static func fileNumber(_ version: Int) -> String { String(format: "%04d", version) }
}
