import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

@Suite("CompletionStore against PostgreSQL")
struct CompletionStoreTests {
    @Test func completionsAreFencedAndWriteEvents() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let subscription = try seed.subscription()
                try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)

                // Worker A claims with a lease that expires at once; worker B rescues the delivery.
                let first = try #require(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(0), workerID: "A").first)
                #expect(first.attempt == 1)
                #expect(first.channelProvider == "apns")
                let rescued = try #require(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").first)
                #expect(rescued.id == first.id)
                #expect(rescued.attempt == 2)
                #expect(rescued.apnsID == first.apnsID)
                #expect(rescued.fence > first.fence)

                // A's late completion changes nothing; B's settles the delivery.
                let late = DeliveryCompletion(
                    source: first.source, fence: first.fence, event: .sent, reason: nil, detailJSON: "{}", nextRunAt: nil)
                #expect(try CompletionStore.complete(on: seed.connection, [late]) == 0)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "0")

                let retry = DeliveryCompletion(
                    source: rescued.source, fence: rescued.fence, event: .retrying, reason: .serviceUnavailable,
                    detailJSON: #"{"next_attempt_at": "x"}"#, nextRunAt: Date().addingTimeInterval(3600))
                #expect(try CompletionStore.complete(on: seed.connection, [retry]) == 1)
                #expect(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").isEmpty)
                let event = try seed.connection.query(
                    "SELECT event, reason, attempt, detail->>'next_attempt_at' AS next FROM delivery_events")[0]
                #expect(event["event"] == "retrying")
                #expect(event["reason"] == "service_unavailable")
                #expect(event["attempt"] == "2")
                #expect(event["next"] == "x")

                // Made due by hand: its app's turn is brought forward by the repair the worker runs.
                _ = try seed.connection.query("UPDATE deliveries SET run_at = now()")
                #expect(try ClaimStore.repairClaimTurns(on: seed.connection) == 1)
                let third = try #require(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "B").first)
                var failed = DeliveryCompletion(
                    source: third.source, fence: third.fence, event: .failed, reason: .unregistered,
                    detailJSON: "{}", nextRunAt: nil)
                failed.invalidation = SubscriptionInvalidation(
                    subscriptionID: subscription, reason: .unregistered, tokenUpdatedAt: third.tokenUpdatedAt)
                #expect(try CompletionStore.complete(on: seed.connection, [failed]) == 1)
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
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let claimed = try #require(try ClaimStore.claim(on: seed.connection, limit: 1, lease: .seconds(60), workerID: "A").first)
                // The app registers the token again while the send is in flight.
                _ = try seed.connection.query(
                    "UPDATE subscriptions SET token_updated_at = now() + interval '1 second' WHERE id = $1", [subscription])
                var completion = DeliveryCompletion(
                    source: claimed.source, fence: claimed.fence, event: .failed, reason: .unregistered,
                    detailJSON: "{}", nextRunAt: nil)
                completion.invalidation = SubscriptionInvalidation(
                    subscriptionID: subscription, reason: .unregistered, tokenUpdatedAt: claimed.tokenUpdatedAt)
                _ = try CompletionStore.complete(on: seed.connection, [completion])
                #expect(try seed.connection.query("SELECT status FROM subscriptions")[0]["status"] == "active")
            }
        }
    }
}
