import Foundation
import Postgres
import Testing

/// `pushizo-worker migrate` refusing what only an operator can fix with exit 78 (`EX_CONFIG`, which the migrate
/// unit's `RestartPreventExitStatus` does not restart), naming the file and `PUSHIZO_MIGRATIONS_DIR`: a directory
/// that lacks a file of the binary's own list (an incomplete install, not the compatibility window), an applied
/// file changed since, a bad file name.
@Suite("migrate refusals")
struct MigrateRefusalEndToEndTests {
    /// A copy of the repository's migrations in a directory of the test's own, changed by `edit`, removed afterwards.
    static func withMigrationsCopy(
        _ edit: (URL, [String]) throws -> Void, _ body: @Sendable (URL) async throws -> Void
    ) async throws {
        let source = TestDatabase.migrationsDirectory
        let copy = URL(fileURLWithPath: "/tmp/pushizo-migrations-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: copy) }
        let files = try FileManager.default.contentsOfDirectory(atPath: source.path).filter { $0.hasSuffix(".sql") }.sorted()
        for file in files {
            try FileManager.default.copyItem(at: source.appendingPathComponent(file), to: copy.appendingPathComponent(file))
        }
        try edit(copy, files)
        try await body(copy)
    }

    /// The binary's newest migration missing from the directory while the database has it applied: not "newer than
    /// this release" (exit 0) but an incomplete install, 78, naming the file and the directory.
    @Test func aDirectoryWithoutTheBinarysOwnNewestFileIsRefused() async throws {
        let newest = try #require(
            try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
                .filter { $0.hasSuffix(".sql") }.sorted().last)
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withMigrationsCopy({ copy, _ in
                try FileManager.default.removeItem(at: copy.appendingPathComponent(newest))
            }) { copy in
                let outcome = try await SchemaCheckEndToEndTests.run(
                    ["migrate"], databaseURL: url, environment: ["PUSHIZO_MIGRATIONS_DIR": copy.path])
                #expect(outcome.status == 78, "\(outcome.output)")
                #expect(outcome.output.contains(newest) && outcome.output.contains(copy.path), "\(outcome.output)")
                #expect(outcome.output.contains("PUSHIZO_MIGRATIONS_DIR"), "\(outcome.output)")
                #expect(!outcome.output.contains("compatibility window"), "\(outcome.output)")
            }
        }
    }

    /// An applied file changed since: 78, not 1 (running again cannot succeed), with the advice.
    @Test func aChangedAppliedFileExits78() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withMigrationsCopy({ copy, files in
                let first = copy.appendingPathComponent(files[0])
                let text = try String(contentsOf: first, encoding: .utf8)
                try (text + "\n-- edited after it was applied\n").write(to: first, atomically: true, encoding: .utf8)
            }) { copy in
                let outcome = try await SchemaCheckEndToEndTests.run(
                    ["migrate"], databaseURL: url, environment: ["PUSHIZO_MIGRATIONS_DIR": copy.path])
                #expect(outcome.status == 78, "\(outcome.output)")
                #expect(outcome.output.contains("restore it and add a new migration instead"), "\(outcome.output)")
            }
        }
    }

    /// The migrator's other refusals need an operator too: a file not named `NNNN_name.sql` is 78 before any
    /// connection is made.
    @Test func aBadFileNameExits78() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withMigrationsCopy({ copy, _ in
                try "SELECT 1;\n".write(to: copy.appendingPathComponent("latest.sql"), atomically: true, encoding: .utf8)
            }) { copy in
                let outcome = try await SchemaCheckEndToEndTests.run(
                    ["migrate"], databaseURL: url, environment: ["PUSHIZO_MIGRATIONS_DIR": copy.path])
                #expect(outcome.status == 78, "\(outcome.output)")
                #expect(outcome.output.contains("latest.sql is not named NNNN_name.sql"), "\(outcome.output)")
            }
        }
    }

    /// A file PostgreSQL refuses for its content (a syntax error) is 78; nothing of it is applied.
    @Test func aFileTheServerRefusesExits78() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withMigrationsCopy({ copy, _ in
                try "SELEC broken;\n".write(to: copy.appendingPathComponent("9990_broken.sql"), atomically: true, encoding: .utf8)
            }) { copy in
                let outcome = try await SchemaCheckEndToEndTests.run(
                    ["migrate"], databaseURL: url, environment: ["PUSHIZO_MIGRATIONS_DIR": copy.path])
                #expect(outcome.status == 78, "\(outcome.output)")
                #expect(outcome.output.contains("9990_broken.sql failed") && outcome.output.contains("42601"), "\(outcome.output)")
            }
        }
    }
}
