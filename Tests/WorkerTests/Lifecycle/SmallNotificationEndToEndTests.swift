import Foundation
import Postgres
import Testing

/// One-device notifications through the real executable and the APNs emulator: bulk expansion delivers each
/// exactly once, in fewer transactions than notifications, and survives `kill -9` in the middle of a pass.
@Suite("Small notifications end to end", .serialized)
struct SmallNotificationEndToEndTests {
    static let count = 300

    /// An app on the emulator with `count` iOS subscriptions, inserted in one statement.
    static func seedSubscriptions(_ url: String, _ emulator: EmulatorHarness, count: Int) throws -> Seed {
        let seed = try Seed(url)
        try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
        _ = try seed.connection.query(
            """
            INSERT INTO subscriptions (app_id, platform, token, apns_environment, language)
            SELECT $1, 'ios', 'a0a0' || md5(n::text) || substr(md5('x' || n), 1, 28), 'production', 'en'
            FROM generate_series(1, $2) n
            """, [seed.appID, count])
        return seed
    }

    /// `count` one-device notifications, each to its own subscription, inserted in one statement.
    static func seedOneDeviceNotifications(_ url: String, _ emulator: EmulatorHarness) async throws {
        try await onThread {
            let seed = try seedSubscriptions(url, emulator, count: count)
            _ = try seed.connection.query(
                """
                INSERT INTO notifications (app_id, message, target)
                SELECT $1, '{"contents": {"en": "Your order shipped"}}',
                       jsonb_build_object('include_subscription_ids', jsonb_build_array(id))
                FROM subscriptions WHERE app_id = $1
                """, [seed.appID])
        }
    }

    /// Every notification expanded into exactly one delivery, and exactly one `sent` event per notification.
    static func expectEachSentOnce(_ url: String) async throws {
        let database = PostgresClient(connectionString: url, maximumConnections: 1)
        let row = try await database.query(
            """
            SELECT (SELECT count(*) FROM notifications WHERE status = 'expanded' AND targeted_count = 1) AS expanded,
                   (SELECT count(*) FROM delivery_events WHERE event = 'sent') AS sent,
                   (SELECT count(DISTINCT notification_id) FROM delivery_events WHERE event = 'sent') AS notified,
                   (SELECT count(*) FROM deliveries) AS left
            """)[0]
        await database.shutdown()
        #expect(row["expanded"] == "\(count)")
        #expect(row["sent"] == "\(count)")
        #expect(row["notified"] == "\(count)")
        #expect(row["left"] == "0")
    }

    /// A worker process; its stderr is collected.
    static func startWorker(_ url: String, _ emulator: EmulatorHarness, environment extra: [String: String]) throws
        -> (process: Process, output: ExpansionStallTests.Output, pipe: Pipe)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["run", "--poll-interval", "0.05"]
        var environment = [
            "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
            "PUSHIZO_EXIT_WHEN_DRAINED": "true", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        let pipe = Pipe()
        // Stderr is "the journal" (systemd.exec(5), JOURNAL_STREAM): text lines carry their <N> priority.
        var stream = stat()
        fstat(pipe.fileHandleForWriting.fileDescriptor, &stream)
        environment["JOURNAL_STREAM"] = "\(stream.st_dev):\(stream.st_ino)"
        environment.merge(extra) { _, new in new }
        process.environment = environment
        let output = ExpansionStallTests.Output()
        pipe.fileHandleForReading.readabilityHandler = { output.append($0.availableData) }
        process.standardError = pipe
        try process.run()
        return (process, output, pipe)
    }

    static func waitUntilExit(_ process: Process, limit: Double = 60) async throws {
        let deadline = ContinuousClock.now + .seconds(limit)  // a hang guard, not a timing assertion
        while process.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning {
            Issue.record("the worker did not drain the queue")
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
    }

    @Test func manyOneDeviceNotificationsAreEachDeliveredOnceInFewerTransactions() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await Self.seedOneDeviceNotifications(url, emulator)
                let worker = try Self.startWorker(url, emulator, environment: ["PUSHIZO_LOG_LEVEL": "debug"])
                try await Self.waitUntilExit(worker.process)
                worker.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(worker.process.terminationStatus == 0)
                try await Self.expectEachSentOnce(url)
                #expect(emulator.apns.acceptedCount == Self.count)
                // The bulk passes' own count: notifications per pass and transactions, from the debug lines.
                var notifications = 0
                var transactions = 0
                for line in worker.output.lines where line.contains("small notifications expanded") {
                    func field(_ name: String) -> Int {
                        guard let range = line.range(of: " \(name)=") else { return 0 }
                        return Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0
                    }
                    notifications += field("expanded")
                    transactions += field("transactions")
                }
                #expect(notifications == Self.count)
                #expect(transactions >= 1)
                #expect(transactions < Self.count)
                // Nothing per notification at the default level: the same lines are debug lines.
                #expect(!worker.output.lines.contains { $0.contains("notification expanded") && !$0.contains("<7>") })
            }
        }
    }

    /// `kill -9` while a bulk pass is inside its transaction (its insert waits for a lock the test holds):
    /// PostgreSQL rolls the pass back; a new worker expands and sends every notification exactly once.
    @Test func aWorkerKilledInTheMiddleOfABulkPassLosesAndDuplicatesNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await Self.seedOneDeviceNotifications(url, emulator)
                let blocker = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-blocker")
                _ = try blocker.query("BEGIN")
                _ = try blocker.query("LOCK TABLE deliveries IN SHARE MODE")
                let first = try Self.startWorker(url, emulator, environment: ["PUSHIZO_ROLES": "expand", "PUSHIZO_LOG_LEVEL": "warning"])
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(30)  // a hang guard
                var blocked = false
                while !blocked && ContinuousClock.now < deadline {
                    // The bulk statement by its first line: pg_stat_activity keeps only its first 1 KiB of text. In
                    // this test's database: the suite's other tests run workers on the same cluster at once.
                    blocked = try await database.query(
                        """
                        SELECT count(*) AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH n AS (%'
                        """)[0]["n"] == "1"
                    if !blocked { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(blocked)
                // Mid-pass: the notifications are locked by the worker's transaction.
                let locked = try await database.query(
                    "SELECT count(*) AS n FROM (SELECT id FROM notifications WHERE status = 'pending' FOR UPDATE SKIP LOCKED) AS free"
                )[0]["n"]
                #expect(locked == "0")
                kill(first.process.processIdentifier, SIGKILL)
                first.process.waitUntilExit()
                first.pipe.fileHandleForReading.readabilityHandler = nil
                _ = try blocker.query("COMMIT")
                // Rolled back: nothing expanded, nothing inserted.
                let after = try await database.query(
                    """
                    SELECT (SELECT count(*) FROM notifications WHERE status = 'pending') AS pending,
                           (SELECT count(*) FROM deliveries) AS deliveries
                    """)[0]
                #expect(after["pending"] == "\(Self.count)")
                #expect(after["deliveries"] == "0")
                await database.shutdown()
                let second = try Self.startWorker(url, emulator, environment: [:])
                try await Self.waitUntilExit(second.process)
                second.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(second.process.terminationStatus == 0)
                try await Self.expectEachSentOnce(url)
                #expect(emulator.apns.acceptedCount == Self.count)
            }
        }
    }
}
