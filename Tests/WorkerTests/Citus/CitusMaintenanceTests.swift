import Foundation
import Postgres
import Testing
@testable import Worker

extension CitusSuites {
    /// The maintenance on a distributed database (docs/scale-out.md, "Maintenance and `status` on Citus"): one run
    /// does each step's work there, every step without a problem.
    @Suite struct CitusMaintenanceTests {
        typealias Distribute = CitusSuites.CitusDistributeTests

        /// A day's partition name, `delivery_events_pYYYYMMDD`, of the day `days` from today (UTC).
        static func partition(daysFromToday days: Int) -> String {
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyyMMdd"
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.locale = Locale(identifier: "en_US_POSIX")
            return "delivery_events_p" + formatter.string(from: Date().addingTimeInterval(Double(days) * 86_400))
        }

        @Test func aMaintenanceRunDoesEveryStepsWorkOnTheDistributedSchema() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                let app = UUID()
                let (folded, finished, queued, youngKey) = (UUID(), UUID(), UUID(), "young")
                let ahead = Self.partition(daysFromToday: 3)
                let expired = Self.partition(daysFromToday: -40)
                try await Distribute.onCoordinator(database) { c in
                    _ = try c.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    // Count deltas to fold: two rows of one notification.
                    _ = try c.query(
                        "INSERT INTO notifications (id, app_id, message, target) VALUES ($1, $2, '{}', '{\"all\": true}')",
                        [folded, app])
                    _ = try c.query(
                        "INSERT INTO notification_event_counts (notification_id, sent, failed) VALUES ($1, 2, 0), ($1, 1, 1)", [folded])
                    // Finished notifications past the 90 days' retention: one to prune (with its deltas), one with a
                    // delivery still queued, kept.
                    _ = try c.query(
                        """
                        INSERT INTO notifications (id, app_id, message, target, status, created_at)
                        VALUES ($1, $3, '{}', '{"all": true}', 'canceled', now() - interval '100 days'),
                               ($2, $3, '{}', '{"all": true}', 'canceled', now() - interval '100 days')
                        """, [finished, queued, app])
                    _ = try c.query("INSERT INTO notification_event_counts (notification_id, sent) VALUES ($1, 5)", [finished])
                    let subscription = try c.query(
                        "INSERT INTO subscriptions (app_id, platform, token) VALUES ($1, 'ios', 'maintained') RETURNING id, lane", [app])[0]
                    _ = try c.query(
                        "INSERT INTO deliveries (lane, notification_id, subscription_id, app_id) VALUES ($1, $2, $3, $4)",
                        [try subscription.decode(Int.self, "lane"), queued, try subscription.decode(UUID.self, "id"), app])
                    // A grant outside every window, an expired provider token, keys past their window and a young one.
                    _ = try c.query(
                        """
                        INSERT INTO frequency_cap_grants (app_id, cap_key, notification_id, granted_at)
                        VALUES ($1, gen_random_uuid(), gen_random_uuid(), now() - interval '60 days')
                        """, [app])
                    _ = try c.query(
                        """
                        INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                        VALUES ('citus-expired', 'apns', '\\x00', 1, now() - interval '3 days', now() - interval '2 days')
                        """)
                    _ = try c.query(
                        """
                        INSERT INTO notification_idempotency_keys (app_id, idempotency_key, notification_id, created_at)
                        VALUES ($1, 'old-1', gen_random_uuid(), now() - interval '31 days'),
                               ($1, 'old-2', gen_random_uuid(), now() - interval '40 days'),
                               ($1, $2, gen_random_uuid(), now() - interval '29 days')
                        """, [app, youngKey])
                    // A day ahead to create again, a day past the 30 days' retention to drop, and an event of another
                    // day past it waiting in the DEFAULT partition.
                    try c.execute("DROP TABLE \(ahead)")
                    _ = try c.query("SELECT pushizo_create_event_partition((now() - interval '40 days')::date)")
                    _ = try c.query(
                        """
                        INSERT INTO delivery_events (app_id, notification_id, event, at)
                        VALUES ($1, $2, 'received', now() - interval '45 days')
                        """, [app, folded])
                }
                let report = try await Distribute.onCoordinator(database) { c in
                    try #require(try DataLifecycle.maintain(on: c, settings: DataLifecycleTests.days30, waitForLock: false))
                }
                #expect(report.problems.isEmpty, "\(report.problems)")
                #expect(report.createdPartitions.contains(ahead), "\(report.createdPartitions)")
                #expect(report.droppedPartitions == [expired], "\(report.droppedPartitions)")
                #expect(report.expiredDefaultRows == 1)
                #expect(report.foldedCounts == 1)
                #expect(report.prunedGrants == 1)
                #expect(report.prunedNotifications == 1)
                #expect(report.clearedIdempotencyKeys == 2)
                #expect(report.prunedProviderTokens == 1)
                try await Distribute.onCoordinator(database) { c in
                    let rows = try c.query(
                        "SELECT sent, failed FROM notification_event_counts WHERE notification_id = $1", [folded]
                    ).map { "\($0["sent"] ?? "") \($0["failed"] ?? "")" }
                    #expect(rows == ["3 1"])
                    let left = try c.query("SELECT id FROM notifications WHERE id = ANY($1::uuid[]) ORDER BY id", [[finished, queued]])
                        .map { try $0.decode(UUID.self, "id") }
                    #expect(left == [queued])
                    #expect(try c.query("SELECT 1 FROM notification_event_counts WHERE notification_id = $1", [finished]).isEmpty)
                    let keys = try c.query("SELECT idempotency_key FROM notification_idempotency_keys").map { $0["idempotency_key"] ?? "" }
                    #expect(keys == [youngKey])
                    // The partition created again is distributed with its parent.
                    let distributed = try c.query(
                        "SELECT count(*)::int AS n FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)", [ahead]
                    )[0].decode(Int.self, "n")
                    #expect(distributed == 1)
                }
            }
        }
    }
}
