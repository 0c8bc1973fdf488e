import Foundation
import Postgres
import Testing

/// The real executable against schemas behind, level with and beyond the migrations it was built with
/// (`BuildInfo.migrations`, `WorkerSchema`): `run` and `check` refuse a schema that lacks any of them with exit 78
/// (EX_CONFIG), naming each pending file and `pushizo-worker migrate`; a newer release's migrations are within the
/// compatibility window unless one declares `-- pushizo:oldest-worker` beyond this build.
@Suite("schema check at start")
struct SchemaCheckEndToEndTests {
    /// Runs `pushizo-worker <arguments>` until it exits (hang guard: killed after 3 minutes); `environment` adds to
    /// or replaces the variables set here.
    static func run(
        _ arguments: [String], databaseURL: String, environment: [String: String] = [:]
    ) async throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = arguments
        process.environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "PATH": "/usr/bin:/bin", "PUSHIZO_EXIT_WHEN_DRAINED": "true",
            "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path, "PUSHIZO_LOG_LEVEL": "notice",
        ].merging(environment) { _, given in given }
        let output = Pipe()
        process.standardError = output
        process.standardOutput = output
        try process.run()
        let guardKill = Task {
            try await Task.sleep(for: .seconds(180))
            kill(process.processIdentifier, SIGKILL)
        }
        defer { guardKill.cancel() }
        let text = try await onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        return (process.terminationStatus, text)
    }

    /// A fresh database migrated with every migration file but the last `missing` (their names passed to `body`),
    /// dropped afterwards.
    static func withDatabaseMissing(_ missing: Int, _ body: @Sendable (String, [String]) async throws -> Void) async throws {
        let all = try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        let kept = all.dropLast(missing)
        try await EventConversionTests.withDatabase(migratedTo: kept.last.flatMap { Int($0.prefix(4)) } ?? 0) { url in
            try await body(url, Array(all.dropFirst(kept.count)))
        }
    }

    /// Four migrations behind: both commands exit 78 naming each of the four, and `run` never reports ready.
    @Test(arguments: ["run", "check"])
    func aSchemaBehindTheBuildIsRefused(command: String) async throws {
        try await Self.withDatabaseMissing(4) { url, skipped in
            let outcome = try await Self.run([command], databaseURL: url)
            #expect(outcome.status == 78, "\(outcome.output)")
            for file in skipped { #expect(outcome.output.contains(file), "\(file) missing from: \(outcome.output)") }
            #expect(outcome.output.contains("lacks 4 migration(s)"), "\(outcome.output)")
            #expect(outcome.output.contains("pushizo-worker migrate"), "\(outcome.output)")
        }
    }

    /// A database with no migrations at all: every file is named.
    @Test func anEmptyDatabaseNamesEveryMigration() async throws {
        try await Self.withDatabaseMissing(Int.max) { url, skipped in
            let outcome = try await Self.run(["run"], databaseURL: url)
            #expect(outcome.status == 78, "\(outcome.output)")
            #expect(outcome.output.contains(skipped.first ?? "?") && outcome.output.contains(skipped.last ?? "?"), "\(outcome.output)")
        }
    }

    /// A migration this build does not know (a newer release's) is within the window: `run` drains and exits 0,
    /// saying so; `check` passes. Once that migration declares an oldest worker beyond this build, both refuse.
    @Test func aNewerSchemaRunsWithinTheWindowAndIsRefusedBeyondIt() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                defer { c.close() }
                _ = try c.query("INSERT INTO pushizo_schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')")
            }
            let running = try await Self.run(["run"], databaseURL: url)
            #expect(running.status == 0, "\(running.output)")
            #expect(running.output.contains("within the compatibility window"), "\(running.output)")
            #expect(running.output.contains("9999_future.sql"), "\(running.output)")
            let checked = try await Self.run(["check"], databaseURL: url)
            #expect(checked.status == 0, "\(checked.output)")
            #expect(checked.output.contains("9999_future.sql"), "\(checked.output)")

            // Two numbers past this build's newest file, written as the file names write numbers: four digits.
            let newest = try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
                .compactMap { SchemaWindow.version(ofFileName: $0) }.max() ?? 0
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                defer { c.close() }
                try c.execute(
                    "ALTER TABLE pushizo_schema_migrations ADD COLUMN IF NOT EXISTS oldest_worker integer; "
                        + "UPDATE pushizo_schema_migrations SET oldest_worker = \(newest + 2) WHERE version = 9999")
            }
            let needed = String(format: "%04d", newest + 2)
            for command in ["run", "check"] {
                let outcome = try await Self.run([command], databaseURL: url)
                #expect(outcome.status == 78, "\(command): \(outcome.output)")
                #expect(
                    outcome.output.contains("9999_future.sql needs workers built with migration \(needed) or later"),
                    "\(outcome.output)")
                #expect(outcome.output.contains("this worker is too old"), "\(outcome.output)")
            }
        }
    }
}
