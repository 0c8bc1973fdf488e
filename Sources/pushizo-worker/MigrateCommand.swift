import BuildInfo
import Foundation
import Postgres
import Worker

enum MigrateCommand {
    static let keys: [ConfigurationKey] = [
        .databaseURL, .databasePooler, .migrateDatabaseURL, .migrationsDirectory, .logLevel, .logFormat,
    ]

    static func main(environment: [String: String], arguments: [String]) throws {
        let reader = try ConfigurationReader(environment: environment, arguments: arguments, keys: keys)
        let logger = try LoggerConfiguration.make(reader, label: "migrate")
        // A schema-owning role for DDL when configured; the workers' own URL otherwise.
        let databaseURL = try reader.connectionString(.migrateDatabaseURL) ?? reader.requiredConnectionString(.databaseURL)
        let directory = try MigrationsLocation.resolve(reader)
        let migrator: PostgresMigrator
        do {
            migrator = try PostgresMigrator(directory: directory)
        } catch let error as PostgresError {
            // A bad file name, a duplicate, an unknown directive: the directory's content, which only an operator fixes.
            throw ConfigurationError(key: ConfigurationKey.migrationsDirectory.name, problem: error.message)
        }
        try MigrationsLocation.verifyComplete(migrator, directory: directory)
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        let urlKey: ConfigurationKey = reader.string(.migrateDatabaseURL) == nil ? .databaseURL : .migrateDatabaseURL
        let report: PostgresMigrator.Report
        var distributed: [CitusDistribution.StepOutcome] = []
        do {
            let connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-migrate",
                poolerMode: PostgresPoolerMode(route.poolerMode))
            defer { connection.close() }
            try route.verify(connection)
            report = try migrator.migrate(on: connection)
            // A database in its Citus form: the tables and functions the migrations just added take theirs, by the
            // distribute step, which does only what is missing (docs/scale-out.md, "Migrations on a distributed
            // database").
            // A role that owns nothing (the workers', finding the schema up to date) leaves it to the owner's run.
            if try SchemaForm.read(on: connection) == .citus, try CitusDistribution.sessionOwnsSchema(on: connection) {
                distributed = try CitusDistribution.run(on: connection, forms: directory.appendingPathComponent("citus"))
            }
        } catch let refusal as CitusDistribution.Refusal {
            throw ConfigurationError(key: urlKey.name, problem: "migrations applied; the distribute step refused: \(refusal.problem)")
        } catch var error as PostgresError where error.sqlState == "42501" && urlKey == .databaseURL {
            // insufficient_privilege: most often the workers' own role, which owns nothing, running the DDL.
            let advice = "migrations need a role that may create in the schema and read pushizo_schema_migrations: "
                + "set PUSHIZO_MIGRATE_DATABASE_URL to the schema-owning role (docs/systemd.md)"
            error.hint = error.hint.map { "\($0); \(advice)" } ?? advice
            throw ConfigurationError(refusal: error, key: urlKey) ?? error
        } catch let error as PostgresError where MigrationsLocation.needsOperator(error) {
            // An applied file changed or gone, a file the server refuses: running again cannot succeed (exit 78, so
            // the migrate unit does not restart; docs/operations.md, "Exit statuses").
            throw ConfigurationError(
                key: ConfigurationKey.migrationsDirectory.name,
                problem: error.message + (error.sqlState.map { " (SQLSTATE \($0))" } ?? ""),
                details: [error.detail.map { "detail: \($0)" }, error.hint.map { "hint: \($0)" }].compactMap { $0 })
        } catch {
            // A refusal that needs the operator (a bad password, no such database, ...) exits 78 (EX_CONFIG).
            throw ConfigurationError(refusal: error, key: urlKey) ?? error
        }
        for name in report.applied { logger.notice("applied migration", ["file": name]) }
        for outcome in distributed where outcome.changed {
            logger.notice("distribute step", ["step": "\(outcome.step)", "name": outcome.name, "detail": outcome.detail])
        }
        if !report.newer.isEmpty {
            logger.notice(
                "schema has migrations newer than this release; left as they are (the compatibility window)",
                ["newer": report.newer.joined(separator: ",")])
        }
        logger.notice(
            report.applied.isEmpty ? "schema is up to date" : "migrations applied",
            ["applied": "\(report.applied.count)", "already_applied": "\(report.alreadyApplied)"])
    }
}

enum MigrationsLocation {
    /// `PUSHIZO_MIGRATIONS_DIR`, else `./migrations`, else the packaged `/usr/share/pushizo-worker/migrations`.
    static func resolve(_ reader: ConfigurationReader) throws -> URL {
        if let configured = reader.string(.migrationsDirectory) {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: configured, isDirectory: &isDirectory), isDirectory.boolValue
            else {
                throw ConfigurationError(key: ConfigurationKey.migrationsDirectory.name, problem: "\(configured) is not a directory")
            }
            return URL(fileURLWithPath: configured)
        }
        for candidate in ["migrations", "/usr/share/pushizo-worker/migrations"] {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), isDirectory.boolValue {
                return URL(fileURLWithPath: candidate)
            }
        }
        throw ConfigurationError(
            key: ConfigurationKey.migrationsDirectory.name,
            problem: "not set, and neither ./migrations nor /usr/share/pushizo-worker/migrations exists")
    }
}

extension MigrationsLocation {
    /// Refuses a directory that lacks a file of this build's own list (``BuildInfo/migrations``): an incomplete
    /// install, not a newer release's schema. Only applied migrations this build does not know are the
    /// compatibility window (``SchemaWindow``).
    /// - Throws: ``ConfigurationError`` on `PUSHIZO_MIGRATIONS_DIR` naming each missing file and the directory.
    static func verifyComplete(
        _ migrator: PostgresMigrator, directory: URL, known: [String] = BuildInfo.migrations
    ) throws {
        let present = Set(migrator.migrations.map(\.fileName))
        let absent = known.filter { !present.contains($0) }
        guard !absent.isEmpty else { return }
        throw ConfigurationError(
            key: ConfigurationKey.migrationsDirectory.name,
            problem: "\(directory.path) lacks \(absent.count) migration file(s) this release (\(BuildInfo.version)) was "
                + "built with: \(absent.joined(separator: ", ")); the install is incomplete: install this release's "
                + "migrations there, or point PUSHIZO_MIGRATIONS_DIR at them")
    }

    /// Whether a migrator's failure is one only an operator can fix (exit 78 rather than 1): an applied file
    /// changed (`.migrationChecksumMismatch`), an applied file missing, a file no pooler mode can run, or a
    /// statement PostgreSQL refused for what it says (`.migrationFailed`); not a session-level failure (a lost
    /// connection, a lock or statement timeout, a deadlock: ``PostgresError/isSessionLevel``), which a later run
    /// may get past, nor a refused connection (``PostgresError/needsReconfiguration``, named by its URL's key).
    static func needsOperator(_ error: PostgresError) -> Bool {
        guard !error.isSessionLevel, !error.needsReconfiguration else { return false }
        return error.code == .migrationChecksumMismatch || error.code == .migrationFailed
    }
}

enum LoggerConfiguration {
    static func make(_ reader: ConfigurationReader, label: String) throws -> Logger {
        let level = try reader.choice(.logLevel)
        let format = try reader.choice(.logFormat)
        return Logger(label: label, minimumLevel: Logger.Level(name: level) ?? .info, format: Logger.Format(rawValue: format) ?? .text)
    }
}
