import Foundation
import Testing
@testable import Postgres

/// Migrations headed `-- pushizo:no-transaction` (``PostgresMigrator``): `CREATE INDEX CONCURRENTLY` runs, writes
/// to the table go on while it builds, an interrupted build is repaired by the next run, and concurrent runs stay
/// serialized. The index expression calls `gate(id)`, which waits for advisory lock 4242 while the test holds it:
/// the build is held at its table scan for as long as the test needs, whatever the machine's load.
@Suite("no-transaction migrations")
struct NoTransactionMigrationTests {
    static let gateKey = 4242

    static let files = [
        "0001_items.sql": """
            CREATE TABLE items (id int PRIMARY KEY, label text);
            INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 1000) g;
            CREATE FUNCTION gate(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
            BEGIN
                PERFORM pg_advisory_lock_shared(\(gateKey));
                PERFORM pg_advisory_unlock_shared(\(gateKey));
                RETURN i;
            END $$;
            """,
        "0002_items_indexes.sql": """
            -- pushizo:no-transaction
            -- Two statements: each runs on its own, outside a transaction.
            CREATE INDEX CONCURRENTLY IF NOT EXISTS items_gated ON items (gate(id));
            CREATE INDEX CONCURRENTLY IF NOT EXISTS items_label ON items (label);
            """,
    ]

    private static func directory(_ files: [String: String]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        for (name, sql) in files { try Data(sql.utf8).write(to: url.appendingPathComponent(name)) }
        return url
    }

    /// The pid of the backend building `items_gated`, once it waits at the gate (polled; a hang guard of 120 s).
    private static func buildingBackend(_ connection: PostgresConnection) throws -> Int {
        for _ in 0..<1200 {
            let rows = try connection.query(
                """
                SELECT pid FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND query LIKE 'CREATE INDEX CONCURRENTLY IF NOT EXISTS items_gated%' AND wait_event = 'advisory'
                """)
            if let pid = try rows.first?.decode(Int.self, "pid") { return pid }
            Thread.sleep(forTimeInterval: 0.1)
        }
        throw PostgresError(code: .queryFailed, message: "the index build never reached the gate")
    }

    private static func validity(_ connection: PostgresConnection, _ index: String) throws -> Bool? {
        try connection.query("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", [index]).first?
            .decode(Bool.self, "indisvalid")
    }

    /// `files` in a directory and a fresh database; `body` runs on a thread of its own with the migrator, the
    /// database's URL and a connection for the gate, and returns what it saw (checked by the test afterwards, in
    /// its own task, where Swift Testing attributes the issues).
    private static func withGate<T: Sendable>(
        _ body: @escaping @Sendable (PostgresMigrator, String, PostgresConnection) throws -> T
    ) async throws -> T {
        let dir = try directory(files)
        defer { try? FileManager.default.removeItem(at: dir) }
        let migrator = try PostgresMigrator(directory: dir)
        return try await TestDatabase.withFreshDatabase { url in
            try await onThread { try body(migrator, url, try PostgresConnection(connectionString: url)) }
        }
    }

    /// `migrate` on a thread of its own with a connection of its own; ``wait()`` blocks until it is done.
    final class BackgroundMigration: @unchecked Sendable {
        private let done = DispatchSemaphore(value: 0)
        private var result: Result<PostgresMigrator.Report, any Error>?

        init(_ migrator: PostgresMigrator, url: String) {
            Thread.detachNewThread { [self] in
                result = Result { try migrator.migrate(on: PostgresConnection(connectionString: url)) }
                done.signal()
            }
        }

        func wait() throws -> PostgresMigrator.Report {
            done.wait()
            return try result!.get()
        }
    }

    @Test func aConcurrentIndexBuildRunsWhileWritesGoOn() async throws {
        let seen = try await Self.withGate { migrator, url, gate in
            _ = try migrator.migrate(on: gate)  // both files; the indexes built ungated
            try gate.execute("DROP INDEX items_gated; DROP INDEX items_label; DELETE FROM pushizo_schema_migrations WHERE version = 2")
            _ = try gate.query("SELECT pg_advisory_lock($1)", [Self.gateKey])
            let run = BackgroundMigration(migrator, url: url)
            _ = try Self.buildingBackend(gate)
            // A plain CREATE INDEX holds SHARE on the table and these writes would wait for the whole build (the
            // lock timeout turns that wait into a failure instead of a hang).
            let writer = try PostgresConnection(connectionString: url)
            try writer.execute("SET lock_timeout = '60s'")
            try writer.execute("INSERT INTO items VALUES (1001, 'written during the build'); UPDATE items SET label = 'changed' WHERE id = 1")
            // The build is still held at the gate: the writes did not wait for it.
            let validAfterWrites = try Self.validity(gate, "items_gated")
            _ = try gate.query("SELECT pg_advisory_unlock($1)", [Self.gateKey])
            let applied = try run.wait().applied
            try gate.execute("SET enable_seqscan = off")
            return (
                inTransaction: migrator.migrations.map(\.runsInTransaction), validAfterWrites: validAfterWrites,
                applied: applied, valid: [try Self.validity(gate, "items_gated"), try Self.validity(gate, "items_label")],
                pending: try migrator.pending(on: gate).count,
                // The row written during the build is in the index.
                found: try gate.query("SELECT count(*) AS n FROM items WHERE gate(id) = 1001").first?.decode(Int.self, "n"))
        }
        #expect(seen.inTransaction == [true, false])
        #expect(seen.validAfterWrites == false)
        #expect(seen.applied == ["0002_items_indexes.sql"])
        #expect(seen.valid == [true, true])
        #expect(seen.pending == 0)
        #expect(seen.found == 1)
    }

    /// A cancelled build leaves `items_gated` invalid and the file unrecorded; the next run drops the invalid
    /// index and builds it again (`IF NOT EXISTS` alone would keep the invalid one).
    @Test func anInterruptedBuildIsRepairedByTheNextRun() async throws {
        let seen = try await Self.withGate { migrator, url, gate in
            _ = try gate.query("SELECT pg_advisory_lock($1)", [Self.gateKey])
            let run = BackgroundMigration(migrator, url: url)
            let pid = try Self.buildingBackend(gate)
            _ = try gate.query("SELECT pg_cancel_backend($1)", [pid])
            let failure: PostgresError?
            do {
                _ = try run.wait()
                failure = nil
            } catch let error as PostgresError {
                failure = error
            }
            let validAfterCancel = try Self.validity(gate, "items_gated")
            let pendingAfterCancel = try migrator.pending(on: gate).map(\.version)
            _ = try gate.query("SELECT pg_advisory_unlock($1)", [Self.gateKey])
            let applied = try migrator.migrate(on: gate).applied
            // The rebuilt index is used: an equality on its expression.
            try gate.execute("SET enable_seqscan = off")
            let plan = try gate.query("EXPLAIN SELECT id FROM items WHERE gate(id) = 7").map { $0["QUERY PLAN"] ?? "" }
            return (
                failure: failure, validAfterCancel: validAfterCancel, pendingAfterCancel: pendingAfterCancel, applied: applied,
                valid: [try Self.validity(gate, "items_gated"), try Self.validity(gate, "items_label")],
                plan: plan.joined(separator: "\n"))
        }
        let failure = try #require(seen.failure)
        #expect(failure.code == .migrationFailed)
        #expect(failure.sqlState == "57014")  // query_canceled
        #expect(failure.message.contains("0002_items_indexes.sql"))
        #expect(seen.validAfterCancel == false)
        #expect(seen.pendingAfterCancel == [2])
        #expect(seen.applied == ["0002_items_indexes.sql"])
        #expect(seen.valid == [true, true])
        #expect(seen.plan.contains("items_gated"), "\(seen.plan)")
    }

    /// Two runs at once while one builds concurrently: the second waits for the lock without holding a snapshot
    /// (which the build would wait for: a deadlock), then finds nothing pending.
    @Test func concurrentRunsStaySerialized() async throws {
        let applied = try await Self.withGate { migrator, url, gate in
            _ = try gate.query("SELECT pg_advisory_lock($1)", [Self.gateKey])
            let first = BackgroundMigration(migrator, url: url)
            _ = try Self.buildingBackend(gate)
            let second = BackgroundMigration(migrator, url: url)
            // The build goes on once the second run has asked for the lock (and been refused) while it was held.
            for _ in 0..<1200 {
                let asking = try gate.query(
                    """
                    SELECT count(*) AS n FROM pg_stat_activity
                    WHERE datname = current_database() AND query LIKE 'SELECT pg_try_advisory_lock%'
                    """).first?.decode(Int.self, "n")
                if asking ?? 0 > 0 { break }
                Thread.sleep(forTimeInterval: 0.1)
            }
            _ = try gate.query("SELECT pg_advisory_unlock($1)", [Self.gateKey])
            return [try first.wait().applied.count, try second.wait().applied.count]
        }
        #expect(applied == [2, 0])
    }

    /// `-- pushizo:oldest-worker` is recorded for ``SchemaWindow``; a table without the column reads nil.
    @Test func theOldestWorkerIsRecorded() async throws {
        let dir = try Self.directory([
            "0001_a.sql": "CREATE TABLE a (id int);",
            "0002_b.sql": "-- pushizo:oldest-worker 2\nDROP TABLE a;",
        ])
        defer { try? FileManager.default.removeItem(at: dir) }
        let rows = try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                _ = try PostgresMigrator(directory: dir).migrate(on: c)
                let recorded = try SchemaWindow.applied(on: c)
                try c.execute("ALTER TABLE pushizo_schema_migrations DROP COLUMN oldest_worker")
                return [recorded, try SchemaWindow.applied(on: c)]
            }
        }
        #expect(rows == [
            [.init(version: 1, name: "a"), .init(version: 2, name: "b", oldestWorker: 2)],
            [.init(version: 1, name: "a"), .init(version: 2, name: "b")],
        ])
    }
}
