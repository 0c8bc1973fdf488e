import Foundation
import SocketTestSupport
import Postgres
import Testing
@testable import Worker

/// Migration 0006 on a database whose `delivery_events` was written under migration 0005 (unpartitioned): every
/// event is still there, byte for byte, the counts are unchanged, and new events continue the ids.
@Suite("Converting delivery_events to partitions")
struct EventConversionTests {
    /// A fresh database migrated with the files up to `lastVersion` only; dropped afterwards.
    static func withDatabase(migratedTo lastVersion: Int, _ body: @Sendable (String) async throws -> Void) async throws {
        let base = try TestDatabase.baseConnectionString()
        let name = "c_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let url = base + " dbname=" + name
        let partial = FileManager.default.temporaryDirectory.appendingPathComponent("migrations-\(name)")
        try FileManager.default.createDirectory(at: partial, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: partial) }
        for file in try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
        where file.hasSuffix(".sql") && (Int(file.prefix(4)) ?? .max) <= lastVersion {
            try FileManager.default.copyItem(
                at: TestDatabase.migrationsDirectory.appendingPathComponent(file), to: partial.appendingPathComponent(file))
        }
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            try admin.execute("CREATE DATABASE \(name)")
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            #expect(try PostgresMigrator(directory: partial).migrate(on: connection).applied.count == lastVersion)
        }
        defer {
            _ = try? onSocketThreadSync {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            }
        }
        try await body(url)
    }

    /// Every event as one text (ordered by id), its row count, and the counts view as text.
    static func fingerprint(_ connection: PostgresConnection) throws -> (events: String, rows: Int, counts: String) {
        let events = try connection.query(
            """
            SELECT count(*) AS n, coalesce(md5(string_agg(
                concat_ws('|', id, at, app_id, notification_id, subscription_id, event, reason, attempt, detail), E'\\n'
                ORDER BY id)), '') AS h
            FROM delivery_events
            """)[0]
        let counts = try connection.query(
            "SELECT coalesce(string_agg(concat_ws('|', notification_id, targeted, sent, failed, skipped, deferred), E'\\n' ORDER BY notification_id), '') AS c FROM notification_counts"
        )[0]
        return (try events.decode(String.self, "h"), try events.decode(Int.self, "n"), try counts.decode(String.self, "c"))
    }

    @Test func everyEventWrittenUnder0005SurvivesWithItsCounts() async throws {
        try await Self.withDatabase(migratedTo: 5) { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notifications = try (0..<4).map { _ in try seed.notification(target: #"{"all": true}"#) }
                _ = try seed.connection.query("UPDATE notifications SET targeted_count = 1000")
                // 20,000 events over the last 60 days, of every kind, some with detail; one dated next month.
                _ = try seed.connection.query(
                    """
                    INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event, reason, attempt, detail)
                    SELECT now() - make_interval(mins => i * 4), $1, ($2::uuid[])[1 + i % 4], gen_random_uuid(),
                           (ARRAY['sent', 'failed', 'skipped', 'deferred', 'retrying', 'opened'])[1 + i % 6],
                           CASE WHEN i % 6 = 1 THEN 'unregistered' END, i % 3,
                           CASE WHEN i % 5 = 0 THEN jsonb_build_object('apns_id', gen_random_uuid()) ELSE '{}' END
                    FROM generate_series(1, 20000) AS i
                    """, [seed.appID, notifications])
                _ = try seed.connection.query(
                    "INSERT INTO delivery_events (at, app_id, notification_id, event) VALUES (now() + interval '31 days', $1, $2, 'sent')",
                    [seed.appID, notifications[0]])
                let before = try Self.fingerprint(seed.connection)
                #expect(before.rows == 20_001)
                let lastID = try seed.connection.query("SELECT max(id) AS m FROM delivery_events")[0].decode(Int64.self, "m")

                let applied = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: seed.connection)
                #expect(applied.applied.contains("0006_event_partitions.sql"))

                let after = try Self.fingerprint(seed.connection)
                #expect(after.rows == before.rows)
                #expect(after.events == before.events)
                #expect(after.counts == before.counts)
                // The old table is a partition now, holding everything up to its newest day; days after it are
                // partitions of their own.
                let kind = try seed.connection.query("SELECT relkind::text AS k FROM pg_class WHERE relname = 'delivery_events'")[0]
                #expect(try kind.decode(String.self, "k") == "p")
                let parts = try DataLifecycleTests.partitions(seed.connection)
                #expect(parts.contains("delivery_events_legacy"))
                #expect(parts.contains("delivery_events_default"))
                #expect(
                    try seed.connection.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE tableoid <> 'delivery_events_legacy'::regclass"
                    )[0].decode(Int.self, "n") == 0)
                // New events continue the old ids and are counted on top.
                let id = try seed.connection.query(
                    "INSERT INTO delivery_events (app_id, notification_id, event) VALUES ($1, $2, 'sent') RETURNING id",
                    [seed.appID, notifications[1]]
                )[0].decode(Int64.self, "id")
                #expect(id == lastID + 1)
                let counts = try DataLifecycleTests.countsAndDirectCounts(seed.connection)
                #expect(counts.view == counts.direct)
                // The legacy partition goes as a whole once its newest day is past the retention, never before.
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: DataLifecycleTests.days30, waitForLock: false))
                #expect(report.droppedPartitions.isEmpty)
                #expect(report.problems.isEmpty)
            }
        }
    }

    /// The key's index built beforehand without blocking writers is adopted, not built again under the lock.
    @Test func aKeyIndexBuiltConcurrentlyBeforehandIsAdopted() async throws {
        try await Self.withDatabase(migratedTo: 5) { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query(
                    """
                    INSERT INTO delivery_events (at, app_id, notification_id, event)
                    SELECT now() - make_interval(mins => i), $1, $2, 'sent' FROM generate_series(1, 500) AS i
                    """, [seed.appID, notification])
                try seed.connection.execute("CREATE UNIQUE INDEX CONCURRENTLY delivery_events_id_at ON delivery_events (id, at)")
                let built = try seed.connection.query(
                    "SELECT oid::bigint AS o FROM pg_class WHERE relname = 'delivery_events_id_at'")[0].decode(Int64.self, "o")
                _ = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: seed.connection)
                let adopted = try seed.connection.query(
                    "SELECT oid::bigint AS o FROM pg_class WHERE relname = 'delivery_events_legacy_id_at'")[0].decode(Int64.self, "o")
                #expect(adopted == built)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0].decode(Int.self, "n") == 500)
            }
        }
    }

    @Test func anEmptyTableIsReplacedByDailyPartitions() async throws {
        try await Self.withDatabase(migratedTo: 5) { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                _ = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: connection)
                let parts = try DataLifecycleTests.partitions(connection)
                #expect(!parts.contains("delivery_events_legacy"))
                #expect(parts.count == 9)  // today, 7 days ahead, DEFAULT
            }
        }
    }
}
