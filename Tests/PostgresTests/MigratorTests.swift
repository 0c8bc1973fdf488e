import Foundation
import Testing
@testable import Postgres

@Suite("PostgresMigrator")
struct MigratorTests {
    /// A temporary directory holding `files` (name -> SQL).
    private static func directory(_ files: [String: String]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        for (name, sql) in files { try Data(sql.utf8).write(to: url.appendingPathComponent(name)) }
        return url
    }

    private static let basic = [
        "0001_create_items.sql": "CREATE TABLE items (id int PRIMARY KEY, label text);\nCREATE INDEX items_label ON items (label);",
        "0002_seed.sql": "INSERT INTO items VALUES (1, 'one'), (2, 'two');",
        "README.md": "ignored",
    ]

    @Test func appliesToEmptyDatabaseThenIsANoOp() async throws {
        let dir = try Self.directory(Self.basic)
        defer { try? FileManager.default.removeItem(at: dir) }
        let migrator = try PostgresMigrator(directory: dir)
        #expect(migrator.migrations.map(\.version) == [1, 2])
        #expect(migrator.migrations.map(\.name) == ["create_items", "seed"])
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                #expect(try migrator.pending(on: c).map(\.version) == [1, 2])
                let first = try migrator.migrate(on: c)
                #expect(first == PostgresMigrator.Report(applied: ["0001_create_items.sql", "0002_seed.sql"], alreadyApplied: 0))
                #expect(try migrator.pending(on: c).isEmpty)
                let second = try migrator.migrate(on: c)
                #expect(second == PostgresMigrator.Report(applied: [], alreadyApplied: 2))
                #expect(try c.query("SELECT count(*) AS n FROM items").first?.decode(Int.self, "n") == 2)
                // Bookkeeping rows carry PostgreSQL's own SHA-256 of the file bytes.
                let rows = try c.query("SELECT version, name, checksum, applied_at FROM pushizo_schema_migrations ORDER BY version")
                #expect(rows.count == 2)
                for (row, migration) in zip(rows, migrator.migrations) {
                    let bytes = [UInt8](try Data(contentsOf: dir.appendingPathComponent(migration.fileName)))
                    let expected = try c.query("SELECT encode(sha256($1::bytea), 'hex') AS h", [bytes]).first?.decode(String.self, "h")
                    #expect(try row.decode(String.self, "checksum") == expected)
                    #expect(try row.decode(String.self, "name") == migration.name)
                    _ = try row.decode(Date.self, "applied_at")
                }
                // The advisory lock is released after the run.
                let locks = try c.query("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
                #expect(try locks.first?.decode(Int.self, "n") == 0)
            }
        }
    }

    @Test func changedAppliedFileIsRefusedAndNothingIsApplied() async throws {
        let dir = try Self.directory(Self.basic)
        defer { try? FileManager.default.removeItem(at: dir) }
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                _ = try PostgresMigrator(directory: dir).migrate(on: c)
                try Data("INSERT INTO items VALUES (1, 'one'), (2, 'TWO');".utf8).write(to: dir.appendingPathComponent("0002_seed.sql"))
                try Data("CREATE TABLE later (id int);".utf8).write(to: dir.appendingPathComponent("0003_later.sql"))
                let changed = try PostgresMigrator(directory: dir)
                let error = try #require(throws: PostgresError.self) { try changed.migrate(on: c) }
                #expect(error.code == .migrationChecksumMismatch)
                #expect(error.message.contains("0002_seed.sql"))
                #expect(throws: PostgresError.self) { try changed.pending(on: c) }
                #expect(try c.query("SELECT to_regclass('later') IS NULL AS absent").first?.decode(Bool.self, "absent") == true)

                // An applied version whose file disappeared is an error too.
                try FileManager.default.removeItem(at: dir.appendingPathComponent("0002_seed.sql"))
                let missing = try #require(throws: PostgresError.self) { try PostgresMigrator(directory: dir).migrate(on: c) }
                #expect(missing.code == .migrationFailed)
                #expect(missing.message.contains("seed"))
            }
        }
    }

    /// A newer release's migrations (applied versions above this release's newest file) are the compatibility
    /// window's: an older release's `migrate`, which its workers' systemd units require, reports them and applies
    /// nothing, where it used to refuse and keep those workers from starting. A file missing below the newest is
    /// still refused.
    @Test func aNewerReleasesMigrationsAreLeftAsTheyAreAndAGapIsStillRefused() async throws {
        let dir = try Self.directory(Self.basic)
        defer { try? FileManager.default.removeItem(at: dir) }
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                _ = try PostgresMigrator(directory: dir).migrate(on: c)
                _ = try c.query(
                    "INSERT INTO pushizo_schema_migrations (version, name, checksum) VALUES (3, 'next_release', 'x')")
                let older = try PostgresMigrator(directory: dir)
                #expect(try older.pending(on: c).isEmpty)
                let report = try older.migrate(on: c)
                #expect(report == PostgresMigrator.Report(applied: [], alreadyApplied: 3, newer: ["0003_next_release.sql"]))

                try FileManager.default.removeItem(at: dir.appendingPathComponent("0002_seed.sql"))
                try Data("CREATE TABLE later (id int);".utf8).write(to: dir.appendingPathComponent("0004_later.sql"))
                let gap = try #require(throws: PostgresError.self) { try PostgresMigrator(directory: dir).migrate(on: c) }
                #expect(gap.code == .migrationFailed && gap.message.contains("seed"))
            }
        }
    }

    @Test func failingFileIsRolledBackWithServerError() async throws {
        let dir = try Self.directory([
            "1_ok.sql": "CREATE TABLE a (id int);",
            "2_bad.sql": "CREATE TABLE b (id int);\nINSERT INTO b VALUES ('not a number');",
            "3_never.sql": "CREATE TABLE c (id int);",
        ])
        defer { try? FileManager.default.removeItem(at: dir) }
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                let error = try #require(throws: PostgresError.self) { try PostgresMigrator(directory: dir).migrate(on: c) }
                #expect(error.code == .migrationFailed)
                #expect(error.sqlState == "22P02")
                #expect(error.message.contains("2_bad.sql"))
                let present = try c.query("SELECT to_regclass('a') IS NOT NULL AS a, to_regclass('b') IS NOT NULL AS b, to_regclass('c') IS NOT NULL AS c").first
                #expect(try present?.decode(Bool.self, "a") == true)
                #expect(try present?.decode(Bool.self, "b") == false)
                #expect(try present?.decode(Bool.self, "c") == false)
                #expect(try PostgresMigrator(directory: dir).pending(on: c).map(\.version) == [2, 3])
            }
        }
    }

    @Test(arguments: [
        (["01_a.sql": "", "1_b.sql": ""], "1_b.sql"),
        (["x1_a.sql": ""], "x1_a.sql"),
        (["0001.sql": ""], "0001.sql"),
        (["0001_.sql": ""], "0001_.sql"),
    ])
    func badFileNamesAreRejected(files: [String: String], named: String) throws {
        let dir = try Self.directory(files)
        defer { try? FileManager.default.removeItem(at: dir) }
        let error = try #require(throws: PostgresError.self) { try PostgresMigrator(directory: dir) }
        #expect(error.code == .migrationFailed)
        #expect(error.message.contains(named), "\(error.message)")
    }

    @Test func concurrentMigratorsApplyEachFileOnce() async throws {
        // Not idempotent on purpose (plain CREATE TABLE / INSERT), and slow enough that both runs overlap.
        let dir = try Self.directory([
            "0001_slow.sql": "SELECT pg_sleep(0.3); CREATE TABLE once (id int); INSERT INTO once VALUES (1);",
            "0002_more.sql": "INSERT INTO once VALUES (2);",
        ])
        defer { try? FileManager.default.removeItem(at: dir) }
        let migrator = try PostgresMigrator(directory: dir)
        try await TestDatabase.withFreshDatabase { url in
            async let first = onThread { try migrator.migrate(on: PostgresConnection(connectionString: url)) }
            async let second = onThread { try migrator.migrate(on: PostgresConnection(connectionString: url)) }
            let reports = try await [first, second]
            #expect(reports.map(\.applied.count).sorted() == [0, 2])
            #expect(reports.map(\.alreadyApplied).sorted() == [0, 2])
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                #expect(try c.query("SELECT id FROM once ORDER BY id").map { try $0.decode(Int.self, "id") } == [1, 2])
            }
        }
    }

    @Test func realMigrationsApplyToAFreshDatabase() async throws {
        let dir = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("migrations")
        let migrator = try PostgresMigrator(directory: dir)
        #expect(!migrator.migrations.isEmpty)
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                let report = try migrator.migrate(on: c)
                #expect(report.applied == migrator.migrations.map(\.fileName))
                #expect(try migrator.migrate(on: c).applied.isEmpty)
                for table in ["apps", "app_channels", "users", "subscriptions", "notifications", "deliveries", "delivery_events"] {
                    let row = try c.query("SELECT to_regclass($1) IS NOT NULL AS present", [table]).first
                    #expect(try row?.decode(Bool.self, "present") == true, "\(table)")
                }
            }
        }
    }
}
