import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// A producer- or subscriber-written text column far longer than any real value (a 200 MB token, target or
/// campaign id) is never shipped to the worker: the claim reads at most its bound, and the delivery or the
/// notification fails naming the column (docs/security.md).
@Suite("Oversized columns stay in the database")
struct OversizedColumnTests {
    @Test func aClaimNamesTheOversizedColumnsAndShipsNoneOfTheirText() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let subscriptions = try PoisonRowTests.queue(seed, 3)
                let token = try #require(ClaimedColumnBounds.all.first { $0.column == "subscriptions.token" })
                let language = try #require(ClaimedColumnBounds.all.first { $0.column == "subscriptions.language" })
                // One byte over each bound: the first subscription's token, the second's language.
                _ = try seed.connection.query(
                    "UPDATE subscriptions SET token = repeat('a', $2) WHERE id = $1",
                    [subscriptions[0], token.maximumBytes + 1])
                _ = try seed.connection.query(
                    "UPDATE subscriptions SET language = repeat('e', $2) WHERE id = $1",
                    [subscriptions[1], language.maximumBytes + 1])
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "A")
                let bySubscription = Dictionary(uniqueKeysWithValues: claimed.map { ($0.subscriptionID, $0) })
                let first = try #require(bySubscription[subscriptions[0]])
                #expect(first.oversizedColumns == ["subscriptions.token"])
                #expect(first.token.isEmpty)
                let second = try #require(bySubscription[subscriptions[1]])
                #expect(second.oversizedColumns == ["subscriptions.language"])
                #expect(second.language == nil)
                // A row within every bound is read as it is.
                let third = try #require(bySubscription[subscriptions[2]])
                #expect(third.oversizedColumns.isEmpty && !third.token.isEmpty)

                let step = DeliveryDecision(first.decisionFacts(maxAttempts: 10, quietHoursSpread: 0), now: Date()).next()
                guard case .complete(.failed(let reason, let detail, let invalidate), _) = step else {
                    Issue.record("expected a failure, got \(step)")
                    return
                }
                #expect(reason == DeliveryReason.oversizedColumn && !invalidate)
                #expect(detail["columns"] == ["subscriptions.token"])
            }
        }
    }

    @Test func aTargetLargerThanTheBoundFailsItsNotificationUnread() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.subscription()
                let notification = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query(
                    "UPDATE notifications SET target = jsonb_build_object('include_external_ids', jsonb_build_array(repeat('x', $2))) WHERE id = $1",
                    [notification, ExpansionStore.maximumTargetBytes])
                guard case .failed(let id, let reason)? = try ExpansionStore.expandNext(on: seed.connection) else {
                    Issue.record("the oversized target was not refused")
                    return
                }
                #expect(id == notification)
                #expect(reason.hasPrefix("invalid_target: target is larger than"))
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
            }
        }
    }
}
