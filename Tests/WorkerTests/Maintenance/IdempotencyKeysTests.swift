import Foundation
import Postgres
import Testing
@testable import Worker

/// Producers' idempotency keys (`notifications.idempotency_key`, migration 0033; docs/producer-contract.md,
/// "Idempotent inserts"): the producer contract's insert and read-back against PostgreSQL, exact under
/// concurrent producers, bounded in form, private to each app under row-level security, and cleared by the
/// maintenance past ``DataLifecycle/idempotencyKeyWindow`` without changing how the notification is delivered.
@Suite("idempotency keys")
struct IdempotencyKeysTests {
    /// The producer contract's insert, as docs/producer-contract.md gives it.
    static let insertSQL = """
        INSERT INTO notifications (app_id, message, target, idempotency_key)
        VALUES ($1, '{"contents": {"en": "Your order shipped"}}', $2::jsonb, $3)
        ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
        """
    /// The read-back when the insert returned no row: the notification that holds the key.
    static let readBackSQL = "SELECT id FROM notifications WHERE app_id = $1 AND idempotency_key = $2"

    /// What one producer's insert and read-back gave: the id, and whether this insert created the row.
    struct Produced: Sendable, Equatable {
        var id: UUID
        var inserted: Bool
    }

    /// The producer's two statements on `connection` (each its own transaction, READ COMMITTED).
    static func produce(
        _ connection: PostgresConnection, app: UUID, key: String?, target: String = #"{"all": true}"#
    ) throws -> Produced {
        if let row = try connection.query(insertSQL, [app, target, key]).first {
            return Produced(id: try row.decode(UUID.self, "id"), inserted: true)
        }
        let existing = try #require(try connection.query(readBackSQL, [app, key]).first)
        return Produced(id: try existing.decode(UUID.self, "id"), inserted: false)
    }

    static func newApp(_ connection: PostgresConnection) throws -> UUID {
        let app = UUID()
        _ = try connection.query("INSERT INTO apps (id) VALUES ($1)", [app])
        return app
    }

    static func count(_ connection: PostgresConnection, _ sql: String, _ parameters: [any PostgresEncodable] = []) throws -> Int {
        try connection.query(sql, parameters)[0].decode(Int.self, "n")
    }

    /// A connection handed from one test thread to the next, never used by two at once.
    final class Held: @unchecked Sendable {
        let connection: PostgresConnection
        init(_ url: String, _ name: String) throws {
            connection = try PostgresConnection(connectionString: url, applicationName: name)
        }
    }

    @Test func aRetriedInsertReturnsTheFirstNotificationAndKeysBelongToTheirApp() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                defer { c.close() }
                let app = try Self.newApp(c), other = try Self.newApp(c)
                let key = "2b1f0c7e-8f0e-4c1a-9d57-0f1e6a0d9c11"
                let first = try Self.produce(c, app: app, key: key)
                #expect(first.inserted)
                // The retry after a timeout: no second row, the first one's id.
                let retry = try Self.produce(c, app: app, key: key)
                #expect(retry == Produced(id: first.id, inserted: false))
                // Another app's key of the same spelling is its own.
                let elsewhere = try Self.produce(c, app: other, key: key)
                #expect(elsewhere.inserted && elsewhere.id != first.id)
                // Without a key nothing changes: every insert is a notification.
                _ = try Self.produce(c, app: app, key: nil)
                _ = try Self.produce(c, app: app, key: nil)
                #expect(try Self.count(c, "SELECT count(*)::int AS n FROM notifications WHERE app_id = $1", [app]) == 3)
                // A plain insert of a used key, without ON CONFLICT, is the unique violation.
                do {
                    _ = try c.query(
                        "INSERT INTO notifications (app_id, message, target, idempotency_key) VALUES ($1, '{}', '{\"all\": true}', $2)",
                        [app, key])
                    Issue.record("a second notification with the key was inserted")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "23505", "\(error)")
                }
            }
        }
    }

    @Test func theKeyIsOneToSixtyFourCharactersOfVisibleASCII() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                defer { c.close() }
                let app = try Self.newApp(c)
                let accepted = [
                    "a", UUID().uuidString.lowercased(), String(repeating: "f", count: 64), "reminder/7f3a:2026-12-07~v2",
                    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
                ]
                for key in accepted {
                    #expect(try Self.produce(c, app: app, key: key).inserted, "\(key)")
                }
                let refused = [
                    "", String(repeating: "f", count: 65), "with space", " leading", "trailing ", "tab\there", "line\nbreak",
                    "é", "ключ", "\u{7F}", "zero\u{200B}width",
                ]
                for key in refused {
                    do {
                        _ = try c.query(Self.insertSQL, [app, #"{"all": true}"#, key])
                        Issue.record("accepted \(key.debugDescription)")
                    } catch let error as PostgresError {
                        #expect(error.sqlState == "23514", "\(key.debugDescription): \(error)")
                    }
                }
            }
        }
    }

    /// Producers racing with one key make one notification, and each reads back its id. First eight at once;
    /// then four that find the key's first insert still uncommitted, which wait for it: it commits (they read
    /// back its id) or rolls back (exactly one of them inserts).
    @Test func concurrentProducersOfOneKeyMakeOneNotification() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.raceProducersOfOneKey(url: url, produce: { try Self.produce($0, app: $1, key: $2) }) { watcher in
                try Self.count(
                    watcher,
                    """
                    SELECT count(*)::int AS n FROM pg_stat_activity
                    WHERE application_name LIKE 'pushizo-test-racer-%' AND wait_event_type = 'Lock'
                    """)
            }
        }
    }

    /// The race of ``concurrentProducersOfOneKeyMakeOneNotification()`` on the database at `url` with the producers'
    /// insert `produce`, run in a transaction each producer opens and commits (the holder's stays open until it
    /// commits or rolls back): `waiting` counts, given the watcher's connection to `url`, the producers waiting for
    /// the key's uncommitted insert. Ends with one notification per key.
    static func raceProducersOfOneKey(
        url: String, produce: @escaping @Sendable (PostgresConnection, UUID, String) throws -> Produced,
        waiting: @escaping @Sendable (PostgresConnection) throws -> Int
    ) async throws {
        let app = try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            return try Self.newApp(c)
        }
        func race(_ key: String, producers: Int) async throws -> [Produced] {
            try await withThrowingTaskGroup(of: Produced.self) { group in
                for n in 0..<producers {
                    group.addTask {
                        try await onThread {
                            let c = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-racer-\(n)")
                            defer { c.close() }
                            try c.execute("BEGIN")
                            let produced = try produce(c, app, key)
                            try c.execute("COMMIT")
                            return produced
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        let together = try await race("together", producers: 8)
        #expect(together.filter(\.inserted).count == 1)
        #expect(Set(together.map(\.id)).count == 1)

        for commits in [true, false] {
            let key = commits ? "held-then-committed" : "held-then-rolled-back"
            let holder = try await onThread { try Held(url, "pushizo-test-holder") }
            let watcher = try await onThread { try Held(url, "pushizo-test-watcher") }
            let held = try await onThread {
                try holder.connection.execute("BEGIN")
                return try produce(holder.connection, app, key)
            }
            #expect(held.inserted)
            async let racers = race(key, producers: 4)
            try await waitUntil("the four producers wait for the uncommitted key") {
                try await onThread { try waiting(watcher.connection) == 4 }
            }
            try await onThread { try holder.connection.execute(commits ? "COMMIT" : "ROLLBACK") }
            let produced = try await racers
            try await onThread {
                holder.connection.close()
                watcher.connection.close()
            }
            if commits {
                #expect(produced.allSatisfy { $0 == Produced(id: held.id, inserted: false) }, "\(produced)")
            } else {
                #expect(produced.filter(\.inserted).count == 1, "\(produced)")
                #expect(Set(produced.map(\.id)).count == 1 && produced[0].id != held.id, "\(produced)")
            }
        }
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            let perKey = try c.query(
                "SELECT idempotency_key AS key, count(*)::int AS n FROM notifications WHERE app_id = $1 GROUP BY 1 ORDER BY 1",
                [app]
            ).map { "\($0["key"] ?? "")=\($0["n"] ?? "")" }
            #expect(perKey == ["held-then-committed=1", "held-then-rolled-back=1", "together=1"])
        }
    }

    /// With producers' row-level security on, a producer's key is looked for in its own apps only: the same key
    /// in another app neither conflicts nor shows, and an insert into another app is refused whether or not that
    /// app holds the key, so neither its answer nor its error tells the producer anything about the other app.
    @Test func aProducerCannotProbeAnotherAppsKeys() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await DatabaseRolesTests.withLogin(url, in: "pushizo_producer") { producer in
                try await DatabaseRolesTests.asOwner(url) { owner in
                    try DatabaseRolesTests.seedTwoApps(owner)
                    _ = try owner.query(
                        "INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, DatabaseRolesTests.appA])
                    _ = try owner.query("SELECT pushizo_set_producer_row_security(true)")
                    let theirs = try Self.produce(owner, app: DatabaseRolesTests.appB, key: "shared-key")

                    let c = try DatabaseRolesTests.connect(url, as: producer)
                    defer { c.close() }
                    let mine = try Self.produce(c, app: DatabaseRolesTests.appA, key: "shared-key")
                    #expect(mine.inserted && mine.id != theirs.id)
                    #expect(try c.query(Self.readBackSQL, [DatabaseRolesTests.appB, "shared-key"]).isEmpty)
                    #expect(try c.query("SELECT id FROM notifications WHERE idempotency_key = 'shared-key'")
                        .map { try $0.decode(UUID.self, "id") } == [mine.id])
                    for key in ["shared-key", "unused-key"] {
                        DatabaseRolesTests.expectRefused(c, Self.insertSQL, [DatabaseRolesTests.appB, #"{"all": true}"#, key])
                    }
                    // The key is written at insert only.
                    DatabaseRolesTests.expectRefused(
                        c, "UPDATE notifications SET idempotency_key = 'moved' WHERE id = $1", [mine.id])
                    #expect(try Self.count(
                        owner, "SELECT count(*)::int AS n FROM notifications WHERE app_id = $1 AND idempotency_key IS NOT NULL",
                        [DatabaseRolesTests.appB]) == 1)
                }
            }
        }
    }

    /// The maintenance clears keys past the window, in batches, and leaves younger ones: the key can be used
    /// again, and the notification whose key was cleared (created 31 days ago, still pending: its `send_after`
    /// has just come) is expanded and sent like any other.
    @Test func theMaintenanceClearsKeysPastTheWindowAndTheirNotificationsStillDeliver() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (seedApp, old, young, subscription) = try await onThread {
                    let seed = try Seed(url)
                    defer { seed.connection.close() }
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let subscription = try seed.subscription()
                    let target = #"{"include_subscription_ids": ["\#(subscription.uuidString.lowercased())"]}"#
                    let old = try Self.produce(seed.connection, app: seed.appID, key: "old-key", target: target)
                    let young = try Self.produce(seed.connection, app: seed.appID, key: "young-key", target: target)
                    // Seven more past the window, cleared in batches of three.
                    for n in 0..<7 { _ = try Self.produce(seed.connection, app: seed.appID, key: "older-\(n)", target: #"{"all": true}"#) }
                    _ = try seed.connection.query(
                        """
                        UPDATE notifications SET created_at = now() - interval '31 days', send_after = now() - interval '1 second'
                        WHERE app_id = $1 AND idempotency_key <> 'young-key'
                        """, [seed.appID])
                    _ = try seed.connection.query(
                        "UPDATE notifications SET created_at = now() - interval '29 days', status = 'canceled' WHERE id = $1",
                        [young.id])
                    _ = try seed.connection.query(
                        "UPDATE notifications SET status = 'canceled' WHERE app_id = $1 AND idempotency_key LIKE 'older-%'",
                        [seed.appID])
                    return (seed.appID, old, young, subscription)
                }
                let settings = {
                    var settings = DataLifecycleTests.days30
                    settings.batchSize = 3
                    return settings
                }()
                try await onThread {
                    let c = try PostgresConnection(connectionString: url)
                    defer { c.close() }
                    let report = try #require(try DataLifecycle.maintain(on: c, settings: settings, waitForLock: false))
                    #expect(report.problems.isEmpty, "\(report.problems)")
                    #expect(report.clearedIdempotencyKeys == 8)
                    #expect(report.fields["idempotency_keys_cleared"] == "8")
                    #expect(try c.query("SELECT idempotency_key, status FROM notifications WHERE id = $1", [old.id])[0]["status"] == "pending")
                    #expect(try c.query(Self.readBackSQL, [seedApp, "old-key"]).isEmpty)
                    // The young key still holds; the old one is free again.
                    #expect(try Self.produce(c, app: seedApp, key: "young-key") == Produced(id: young.id, inserted: false))
                    let reused = try Self.produce(c, app: seedApp, key: "old-key", target: #"{"include_subscription_ids": []}"#)
                    #expect(reused.inserted && reused.id != old.id)
                    _ = try c.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [reused.id])
                    let again = try #require(try DataLifecycle.maintain(on: c, settings: settings, waitForLock: false))
                    #expect(again.clearedIdempotencyKeys == 0)
                }

                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                try await onThread {
                    let c = try PostgresConnection(connectionString: url)
                    defer { c.close() }
                    let events = try c.query(
                        "SELECT event FROM delivery_events WHERE notification_id = $1 AND subscription_id = $2", [old.id, subscription]
                    ).map { $0["event"] ?? "" }
                    #expect(events == ["sent"])
                    #expect(try c.query("SELECT status FROM notifications WHERE id = $1", [old.id])[0]["status"] == "expanded")
                }
            }
        }
    }
}
