import DeliveryCore
import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

@Suite("QueueStore against PostgreSQL")
struct QueueStoreTests {
    @Test func expandsExternalIDsIdempotentlyAndSkipsInactive() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let alice = try seed.user("alice")
                let bob = try seed.user("bob")
                try seed.subscription(user: alice)
                try seed.subscription(user: alice, platform: "android")
                try seed.subscription(user: bob)
                try seed.subscription(user: bob, status: "unsubscribed")
                try seed.subscription()  // anonymous, not targeted
                let id = try seed.notification(target: #"{"include_external_ids": ["alice", "bob", "nobody"]}"#)

                let result = try QueueStore.expandNext(on: seed.connection)
                #expect(result == .expanded(notificationID: id, created: 3))
                #expect(try QueueStore.expandNext(on: seed.connection) == nil)
                let status = try seed.connection.query(
                    "SELECT status, targeted_count FROM notifications WHERE id = $1", [id])[0]
                #expect(status["status"] == "expanded")
                #expect(status["targeted_count"] == "3")

                // Expanding the same notification again (e.g. after a crash) creates no duplicate.
                _ = try seed.connection.query("UPDATE notifications SET status = 'pending' WHERE id = $1", [id])
                #expect(try QueueStore.expandNext(on: seed.connection) == .expanded(notificationID: id, created: 0))
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "3")
            }
        }
    }

    /// A claim costs its batch, not the tables it touches: with 3,000 subscriptions, 200 notifications and
    /// 3,000 deliveries not yet due in the database, claiming the 4 due deliveries reads 4 rows of
    /// `subscriptions`, 4 of `notifications` and of `deliveries` only those and a few probes for the app's next
    /// claim turn (one per distinct priority), however the statistics stand (none were gathered for subscriptions
    /// and notifications, which made the claim hash the whole subscriptions table; those of the queue made it scan
    /// the whole queue to update the rows it picked).
    @Test func aClaimReadsItsRowsNotTheTables() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 'a0a0' FROM generate_series(1, 3000)",
                    [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{}', '{}', 'expanded' FROM generate_series(1, 200)
                    """, [seed.appID])
                let later = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    SELECT $1, id, app_id, now() + interval '1 day' FROM subscriptions WHERE app_id = $2
                    """, [later, seed.appID])
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [later])
                let listed = try (0..<4).map { _ in try seed.subscription() }
                let id = try seed.notification(
                    target: #"{"include_subscription_ids": [\#(listed.map { "\"\($0)\"" }.joined(separator: ", "))]}"#)
                #expect(try QueueStore.expandNext(on: seed.connection) == .expanded(notificationID: id, created: 4))
                // Statistics of the queue as it stands, and a whole batch asked for: a join planned from them reads
                // the 3,004 rows at once rather than probing 200 times.
                _ = try seed.connection.query("ANALYZE deliveries")
                let plan = try ExplainedPlan(
                    analyzing: QueueStore.claimSQL(picking: .due), [200, 60.0, "explain", [UUID](), [UUID](), [Int]()],
                    on: seed.connection)
                #expect(plan.rowsRead(of: "subscriptions") <= 4, "\(plan.text)")
                #expect(plan.rowsRead(of: "notifications") <= 4, "\(plan.text)")
                #expect(plan.rowsRead(of: "deliveries") <= 20, "\(plan.text)")
            }
        }
    }

    @Test func platformsNarrowSubscriptionIDs() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let ios = try seed.subscription()
                let android = try seed.subscription(platform: "android")
                try seed.notification(
                    target: #"{"include_subscription_ids": ["\#(ios)", "\#(android)"], "platforms": ["android"]}"#)
                _ = try QueueStore.expandNext(on: seed.connection)
                let rows = try seed.connection.query("SELECT subscription_id FROM deliveries")
                #expect(rows.count == 1)
                #expect(try rows[0].decode(UUID.self, "subscription_id") == android)
            }
        }
    }

    @Test func badTargetFailsTheNotificationWithoutDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.subscription()
                let id = try seed.notification(target: #"{"include_subscription_ids": ["not-a-uuid"]}"#)
                let result = try QueueStore.expandNext(on: seed.connection)
                guard case .failed(let failedID, let reason)? = result else {
                    Issue.record("expected failure, got \(String(describing: result))")
                    return
                }
                #expect(failedID == id)
                #expect(reason.contains("include_subscription_ids[0] is not a UUID"))
                let row = try seed.connection.query("SELECT status, status_reason FROM notifications")[0]
                #expect(row["status"] == "failed")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
            }
        }
    }

    @Test func concurrentClaimersNeverShareADelivery() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let total = 1500
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token)
                    SELECT $1, 'ios', md5(n::text) || md5(n::text) FROM generate_series(1, $2) n
                    """, [seed.appID, total])
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target) VALUES ($1, '{}', '{"all": true}');
                    """, [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id)
                    SELECT n.id, s.id, s.app_id FROM subscriptions s CROSS JOIN notifications n
                    """)
            }
            let claims = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        try await onThread {
                            let connection = try PostgresConnection(connectionString: url)
                            var mine: [Int64] = []
                            while true {
                                let batch = try QueueStore.claim(
                                    on: connection, limit: 37, lease: .seconds(600), workerID: "w\(worker)")
                                if batch.isEmpty { return mine }
                                mine += batch.map(\.id)
                            }
                        }
                    }
                }
                var all: [[Int64]] = []
                for try await claimed in group { all.append(claimed) }
                return all
            }
            let flat = claims.flatMap { $0 }
            #expect(flat.count == total)
            #expect(Set(flat).count == total)
        }
    }

    @Test func completionsAreFencedAndWriteEvents() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let subscription = try seed.subscription()
                try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                _ = try QueueStore.expandNext(on: seed.connection)

                // Worker A claims with a lease that expires at once; worker B rescues the delivery.
                let first = try #require(try QueueStore.claim(on: seed.connection, limit: 10, lease: .seconds(0), workerID: "A").first)
                #expect(first.attempt == 1)
                #expect(first.channelProvider == "apns")
                let rescued = try #require(try QueueStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").first)
                #expect(rescued.id == first.id)
                #expect(rescued.attempt == 2)
                #expect(rescued.apnsID == first.apnsID)
                #expect(rescued.fence > first.fence)

                // A's late completion changes nothing; B's settles the delivery.
                let late = DeliveryCompletion(
                    deliveryID: first.id, fence: first.fence, event: .sent, reason: nil, detailJSON: "{}", nextRunAt: nil)
                #expect(try QueueStore.complete(on: seed.connection, [late]) == 0)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "0")

                let retry = DeliveryCompletion(
                    deliveryID: rescued.id, fence: rescued.fence, event: .retrying, reason: .serviceUnavailable,
                    detailJSON: #"{"next_attempt_at": "x"}"#, nextRunAt: Date().addingTimeInterval(3600))
                #expect(try QueueStore.complete(on: seed.connection, [retry]) == 1)
                #expect(try QueueStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").isEmpty)
                let event = try seed.connection.query(
                    "SELECT event, reason, attempt, detail->>'next_attempt_at' AS next FROM delivery_events")[0]
                #expect(event["event"] == "retrying")
                #expect(event["reason"] == "service_unavailable")
                #expect(event["attempt"] == "2")
                #expect(event["next"] == "x")

                // Made due by hand: its app's turn is brought forward by the repair the worker runs.
                _ = try seed.connection.query("UPDATE deliveries SET run_at = now()")
                #expect(try QueueStore.repairClaimTurns(on: seed.connection) == 1)
                let third = try #require(try QueueStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").first)
                var failed = DeliveryCompletion(
                    deliveryID: third.id, fence: third.fence, event: .failed, reason: .unregistered,
                    detailJSON: "{}", nextRunAt: nil)
                failed.invalidation = SubscriptionInvalidation(
                    subscriptionID: subscription, reason: .unregistered, tokenUpdatedAt: third.tokenUpdatedAt)
                #expect(try QueueStore.complete(on: seed.connection, [failed]) == 1)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                let sub = try seed.connection.query("SELECT status, invalid_reason FROM subscriptions")[0]
                #expect(sub["status"] == "invalid")
                #expect(sub["invalid_reason"] == "unregistered")
            }
        }
    }

    @Test func invalidationSparesATokenRegisteredAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                _ = try QueueStore.expandNext(on: seed.connection)
                let claimed = try #require(try QueueStore.claim(on: seed.connection, limit: 1, lease: .seconds(60), workerID: "A").first)
                // The app registers the token again while the send is in flight.
                _ = try seed.connection.query(
                    "UPDATE subscriptions SET token_updated_at = now() + interval '1 second' WHERE id = $1", [subscription])
                var completion = DeliveryCompletion(
                    deliveryID: claimed.id, fence: claimed.fence, event: .failed, reason: .unregistered,
                    detailJSON: "{}", nextRunAt: nil)
                completion.invalidation = SubscriptionInvalidation(
                    subscriptionID: subscription, reason: .unregistered, tokenUpdatedAt: claimed.tokenUpdatedAt)
                _ = try QueueStore.complete(on: seed.connection, [completion])
                #expect(try seed.connection.query("SELECT status FROM subscriptions")[0]["status"] == "active")
            }
        }
    }
}

@Suite("Expand-only workers")
struct ExpandOnlyWorkerTests {
    @Test func anExpandOnlyWorkerCreatesDeliveriesAndSendsNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    for _ in 0..<5 { try seed.subscription() }
                    try seed.notification(target: #"{"all": true}"#)
                }
                try await runUntilDrained(
                    try WorkerRuntime(
                        configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_ROLES": "expand"]),
                        logger: quietLogger))
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let row = try await database.query(
                    "SELECT (SELECT count(*) FROM deliveries WHERE attempt = 0) AS queued, (SELECT count(*) FROM delivery_events) AS events, (SELECT status FROM notifications) AS status")[0]
                await database.shutdown()
                #expect(row["queued"] == "5")
                #expect(row["events"] == "0")
                #expect(row["status"] == "expanded")
                #expect(emulator.apns.acceptedCount == 0)
            }
        }
    }
}
