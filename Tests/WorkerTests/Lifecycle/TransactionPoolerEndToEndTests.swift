import Foundation
import Postgres
import Testing
@testable import Worker

/// Two real `pushizo-worker run` processes through a real PgBouncer in `pool_mode = transaction` (fewer server
/// connections than the workers' clients, so server sessions pass between the two workers all the time), against
/// the emulator: what docs/operations.md ("Connection poolers") promises of `PUSHIZO_DATABASE_POOLER=transaction`.
@Suite("pushizo-worker behind a transaction-mode PgBouncer")
struct TransactionPoolerEndToEndTests {
    /// `check` through the pooler without `PUSHIZO_DATABASE_POOLER` refuses, naming the key; then two workers
    /// deliver a 3,000-device broadcast and ten one-device notifications exactly once, with no prepared-statement
    /// error, wake-ups on direct `LISTEN` sessions, the maintenance done, and no advisory lock left on a pooled
    /// server session.
    @Test func twoWorkersThroughATransactionPoolerDeliverEachOnceAndLeaveNothingInTheSessions() async throws {
        guard FileManager.default.isExecutableFile(atPath: PgBouncer.executable) else {
            Issue.record("PgBouncer is not installed (scripts/install-deps.sh installs it)")
            return
        }
        try await TestDatabase.withMigratedDatabase { directURL in
            let database = try #require(directURL.split(separator: " ").last { $0.hasPrefix("dbname=") }?.dropFirst(7))
            try await PgBouncer.with(inFrontOf: try TestDatabase.baseConnectionString(), poolSize: 6) { bouncer in
                try await EmulatorHarness.with { emulator in
                    try await Self.run(directURL: directURL, database: String(database), bouncer: bouncer, emulator: emulator)
                }
            }
        }
    }

    static let broadcastDevices = 3_000
    static let smallNotifications = 10

    static func run(directURL: String, database: String, bouncer: PgBouncer, emulator: EmulatorHarness) async throws {
        let pooledURL = bouncer.connectionString(database: database)
        let smallTargets = try await onThread {
            let seed = try Seed(directURL)
            try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
            _ = try seed.connection.query(
                """
                INSERT INTO subscriptions (app_id, platform, token, language)
                SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('p' || n), 1, 30), 'en'
                FROM generate_series(1, $2) n
                """, [seed.appID, broadcastDevices])
            // A fleet-shared provider token expired two days ago: the maintenance deletes it.
            _ = try seed.connection.query(
                """
                INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                VALUES ('expired-by-test', 'apns', '\\x00', 1, now() - interval '3 days', now() - interval '2 days')
                """)
            return try seed.connection.query("SELECT id FROM subscriptions ORDER BY id LIMIT $1", [smallNotifications])
                .map { try $0.decode(UUID.self, "id") }
        }
        let migrations = TestDatabase.migrationsDirectory.path

        // Without the setting, the pooler is seen and refused, naming the key.
        let refused = try await Self.runToExit(
            emulator.workerProcess(databaseURL: pooledURL, arguments: ["check"], extra: ["PUSHIZO_MIGRATIONS_DIR": migrations]))
        #expect(refused.status == 78, "\(refused.output)")
        #expect(refused.output.contains("PUSHIZO_DATABASE_POOLER"), "\(refused.output)")
        // A LISTEN route through the pooler is refused too.
        let listenRefused = try await Self.runToExit(
            emulator.workerProcess(
                databaseURL: pooledURL, arguments: ["check"],
                extra: [
                    "PUSHIZO_MIGRATIONS_DIR": migrations, "PUSHIZO_DATABASE_POOLER": "transaction",
                    "PUSHIZO_LISTEN_DATABASE_URL": pooledURL,
                ]))
        #expect(listenRefused.status == 78, "\(listenRefused.output)")
        #expect(listenRefused.output.contains("PUSHIZO_LISTEN_DATABASE_URL"), "\(listenRefused.output)")
        let settings = [
            "PUSHIZO_DATABASE_POOLER": "transaction", "PUSHIZO_LISTEN_DATABASE_URL": directURL,
            "PUSHIZO_MIGRATIONS_DIR": migrations,
        ]
        let checked = try await Self.runToExit(emulator.workerProcess(databaseURL: pooledURL, arguments: ["check"], extra: settings))
        #expect(checked.status == 0, "\(checked.output)")
        #expect(checked.output.contains("database: ok"), "\(checked.output)")

        // Two workers, polling only every 5 s: new work reaches them through LISTEN (and their own loops).
        let logDirectory = bouncer.directory
        var workers: [(process: Process, log: String)] = []
        for name in ["A", "B"] {
            let log = "\(logDirectory)/worker-\(name).log"
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            let process = emulator.workerProcess(
                databaseURL: pooledURL, arguments: ["run"],
                extra: settings.merging([
                    "PUSHIZO_WORKER_ID": name, "PUSHIZO_POLL_INTERVAL": "5", "PUSHIZO_MAINTENANCE_INTERVAL": "10",
                    "PUSHIZO_LOG_LEVEL": "warning",
                ]) { _, new in new })
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            try process.run()
            workers.append((process, log))
        }
        defer { for worker in workers where worker.process.isRunning { worker.process.terminate() } }

        // Both LISTEN sessions are on the direct route (hang guard, not a timing assertion).
        try await waitUntil("both workers LISTEN on direct sessions", limit: 240) {
            try await Self.count(
                directURL,
                """
                SELECT count(*) AS n FROM pg_stat_activity
                WHERE datname = $1 AND application_name = 'pushizo-worker-listen' AND query LIKE 'LISTEN %'
                """, database) == 2
        }
        try await onThread {
            let seed = try Seed(directURL)
            _ = try seed.connection.query(
                "INSERT INTO notifications (app_id, message, target) SELECT id, $1::jsonb, '{\"all\": true}'::jsonb FROM apps",
                [#"{"contents": {"en": "everyone"}}"#])
            for id in smallTargets {
                _ = try seed.connection.query(
                    "INSERT INTO notifications (app_id, message, target) SELECT id, $1::jsonb, $2::jsonb FROM apps",
                    [#"{"contents": {"en": "one"}}"#, #"{"include_subscription_ids": ["\#(id)"]}"#])
            }
        }
        let total = broadcastDevices + smallNotifications
        try await waitUntil("every delivery is sent", limit: 400) {
            try await Self.count(directURL, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") >= total
        }
        try await waitUntil("the maintenance deleted the expired provider token", limit: 240) {
            try await Self.count(directURL, "SELECT count(*) AS n FROM provider_tokens WHERE fingerprint = 'expired-by-test'") == 0
        }
        // `maintain` through the pooler too, beside the workers' schedules.
        let maintained = try await Self.runToExit(
            emulator.workerProcess(databaseURL: pooledURL, arguments: ["maintain"], extra: ["PUSHIZO_DATABASE_POOLER": "transaction"]))
        #expect(maintained.status == 0, "\(maintained.output)")

        for worker in workers { worker.process.terminate() }
        for worker in workers {
            let process = worker.process
            try await onThread { process.waitUntilExit() }
            #expect(process.terminationStatus == 0)
        }

        let accepted = emulator.apns.acceptedNotifications
        #expect(accepted.count == total)
        #expect(Set(accepted.map(\.apnsID)).count == total)
        let events = try await onThread {
            try PostgresConnection(connectionString: directURL).query(
                """
                SELECT count(*) AS sent, count(DISTINCT (notification_id, subscription_id)) AS distinct_sent,
                       (SELECT count(*) FROM delivery_events WHERE event <> 'sent') AS other,
                       (SELECT count(*) FROM deliveries) AS queued
                FROM delivery_events WHERE event = 'sent'
                """)[0]
        }
        #expect(events["sent"] == "\(total)")
        #expect(events["distinct_sent"] == "\(total)")
        #expect(events["other"] == "0")
        #expect(events["queued"] == "0")
        // PgBouncer still holds its server sessions: a session-level advisory lock would still be held by one.
        let advisoryLocks = try await Self.count(
            directURL,
            """
            SELECT count(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
            WHERE l.locktype = 'advisory' AND d.datname = $1
            """, database)
        #expect(advisoryLocks == 0)
        for worker in workers {
            let log = (try? String(contentsOfFile: worker.log, encoding: .utf8)) ?? ""
            for sign in ["prepared statement", "08P01", "42P05", "26000"] {
                #expect(!log.contains(sign), "\(worker.log): \(log.suffix(2_000))")
            }
        }
    }

    /// The `n` column of `sql`'s first row, on a connection of its own; `parameter` is `$1` when given.
    static func count(_ url: String, _ sql: String, _ parameter: String? = nil) async throws -> Int {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
            defer { connection.close() }
            return try connection.query(sql, parameter.map { [$0] } ?? [])[0].decode(Int.self, "n")
        }
    }

    /// Runs `process` to its exit with stdout and stderr in a file; a hang guard terminates it after 120 s.
    static func runToExit(_ process: Process) async throws -> (status: Int32, output: String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-pooler-\(UUID().uuidString).out").path
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let guardTask = Task {
            try await Task.sleep(for: .seconds(120))
            process.terminate()
        }
        try await onThread { process.waitUntilExit() }
        guardTask.cancel()
        try handle.close()
        return (process.terminationStatus, (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
    }
}
