import Foundation
import Postgres
import Testing
@testable import Worker

/// ``QueueLagStore/lag(on:)`` (the `STATUS=` line's queue lag) against PostgreSQL: the oldest due delivery
/// across every priority, whatever order the priorities come in; deliveries not yet due do not count.
@Suite("Queue lag in PostgreSQL")
struct QueueLagTests {
    @Test func theOldestDueDeliveryOfAnyPriorityIsTheLagAndFutureOnesDoNotCount() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                #expect(try QueueLagStore.lag(on: seed.connection) == 0)
                let notification = try seed.notification(target: #"{"all": true}"#)
                // Priority 10 due 10 s ago, priority 5 due 40 s ago (the oldest, though of the lower priority),
                // priority 11 due an hour from now.
                for (priority, offset) in [(10, "-10 seconds"), (5, "-40 seconds"), (11, "1 hour")] {
                    let subscription = try seed.subscription()
                    _ = try seed.connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id, priority, run_at)
                        VALUES ($1, $2, $3, $4::smallint, now() + $5::interval)
                        """, [notification, subscription, seed.appID, priority, offset])
                }
                let lag = try QueueLagStore.lag(on: seed.connection)
                #expect(lag >= 40 && lag < 100)
                _ = try seed.connection.query("DELETE FROM deliveries WHERE priority = 5")
                let next = try QueueLagStore.lag(on: seed.connection)
                #expect(next >= 10 && next < 40)
            }
        }
    }
}

/// Due rows an operator's pause holds are not claimable: the lag leaves them out (as `status` and the metrics'
/// sample do), and the reading names the fleet's pause for the `STATUS=` line.
@Suite("Queue lag under an operator's pause")
struct QueueLagPauseTests {
    @Test func heldRowsAreNotTheLagAndTheFleetPauseIsRead() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                let subscription = try seed.subscription()
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    VALUES ($1, $2, $3, now() - interval '40 seconds')
                    """, [notification, subscription, seed.appID])
                let unpaused = try QueueLagStore.reading(on: seed.connection)
                #expect(unpaused.seconds >= 40 && unpaused.fleetPausedUntil == nil)

                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = 'infinity', paused_reason = 'operator'")
                #expect(try QueueLagStore.reading(on: seed.connection) == QueueLagReading(seconds: 0, fleetPausedUntil: .distantFuture))

                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = NULL, paused_reason = NULL")
                _ = try seed.connection.query(
                    "UPDATE apps SET paused_until = now() + interval '20 minutes', paused_reason = 'operator' WHERE id = $1",
                    [seed.appID])
                #expect(try QueueLagStore.reading(on: seed.connection) == QueueLagReading(seconds: 0, fleetPausedUntil: nil))
            }
        }
    }
}

/// The lag reads the claim's per-app index: a limited app's rows count like any other, its turn put off or not.
@Suite("Queue lag with a limited app")
struct QueueLagThrottledTests {
    @Test func aLimitedAppsOldestDueDeliveryIsTheLag() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let limited = try Seed(url)
                try limited.app()
                _ = try limited.connection.query("UPDATE apps SET max_sends_per_second = 5 WHERE id = $1", [limited.appID])
                let free = try Seed(url)
                try free.app()
                // The limited app's delivery is the oldest (90 s), the free app's 20 s old.
                for (seed, offset) in [(limited, "-90 seconds"), (free, "-20 seconds")] {
                    let notification = try seed.notification(target: #"{"all": true}"#)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                        VALUES ($1, $2, $3, now() + $4::interval)
                        """, [notification, try seed.subscription(), seed.appID, offset])
                }
                // Its turn waits for a permit an hour ahead: its due delivery still counts.
                _ = try limited.connection.query(
                    "UPDATE app_claim_turns SET turn_at = now() + interval '1 hour' WHERE app_id = $1", [limited.appID])
                let lag = try QueueLagStore.lag(on: limited.connection)
                #expect(lag >= 90 && lag < 150)
                _ = try limited.connection.query("DELETE FROM deliveries WHERE app_id = $1", [limited.appID])
                let next = try QueueLagStore.lag(on: limited.connection)
                #expect(next >= 20 && next < 90)
            }
        }
    }
}
