import Foundation
import Postgres
import Testing
@testable import Worker

/// Migration 0015 replaced the foreign key `deliveries.notification_id -> notifications` (checked once per
/// inserted row) by triggers that work once per statement; what the key guaranteed still holds.
@Suite("Deliveries and their notification")
struct DeliveryReferencesTests {
    static func insertDeliveries(_ seed: Seed, notifications: [UUID], subscription: UUID) throws {
        _ = try seed.connection.query(
            """
            INSERT INTO deliveries (notification_id, subscription_id, app_id)
            SELECT n, $2, $3 FROM unnest($1::uuid[]) AS n
            """, [notifications, subscription, seed.appID])
    }

    /// The insert trigger's lock of the statement's notifications is planned on every call (migration 0020): a
    /// session that ran it while `notifications` was nearly empty otherwise kept a sequential scan, which read
    /// the whole table on every insert once producers had filled it.
    @Test func theInsertTriggerLooksUpItsNotificationsHoweverSmallTheTableWasWhenItFirstRan() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscriptions = try (0..<8).map { _ in try seed.subscription() }
                let first = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query("ANALYZE notifications")
                // Enough inserts for PL/pgSQL to settle on a plan while the table holds one notification.
                for subscription in subscriptions.prefix(7) {
                    try Self.insertDeliveries(seed, notifications: [first], subscription: subscription)
                }
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{}', '{}', 'expanded' FROM generate_series(1, 20000)
                    """, [seed.appID])
                let read = try rowsRead(of: "notifications", on: seed.connection) {
                    try Self.insertDeliveries(seed, notifications: [first], subscription: subscriptions[7])
                }
                #expect(read < 100, "the trigger read \(read) rows of notifications for one")
            }
        }
    }

    @Test func aDeliveryMustNameAnExistingNotificationAndAStatementNamingAMissingOneInsertsNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                let existing = try seed.notification(target: #"{"all": true}"#)
                let missing = UUID()
                do {
                    try Self.insertDeliveries(seed, notifications: [existing, missing], subscription: subscription)
                    Issue.record("a delivery of a missing notification was inserted")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "23503", "\(error)")
                }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                try Self.insertDeliveries(seed, notifications: [existing], subscription: subscription)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "1")
            }
        }
    }

    @Test func deletingNotificationsDirectlyOrThroughTheirAppDeletesTheirQueuedDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                let first = try seed.notification(target: #"{"all": true}"#)
                let second = try seed.notification(target: #"{"all": true}"#)
                try Self.insertDeliveries(seed, notifications: [first, second], subscription: subscription)
                let other = try Seed(url)
                try other.app()
                let kept = try other.notification(target: #"{"all": true}"#)
                try Self.insertDeliveries(other, notifications: [kept], subscription: try other.subscription())

                _ = try seed.connection.query("DELETE FROM notifications WHERE id = $1", [first])
                let left = try seed.connection.query("SELECT notification_id FROM deliveries ORDER BY app_id = $1 DESC", [seed.appID])
                #expect(try left.map { try $0.decode(UUID.self, "notification_id") } == [second, kept])
                _ = try seed.connection.query("DELETE FROM apps WHERE id = $1", [seed.appID])
                let last = try seed.connection.query("SELECT notification_id FROM deliveries")
                #expect(try last.map { try $0.decode(UUID.self, "notification_id") } == [kept])
            }
        }
    }

    @Test func neitherSideOfTheReferenceCanBeRewritten() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                let queued = try seed.notification(target: #"{"all": true}"#)
                let other = try seed.notification(target: #"{"all": true}"#)
                try Self.insertDeliveries(seed, notifications: [queued], subscription: subscription)
                for statement in [
                    "UPDATE deliveries SET notification_id = '\(other)'",
                    "UPDATE notifications SET id = gen_random_uuid() WHERE id = '\(queued)'",
                ] {
                    do {
                        _ = try seed.connection.query(statement)
                        Issue.record("\(statement) succeeded")
                    } catch let error as PostgresError {
                        #expect(error.sqlState == "23503", "\(statement): \(error)")
                    }
                }
                // What no delivery names may change, and so may every other column of a delivery.
                _ = try seed.connection.query("UPDATE notifications SET id = gen_random_uuid() WHERE id = $1", [other])
                _ = try seed.connection.query("UPDATE deliveries SET run_at = now(), attempt = attempt + 1")
                let row = try seed.connection.query("SELECT notification_id, attempt FROM deliveries")
                #expect(try row.map { try $0.decode(UUID.self, "notification_id") } == [queued])
                #expect(row.first?["attempt"] == "1")
            }
        }
    }
}
