import Foundation
import Testing
@testable import Postgres

/// ``PostgresPoolerMode/transaction``: nothing is left in the server session between transactions.
@Suite("PostgresConnection behind a transaction-mode pooler")
struct PoolerModeTests {
    @Test func preparedQueryPreparesNothingAndTheSessionKeepsNoSettings() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let pooled = try PostgresConnection(connectionString: url, poolerMode: .transaction)
                defer { pooled.close() }
                #expect(try pooled.preparedQuery("SELECT $1::int + 1 AS n", [41])[0].decode(Int.self, "n") == 42)
                #expect(try pooled.query("SELECT count(*) AS n FROM pg_prepared_statements")[0].decode(Int.self, "n") == 0)
                // Only what PgBouncer carries to every server session it links (reported parameters) is set.
                let settings = try pooled.query(
                    "SELECT name FROM pg_settings WHERE source = 'session' AND name IN ('bytea_output', 'extra_float_digits')")
                #expect(settings.first == nil)
                #expect(try pooled.query("SHOW TimeZone")[0]["TimeZone"] == "UTC")

                let direct = try PostgresConnection(connectionString: url)
                defer { direct.close() }
                _ = try direct.preparedQuery("SELECT $1::int + 1 AS n", [41])
                #expect(try direct.query("SELECT count(*) AS n FROM pg_prepared_statements")[0].decode(Int.self, "n") == 1)
                // Without a pooler, the process ID the connection was answered with is PostgreSQL's own.
                #expect(try direct.serverProcessID() == direct.processID)
            }
        }
    }

    @Test func migrationsTakeOnlyTransactionLevelLocks() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-pooler-migrations-\(UUID().uuidString)")
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: directory) }
                try "CREATE TABLE one (id int)".write(to: directory.appendingPathComponent("0001_one.sql"), atomically: true, encoding: .utf8)
                try "CREATE TABLE two (id int)".write(to: directory.appendingPathComponent("0002_two.sql"), atomically: true, encoding: .utf8)
                let migrator = try PostgresMigrator(directory: directory)
                let pooled = try PostgresConnection(connectionString: url, poolerMode: .transaction)
                defer { pooled.close() }
                #expect(try migrator.migrate(on: pooled).applied == ["0001_one.sql", "0002_two.sql"])
                #expect(try migrator.migrate(on: pooled).applied.isEmpty)
                let held = try pooled.query("""
                    SELECT count(*) AS n FROM pg_locks
                    WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """)
                #expect(try held[0].decode(Int.self, "n") == 0)
            }
        }
    }
}
