import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// One tenant's broadcast or slow push services against another tenant's one-device pushes, with the real
/// `pushizo-worker run`, PostgreSQL and emulators. Nothing here waits on a wall-clock budget: each test counts
/// what happened before what (the other app's pushes against the tenant's deliveries), and the emulators' own
/// latencies are far longer than anything the worker needs, so a loaded machine only makes the runs slower.
@Suite("Tenants isolated from each other", .serialized)
struct TenantIsolationEndToEndTests {
    /// Polls until `condition` holds (a hang guard of `limit` seconds, not a timing assertion).
    static func until(_ what: String, limit: Double = 120, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(limit)
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("timed out waiting until \(what)")
    }

    static func count(_ database: PostgresClient, _ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> Int {
        try await database.query(sql, parameters)[0].decode(Int.self, "n")
    }

    /// Inserts a notification of `app` to `target`; returns its id.
    static func notify(_ database: PostgresClient, _ app: UUID, target: String) async throws -> UUID {
        try await database.query(
            "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{\"contents\": {\"en\": \"hi\"}}', $2::jsonb) RETURNING id",
            [app, target])[0].decode(UUID.self, "id")
    }

    /// Another app's notification to its only device, by the same target form and priority as the broadcast
    /// (`all`), goes out while the broadcast drains, not after it: chunks and claims serve apps in turns, not first
    /// in, first out, and an app has room of its own beside a broadcast paced by its sends. The worker's slots are few (64) and the emulator answers after 50 ms, so the broadcast drains at
    /// about a thousand a second however fast the machine is: what the test compares is how much of it is left
    /// when the other app's push is sent.
    @Test func anotherAppsPushOvertakesABroadcastQueuedBeforeIt() async throws {
        let broadcastSize = 20_000
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0.05) { emulator in
                let (tenant, other) = try await onThread {
                    let tenant = try Seed(url)
                    try tenant.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try tenant.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token, apns_environment, language)
                        SELECT $1, 'ios', 'a0a0' || md5(n::text) || substr(md5('t' || n), 1, 28), 'production', 'en'
                        FROM generate_series(1, $2) n
                        """, [tenant.appID, broadcastSize])
                    let other = try Seed(url)
                    try other.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    try other.subscription()
                    try tenant.notification(target: #"{"all": true}"#)
                    return (tenant.appID, other.appID)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let worker = emulator.workerProcess(
                    databaseURL: url, extra: ["PUSHIZO_CONCURRENCY": "64", "PUSHIZO_CLAIM_BATCH": "32"])
                try worker.run()
                defer { if worker.isRunning { worker.terminate() } }
                // What is left of the broadcast: queued, or not yet expanded (its expansion is paced by the sends).
                let sentSQL = "SELECT count(*) AS n FROM delivery_events WHERE app_id = $1 AND event = 'sent'"
                // The broadcast draining.
                try await Self.until("the broadcast drains") {
                    try await Self.count(database, sentSQL, [tenant]) > 0
                }
                var leftWhenSent: [Int] = []
                for _ in 0..<3 {
                    let probe = try await Self.notify(database, other, target: #"{"all": true}"#)
                    try await Self.until("the other app's push is sent") {
                        try await Self.count(
                            database, "SELECT count(*) AS n FROM delivery_events WHERE notification_id = $1 AND event = 'sent'",
                            [probe]) == 1
                    }
                    leftWhenSent.append(broadcastSize - (try await Self.count(database, sentSQL, [tenant])))
                }
                worker.terminate()
                try await onThread { worker.waitUntilExit() }
                await database.shutdown()
                // First in, first out, each probe would wait for the whole broadcast before it: what is left when
                // it is sent would be at most what the worker holds (its 64 slots). In turns, the broadcast is far
                // from drained.
                #expect(leftWhenSent.allSatisfy { $0 >= 10_000 }, "broadcast deliveries left when the other app's were sent: \(leftWhenSent)")
            }
        }
    }

    /// The slow tenant's Web Push subscribers at two push services that hold every answer for a minute, with
    /// `PUSHIZO_CONCURRENCY=512` (so their 256 streams each could hold every slot) and requests given up after
    /// 55 s: another app's one-device pushes are sent before any of the slow tenant's has an outcome, because an
    /// app holds at most its share of the slots.
    @Test func aTenantsSlowPushServicesLeaveSlotsForOtherApps() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 60) { slow in
                try await EmulatorHarness.with { fast in
                    let caFile = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-cas-\(UUID().uuidString).pem").path
                    defer { try? FileManager.default.removeItem(atPath: caFile) }
                    try (String(contentsOfFile: slow.caFile, encoding: .utf8) + String(contentsOfFile: fast.caFile, encoding: .utf8))
                        .write(toFile: caFile, atomically: true, encoding: .utf8)
                    let (tenant, other, devices) = try await onThread { () -> (UUID, UUID, [UUID]) in
                        let tenant = try Seed(url)
                        try tenant.app()
                        try tenant.webPushChannel(settings: slow.webPushChannelSettings)
                        // 600 subscribers at each of two origins of the slow push service (the same server by
                        // name and by address). Their keys are one subscription's: nothing is answered in the run.
                        let keys = try slow.webSubscription("slow")
                        _ = try tenant.connection.query(
                            """
                            INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth, language)
                            SELECT $1, 'web', o.origin || '/wpush/slow-' || n, $2, $3, 'en'
                            FROM generate_series(1, 600) n, unnest($4::text[]) AS o(origin)
                            """,
                            [tenant.appID, keys.p256dh, keys.auth,
                             ["https://localhost:\(slow.port)", "https://127.0.0.1:\(slow.port)"]])
                        let other = try Seed(url)
                        try other.app(channelSettings: fast.channelSettings, endpoint: fast.endpoint)
                        let devices = try (0..<5).map { _ in try other.subscription() }
                        try tenant.notification(target: #"{"all": true}"#)
                        return (tenant.appID, other.appID, devices)
                    }
                    let database = PostgresClient(connectionString: url, maximumConnections: 1)
                    let worker = slow.workerProcess(
                        databaseURL: url,
                        extra: [
                            "PUSHIZO_CA_FILE": caFile, "PUSHIZO_CONCURRENCY": "512", "PUSHIZO_SHUTDOWN_TIMEOUT": "1",
                            "PUSHIZO_REQUEST_TIMEOUT": "55",
                        ])
                    try worker.run()
                    defer { if worker.isRunning { worker.terminate() } }
                    // The slow tenant's deliveries hold slots (their requests wait for the push service's answers).
                    try await Self.until("the slow tenant's deliveries hold slots") {
                        try await Self.count(
                            database,
                            """
                            SELECT (SELECT count(*) FROM deliveries WHERE app_id = $1 AND leased_by IS NOT NULL)
                                   + (SELECT coalesce(sum(deliveries), 0) FROM delivery_pages WHERE app_id = $1) AS n
                            """, [tenant]) >= 400
                    }
                    var probes: [UUID] = []
                    for device in devices {
                        probes.append(
                            try await Self.notify(database, other, target: #"{"include_subscription_ids": ["\#(device)"]}"#))
                    }
                    try await Self.until("the other app's pushes are sent") {
                        fast.apns.acceptedCount == probes.count
                    }
                    // Any outcome of the tenant's: an answer, or a request given up at its timeout (55 s).
                    let tenantSettled = try await Self.count(
                        database, "SELECT count(*) AS n FROM delivery_events WHERE app_id = $1", [tenant])
                    worker.terminate()
                    try await onThread { worker.waitUntilExit() }
                    await database.shutdown()
                    #expect(fast.apns.acceptedCount == probes.count)
                    // Sent while every request of the slow tenant still waited for its answer.
                    #expect(tenantSettled == 0)
                }
            }
        }
    }

    /// A push service that holds every answer for a minute, with 3,000 subscribers: the deliveries withdrawn
    /// unsent after waiting for a stream come back spread out at the push service's pace, not all together a
    /// second or two later (which cost tens of thousands of claims for a few hundred sends).
    @Test func deliveriesWithdrawnFromABusyPushServiceComeBackAtItsPace() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 60) { slow in
                try await onThread {
                    let tenant = try Seed(url)
                    try tenant.app()
                    try tenant.webPushChannel(settings: slow.webPushChannelSettings)
                    let keys = try slow.webSubscription("slow")
                    _ = try tenant.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth, language)
                        SELECT $1, 'web', $2 || '/wpush/slow-' || n, $3, $4, 'en' FROM generate_series(1, 3000) n
                        """, [tenant.appID, slow.endpoint, keys.p256dh, keys.auth])
                    try tenant.notification(target: #"{"all": true}"#)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let worker = slow.workerProcess(databaseURL: url, extra: ["PUSHIZO_SHUTDOWN_TIMEOUT": "1"])
                try worker.run()
                defer { if worker.isRunning { worker.terminate() } }
                let withdrawnSQL = "SELECT count(*) AS n FROM deliveries WHERE last_error = 'origin_busy' AND leased_by IS NULL"
                try await Self.until("requests are withdrawn from the busy push service") {
                    try await Self.count(database, withdrawnSQL) >= 1_000
                }
                worker.terminate()
                try await onThread { worker.waitUntilExit() }
                // The push service answered nothing: the withdrawn deliveries come back at the pace it could take
                // them with every stream busy (256 streams over the 30 s request timeout, about 8.5 a second), at
                // most ten minutes ahead; never hundreds in the same second.
                let busiestSecond = try await Self.count(
                        database,
                        """
                        SELECT coalesce(max(n), 0) AS n FROM (
                            SELECT count(*) AS n FROM deliveries WHERE last_error = 'origin_busy' AND leased_by IS NULL
                            GROUP BY date_trunc('second', run_at)) s
                        """)
                let spread = try await database.query(
                    """
                    SELECT extract(epoch FROM max(run_at) - min(run_at))::float8 AS s FROM deliveries
                    WHERE last_error = 'origin_busy' AND leased_by IS NULL
                    """)[0].decode(Double.self, "s")
                await database.shutdown()
                #expect(busiestSecond <= 20, "withdrawn deliveries due in the same second: \(busiestSecond)")
                #expect(spread >= 100, "withdrawn deliveries spread over \(spread) s")
            }
        }
    }
}
