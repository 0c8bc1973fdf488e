import Foundation
import Postgres
import Testing

/// `migrate` may run as a schema-owning role (`PUSHIZO_MIGRATE_DATABASE_URL`, read only by the migrations
/// unit), while the workers' own URL stays unprivileged.
@Suite("migrate with a separate database URL")
struct MigrateDatabaseURLTests {
    @Test func theMigrateURLWinsOverTheWorkersURL() async throws {
        let base = try TestDatabase.baseConnectionString()
        let name = "m_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            try admin.execute("CREATE DATABASE \(name)")
        }
        defer {
            _ = try? runOnThreadSync {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            }
        }
        let status = try await onThread {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
            process.arguments = ["migrate"]
            process.environment = [
                // Nothing listens on port 1: only the migrate URL can work.
                "PUSHIZO_DATABASE_URL": "host=127.0.0.1 port=1 dbname=pushizo connect_timeout=2",
                "PUSHIZO_MIGRATE_DATABASE_URL": base + " dbname=" + name,
                "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
            ]
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
        #expect(status == 0)
        let applied = try await onThread {
            let connection = try PostgresConnection(connectionString: base + " dbname=" + name, applicationName: "pushizo-test")
            defer { connection.close() }
            return try connection.query("SELECT count(*)::int AS n FROM pushizo_schema_migrations").first?.decode(Int.self, "n")
        }
        #expect((applied ?? 0) > 0)
    }
}
