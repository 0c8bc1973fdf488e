import DeliveryCore
import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// One row never stalls claims or completions, and a delivery whose parents were deleted while its push
/// was in flight still gets its outcome written (docs/targets.md, "Poison rows").
@Suite("Poison rows in claims and completions")
struct PoisonRowTests {
    /// One app, `count` subscriptions, one notification to all of them, expanded.
    static func queue(_ seed: Seed, _ count: Int) throws -> [UUID] {
        try seed.app(channelSettings: "{}")
        let subscriptions = try (0..<count).map { _ in try seed.subscription() }
        try seed.notification(target: #"{"all": true}"#)
        while case .expanding? = try ExpansionStore.expandNext(on: seed.connection) {}
        return subscriptions
    }

    static func completion(_ delivery: ClaimedDelivery, _ event: DeliveryEvent = .sent, detail: String = "{}")
        -> DeliveryCompletion
    {
        var completion = DeliveryCompletion(
            source: delivery.source, fence: delivery.fence, event: event, reason: nil, detailJSON: detail,
            nextRunAt: nil)
        completion.claimedAs = DeliveryCompletion.Claim(delivery)
        return completion
    }

    @Test func aRowTheClaimStatementFailsOnIsSetAsideAndTheRestAreClaimed() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                _ = try Self.queue(seed, 9)
                let ids = try seed.connection.query("SELECT id FROM deliveries ORDER BY id").map { try $0.decode(Int64.self, "id") }
                let bad = [ids[2], ids[7]]
                // A claim of these rows fails as a data error in the claim statement would.
                try seed.poisonDeliveries(
                    before: "UPDATE",
                    """
                    IF NEW.fence > OLD.fence AND OLD.id = ANY('{\(bad.map(String.init).joined(separator: ","))}'::bigint[]) THEN
                        RAISE EXCEPTION 'division by zero' USING ERRCODE = '22012';
                    END IF;
                    """)

                // Only the bad rows are due: no evidence that the fault is theirs, so nothing is set aside.
                _ = try seed.connection.query(
                    "UPDATE deliveries SET run_at = now() + interval '1 hour' WHERE id <> ALL($1::bigint[])", [bad])
                #expect(try ClaimStore.claim(on: seed.connection, limit: 20, lease: .seconds(600), workerID: "A").isEmpty)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "0")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "9")

                _ = try seed.connection.query("UPDATE deliveries SET run_at = now()")
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 20, lease: .seconds(600), workerID: "A")
                #expect(Set(claimed.map(\.id)) == Set(ids).subtracting(bad))
                let events = try seed.connection.query(
                    "SELECT event, reason, detail->>'sqlstate' AS state, detail->>'error' AS error FROM delivery_events")
                #expect(events.count == 2)
                for event in events {
                    #expect(event["event"] == "failed")
                    #expect(event["reason"] == "data_exception")
                    #expect(event["state"] == "22012")
                    #expect(event["error"] == "data_exception: SQLSTATE 22012: division by zero")
                }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries WHERE id = ANY($1::bigint[])", [bad])[0]["n"] == "0")
                // Nothing is due now; the bad rows no longer cost anything.
                #expect(try ClaimStore.claim(on: seed.connection, limit: 20, lease: .seconds(600), workerID: "A").isEmpty)
            }
        }
    }

    @Test func anErrorEveryRowMeetsFailsTheClaimAndSetsNothingAside() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                _ = try Self.queue(seed, 5)
                try seed.poisonDeliveries(
                    before: "UPDATE", "RAISE EXCEPTION 'broken everywhere' USING ERRCODE = '22023';")
                #expect(throws: PostgresError.self) {
                    try ClaimStore.claim(on: seed.connection, limit: 3, lease: .seconds(600), workerID: "A")
                }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "0")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries WHERE attempt = 0")[0]["n"] == "5")
            }
        }
    }

    @Test func deliveriesDeletedInFlightStillGetTheirEvent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let s1 = try seed.subscription(), s2 = try seed.subscription(), s3 = try seed.subscription()
                try seed.notification(target: #"{"include_subscription_ids": ["\#(s1)", "\#(s2)"]}"#)
                let n2 = try seed.notification(target: #"{"include_subscription_ids": ["\#(s3)"]}"#)
                let other = try Seed(url)
                try other.app(channelSettings: "{}")
                let s4 = try other.subscription()
                try other.notification(target: #"{"include_subscription_ids": ["\#(s4)"]}"#)
                while try ExpansionStore.expandNext(on: seed.connection) != nil {}
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "A")
                #expect(claimed.count == 4)

                // While the pushes are in flight: a subscription, a notification and a whole app are deleted.
                _ = try seed.connection.query("DELETE FROM subscriptions WHERE id = $1", [s1])
                _ = try seed.connection.query("DELETE FROM notifications WHERE id = $1", [n2])
                _ = try seed.connection.query("DELETE FROM apps WHERE id = $1", [other.appID])
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "1")

                // A NUL in a provider's answer (valid JSON, refused by jsonb) must not fail the batch either.
                let completions = claimed.map { Self.completion($0, detail: #"{"reason": "a\u0000b"}"#) }
                #expect(try CompletionStore.complete(on: seed.connection, completions) == 4)
                let events = try seed.connection.query(
                    """
                    SELECT subscription_id, event, attempt, detail->>'reason' AS reason,
                           coalesce(detail->>'delivery_deleted', 'false') AS deleted
                    FROM delivery_events
                    """)
                #expect(events.count == 4)
                for event in events {
                    let subscription = try event.decode(UUID.self, "subscription_id")
                    #expect(event["event"] == "sent")
                    #expect(event["attempt"] == "1")
                    #expect(event["reason"] == "a\u{FFFD}b")
                    #expect(event["deleted"] == (subscription == s2 ? "false" : "true"), "\(subscription)")
                }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
            }
        }
    }

    @Test func aCompletionThatLostItsLeaseIsStillIgnored() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let subscriptions = try Self.queue(seed, 2)
                // Worker A's leases expire at once; B rescues both deliveries.
                let late = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(0), workerID: "A")
                let rescued = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B")
                #expect(late.count == 2)
                #expect(rescued.count == 2)
                // The row is still there under B's fence: A's completion changes nothing.
                #expect(try CompletionStore.complete(on: seed.connection, late.map { Self.completion($0) }) == 0)
                // B completes both; then one subscription is deleted. A's late completions still change nothing:
                // one row was completed by B (its parents exist), the other's final event is B's.
                #expect(try CompletionStore.complete(on: seed.connection, rescued.map { Self.completion($0) }) == 2)
                _ = try seed.connection.query("DELETE FROM subscriptions WHERE id = $1", [subscriptions[0]])
                #expect(try CompletionStore.complete(on: seed.connection, late.map { Self.completion($0, .failed) }) == 0)
                let events = try seed.connection.query("SELECT event, attempt FROM delivery_events")
                #expect(events.count == 2)
                #expect(events.allSatisfy { $0["event"] == "sent" && $0["attempt"] == "2" })
            }
        }
    }

    /// End to end: the provider accepts a push while its subscription is deleted; the `sent` event is written
    /// (marked `delivery_deleted`) and the worker does not call it a lost lease.
    @Test func aSubscriptionDeletedWhileItsPushIsInFlightKeepsItsSentEvent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 1) { emulator in
                let subscription = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let subscription = try seed.subscription()
                    try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    return subscription
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                let deleted = SendableFlag()
                try await runUntil(runtime, "the in-flight push has its event") {
                    if !deleted.isSet {
                        let leased = try await database.query("SELECT count(*) AS n FROM deliveries WHERE leased_by IS NOT NULL")
                        if leased[0]["n"] == "1" {
                            _ = try await database.query("DELETE FROM subscriptions WHERE id = $1", [subscription])
                            deleted.set()
                        }
                        return false
                    }
                    return try await database.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "1"
                }
                let event = try await database.query(
                    "SELECT event, detail->>'delivery_deleted' AS deleted FROM delivery_events")
                #expect(event.first?["event"] == "sent")
                #expect(event.first?["deleted"] == "true")
                #expect(emulator.apns.acceptedCount == 1)
                await database.shutdown()
            }
        }
    }
}

/// A flag the polling closure of a test sets once.
final class SendableFlag: Sendable {
    private let value = Mutex(false)
    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}
