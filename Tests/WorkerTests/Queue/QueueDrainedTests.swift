import Foundation
import Postgres
import Testing

@testable import Worker

/// `PUSHIZO_EXIT_WHEN_DRAINED`: drained means nothing is left to claim without a person. Deliveries an
/// operator's pause holds (the app's, or all while the fleet is paused) do not keep a batch run alive; others do.
@Suite("Drained queue")
struct QueueDrainedTests {
    @Test func anOperatorsPauseHoldsNoWork() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let subscription = try seed.subscription()
                let notification = try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                #expect(try QueueDepthStore.isDrained(on: seed.connection))
                _ = try seed.connection.query(
                    "INSERT INTO deliveries (notification_id, subscription_id, app_id) VALUES ($1, $2, $3)",
                    [notification, subscription, seed.appID])
                #expect(try !QueueDepthStore.isDrained(on: seed.connection))
                _ = try seed.connection.query(
                    "UPDATE apps SET paused_until = 'infinity', paused_reason = 'operator' WHERE id = $1", [seed.appID])
                #expect(try QueueDepthStore.isDrained(on: seed.connection))
                _ = try seed.connection.query("UPDATE apps SET paused_until = NULL, paused_reason = NULL")
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = 'infinity', paused_reason = 'operator'")
                #expect(try QueueDepthStore.isDrained(on: seed.connection))
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = NULL, paused_reason = NULL")
                #expect(try !QueueDepthStore.isDrained(on: seed.connection))
            }
        }
    }
}
