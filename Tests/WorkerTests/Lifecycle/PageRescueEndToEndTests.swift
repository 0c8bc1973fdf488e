import Foundation
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// Pages of a broadcast leased whole at expansion (docs/performance.md, "Pages leased at expansion") through the
/// real executable and the APNs emulator: a page whose worker never sends it, or is killed with SIGKILL while its
/// sends are in flight, is rescued by another worker, which sends each device once and writes one terminal event
/// per device; no page and no queue row is left.
@Suite("Page rescue end to end", .serialized)
struct PageRescueEndToEndTests {
    static let count = 20

    /// Pages and queue rows left.
    static func left(_ database: PostgresClient) async throws -> Int {
        try await database.query("SELECT (SELECT count(*) FROM delivery_pages) + (SELECT count(*) FROM deliveries) AS n")[0]
            .decode(Int.self, "n")
    }

    /// Devices with a terminal event, and those with exactly one, which is `sent`.
    static func terminalEvents(_ database: PostgresClient) async throws -> (devices: Int, sentOnce: Int) {
        let row = try await database.query(
            """
            SELECT count(*) AS devices, count(*) FILTER (WHERE n = 1 AND sent = 1) AS once
            FROM (SELECT subscription_id, count(*) AS n, count(*) FILTER (WHERE event = 'sent') AS sent
                  FROM delivery_events WHERE event IN ('sent', 'failed', 'skipped') GROUP BY 1) e
            """)[0]
        return (try row.decode(Int.self, "devices"), try row.decode(Int.self, "once"))
    }

    /// A page a chunk leased to a worker that then never sent it: a new worker rescues it once its lease ends and
    /// sends each delivery once, as its second attempt, with no claim of a `deliveries` row.
    @Test func aPageLeasedToAWorkerThatNeverSendsIsRescuedAndSentByAnother() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let outcome = try await LeasedAtInsertEndToEndTests.leaseToAWorkerThatNeverSends(
                    url, emulator, leasesPages: true)
                #expect(outcome.sentByAttempt == [2: 200])
                #expect(outcome.subscriptions == 200)
                #expect(outcome.claims == 0)
                #expect(emulator.apns.acceptedCount == 200)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                #expect(try await Self.left(database) == 0)
                #expect(try await Self.terminalEvents(database) == (200, 200))
                await database.shutdown()
            }
        }
    }

    /// A broadcast's page leased by a worker killed with SIGKILL while its sends were in flight: another worker
    /// rescues the page, counts its deliveries as rescued and sends each device once.
    @Test func aPageOfAWorkerKilledMidSendIsRescuedAndEachDeviceGetsOneTerminalEvent() async throws {
        try await Self.killMidSendAndRescue(cancelFirst: false)
    }

    /// The same page, its notification canceled after the kill: the rescuer sends nothing and skips each device
    /// as `canceled`, one terminal event each.
    @Test func aCanceledNotificationsPageIsRescuedAsSkippedCanceled() async throws {
        try await Self.killMidSendAndRescue(cancelFirst: true)
    }

    /// A page whose rescue cannot read it (a data error in its audience: a user's tag that the tag comparison
    /// fails on) stays leased to the worker that took it until that lease runs out, tried once, not before every
    /// claim; the same claims go on sending another app's queued deliveries.
    @Test func aPageWhoseRescueMeetsADataErrorWaitsItsLeaseAndTheClaimGoesOnForOtherApps() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let others = try await onThread {
                    // App A: a broadcast to users tagged `score`, its page leased to a worker that died.
                    let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: 10)
                    let user = try seed.user("poisoned")
                    _ = try seed.connection.query(#"UPDATE users SET tags = '{"score": 5}' WHERE id = $1"#, [user])
                    _ = try seed.connection.query("UPDATE subscriptions SET user_id = $1 WHERE app_id = $2", [user, seed.appID])
                    try seed.notification(
                        target: #"{"filters": [{"field": "tag", "key": "score", "relation": ">", "value": 1}]}"#)
                    var suspects = ExpansionSuspects()
                    var leased = LeasedRows.none
                    _ = try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects,
                        lease: ExpansionStore.InsertLease(workerID: "killed-worker", lease: .seconds(1), leasesPages: true) {
                            _, upTo in upTo
                        },
                        leased: &leased)
                    #expect(leased.count == 10)
                    // Then the tag holds what the comparison fails on, as a tag function that is not total would.
                    _ = try seed.connection.query(#"UPDATE users SET tags = '{"score": "five"}' WHERE id = $1"#, [user])
                    _ = try seed.connection.query(
                        """
                        CREATE OR REPLACE FUNCTION pushizo_tag_number(p jsonb) RETURNS numeric
                        LANGUAGE sql IMMUTABLE AS $$ SELECT (p #>> '{}')::numeric $$
                        """)
                    _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                    // App B: five deliveries queued as rows, due now.
                    let other = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: 5)
                    let notification = try other.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, status, targeted_count, expanded_at)
                        VALUES ($1, '{"contents": {"en": "hi"}}', '{"all": true}', 'expanded', 5, now()) RETURNING id
                        """, [other.appID])[0].decode(UUID.self, "id")
                    _ = try other.connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id)
                        SELECT $1, id, app_id FROM subscriptions WHERE app_id = $2
                        """, [notification, other.appID])
                    return other.appID
                }
                let worker = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"])
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(60)  // a hang guard, not a timing assertion
                func sent() async throws -> Int {
                    try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent' AND app_id = $1", [others]
                    )[0].decode(Int.self, "n")
                }
                while try await sent() < 5, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
                kill(worker.process.processIdentifier, SIGTERM)
                worker.process.waitUntilExit()
                worker.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(try await sent() == 5)
                // The page is the rescuer's now, under its own lease, not yet run out; nothing of it was sent.
                let page = try await database.query(
                    "SELECT leased_by, fence, rescued_from, lease_until > now() AS leased FROM delivery_pages")
                #expect(page.count == 1)
                #expect(try page.first?.decode(String.self, "leased_by") != "killed-worker")
                #expect(try page.first?.decode(Int64.self, "fence") == 2)
                #expect(try page.first?.decode(String.self, "rescued_from") == "killed-worker")
                #expect(try page.first?.decode(Bool.self, "leased") == true)
                #expect(
                    try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE app_id <> $1", [others])[0].decode(Int.self, "n") == 0)
                // Tried once in the run (its lease lasts longer), whatever the number of claims.
                #expect(worker.output.lines.filter { $0.contains("could not be read") }.count == 1)
                await database.shutdown()
            }
        }
    }

    /// A worker whose provider holds every answer leases the broadcast's page and is killed with SIGKILL; with
    /// `cancelFirst` the notification is then canceled (`pushizo-worker cancel`'s statement); a second worker
    /// rescues the page.
    static func killMidSendAndRescue(cancelFirst: Bool) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            // The first worker's provider holds every answer for a minute, so its sends stay in flight until it is
            // killed; the second worker's answers at once.
            try await EmulatorHarness.with(latency: 60) { slow in
                try await EmulatorHarness.with { emulator in
                    let (appID, notificationID) = try await onThread {
                        let seed = try Seed(url)
                        try seed.app(channelSettings: slow.channelSettings, endpoint: slow.endpoint)
                        for _ in 0..<Self.count { try seed.subscription() }
                        let id = try seed.notification(message: #"{"contents": {"en": "paged"}}"#, target: #"{"all": true}"#)
                        return (seed.appID, id)
                    }
                    let doomed = slow.workerProcess(
                        databaseURL: url,
                        extra: [
                            "PUSHIZO_WORKER_ID": "w-doomed", "PUSHIZO_LEASE_SECONDS": "600", "PUSHIZO_REQUEST_TIMEOUT": "120",
                        ])
                    doomed.standardError = FileHandle.nullDevice
                    try doomed.run()
                    defer { if doomed.isRunning { kill(doomed.processIdentifier, SIGKILL) } }
                    let database = PostgresClient(connectionString: url, maximumConnections: 1)
                    let deadline = ContinuousClock.now + .seconds(60)  // a hang guard, not a timing assertion
                    // Expanded into a page leased to the doomed worker, whose requests the slow provider holds.
                    var expanded = false
                    while !expanded && ContinuousClock.now < deadline {
                        expanded = try await database.query(
                            """
                            SELECT (SELECT status FROM notifications WHERE id = $1) = 'expanded'
                                   AND EXISTS (SELECT FROM delivery_pages WHERE leased_by = 'w-doomed') AS expanded
                            """, [notificationID]
                        )[0].decode(Bool.self, "expanded")
                        if !expanded { try await Task.sleep(for: .milliseconds(50)) }
                    }
                    #expect(expanded)
                    kill(doomed.processIdentifier, SIGKILL)
                    try await onThread { doomed.waitUntilExit() }
                    #expect(try await database.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n") == 0)
                    // The leases' end brought forward instead of waited for, and the channel pointed at a provider
                    // that answers.
                    _ = try await database.query("UPDATE delivery_pages SET lease_until = now() WHERE leased_by = 'w-doomed'")
                    if cancelFirst {
                        let outcome = try await onThread {
                            try OperatorCancel.cancel(
                                notification: notificationID, note: nil,
                                on: try PostgresConnection(connectionString: url, applicationName: "pushizo-test"))
                        }
                        #expect(outcome.detail["in_flight"] == .int(Int64(Self.count)))
                    }
                    _ = try await database.query(
                        "UPDATE app_channels SET endpoint = $1, settings = $2::jsonb WHERE app_id = $3",
                        [emulator.endpoint, emulator.channelSettings, appID])

                    let port = try freePort()
                    let rescuer = emulator.workerProcess(
                        databaseURL: url,
                        extra: ["PUSHIZO_WORKER_ID": "w-rescuer", "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                    rescuer.standardError = FileHandle.nullDevice
                    try rescuer.run()
                    defer { if rescuer.isRunning { kill(rescuer.processIdentifier, SIGKILL) } }
                    var left = 1
                    while left > 0 && ContinuousClock.now < deadline + .seconds(60) {
                        left = try await Self.left(database)
                        if left > 0 { try await Task.sleep(for: .milliseconds(50)) }
                    }
                    #expect(left == 0)
                    let text = try await scrape("http://127.0.0.1:\(port)/metrics")
                    #expect(sample(text, #"pushizo_deliveries_rescued_total{provider="apns"}"#) == Double(Self.count), "\(text)")
                    rescuer.terminate()
                    try await onThread { rescuer.waitUntilExit() }
                    #expect(rescuer.terminationStatus == 0)
                    if cancelFirst {
                        #expect(emulator.apns.acceptedCount == 0)
                        let skipped = try await database.query(
                            """
                            SELECT count(DISTINCT subscription_id) AS n FROM delivery_events
                            WHERE event = 'skipped' AND reason = 'canceled'
                            """)[0].decode(Int.self, "n")
                        #expect(skipped == Self.count)
                        #expect(try await Self.terminalEvents(database).devices == Self.count)
                        let events = try await database.query(
                            "SELECT count(*) AS n FROM delivery_events WHERE event IN ('sent', 'failed', 'skipped')"
                        )[0].decode(Int.self, "n")
                        #expect(events == Self.count)
                    } else {
                        #expect(emulator.apns.acceptedCount == Self.count)
                        #expect(try await Self.terminalEvents(database) == (Self.count, Self.count))
                    }
                    await database.shutdown()
                }
            }
        }
    }
}
