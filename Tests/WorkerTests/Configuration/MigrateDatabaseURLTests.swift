import Foundation
import SocketTestSupport
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
            _ = try? onSocketThreadSync {
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

    /// The workers' own role (no CREATE on the schema) may run `migrate` when nothing is pending: it finds the
    /// schema up to date (the bookkeeping table is created only when missing). With a migration pending it is
    /// refused with exit 78 (`EX_CONFIG`), and the error says which setting gives migrations a schema-owning role.
    @Test func aRoleWithoutCreateFindsNothingPendingAndIsToldWhatToSetOtherwise() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let role = "migrate_test_" + UUID().uuidString.prefix(8).lowercased()
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                try connection.execute(
                    "CREATE ROLE \(role) LOGIN; GRANT USAGE ON SCHEMA public TO \(role); "
                        + "GRANT SELECT ON pushizo_schema_migrations TO \(role); REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            }
            defer {
                _ = try? onSocketThreadSync {
                    let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                    defer { connection.close() }
                    try connection.execute("DROP OWNED BY \(role); DROP ROLE \(role)")
                }
            }
            func migrate(_ directory: String) async throws -> (Int32, String) {
                try await onThread {
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                    process.arguments = ["migrate"]
                    process.environment = ["PUSHIZO_DATABASE_URL": url + " user=\(role)", "PUSHIZO_MIGRATIONS_DIR": directory]
                    let pipe = Pipe()
                    process.standardError = pipe
                    process.standardOutput = pipe
                    try process.run()
                    let output = pipe.fileHandleForReading.readDataToEndOfFile()
                    process.waitUntilExit()
                    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
                }
            }
            let (upToDate, upToDateOutput) = try await migrate(TestDatabase.migrationsDirectory.path)
            #expect(upToDate == 0, "\(upToDateOutput)")
            #expect(upToDateOutput.contains("schema is up to date"), "\(upToDateOutput)")

            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("migrations-\(UUID())")
            try FileManager.default.copyItem(at: TestDatabase.migrationsDirectory, to: directory)
            defer { try? FileManager.default.removeItem(at: directory) }
            try "CREATE TABLE one_more (id integer);\n".write(
                to: directory.appendingPathComponent("9999_one_more.sql"), atomically: true, encoding: .utf8)
            let (pending, pendingOutput) = try await migrate(directory.path)
            // The role's missing right is a setting's problem (the URL names the wrong role): exit 78 (EX_CONFIG).
            #expect(pending == 78, "\(pendingOutput)")
            #expect(pendingOutput.contains("42501"), "\(pendingOutput)")
            #expect(pendingOutput.contains("set PUSHIZO_MIGRATE_DATABASE_URL to the schema-owning role"), "\(pendingOutput)")
        }
    }
}
