import Foundation
import Postgres
import Testing
@testable import Worker

/// The data lifecycle against PostgreSQL (migration 0006, ``DataLifecycle``): partitions ahead, retention by
/// dropped partitions, the DEFAULT partition, exact counts, pruning, and the fleet's advisory lock.
@Suite("Data lifecycle in PostgreSQL")
struct DataLifecycleTests {
    static let days30 = MaintenanceSettings(eventRetention: .seconds(30 * 86_400), notificationRetention: .seconds(90 * 86_400))

    static func partitions(_ connection: PostgresConnection) throws -> [String] {
        try connection.query(
            """
            SELECT c.relname::text AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'delivery_events'::regclass ORDER BY 1
            """
        ).map { try $0.decode(String.self, "name") }
    }

    static func relationExists(_ connection: PostgresConnection, _ name: String) throws -> Bool {
        try connection.query("SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1) AS e", [name])[0]
            .decode(Bool.self, "e")
    }

    /// The name of the day partition `offset` UTC days from today.
    static func dayPartition(_ connection: PostgresConnection, offset: Int) throws -> String {
        try connection.query(
            "SELECT 'delivery_events_p' || to_char((now() AT TIME ZONE 'UTC')::date + $1::integer, 'YYYYMMDD') AS n",
            [offset]
        )[0].decode(String.self, "n")
    }

    /// Inserts one event through the parent at `at` (SQL expression) and returns the partition that holds it.
    @discardableResult
    static func insertEvent(
        _ seed: Seed, notification: UUID, at: String, event: String = "sent"
    ) throws -> String {
        try seed.connection.query(
            """
            INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event)
            VALUES (\(at), $1, $2, gen_random_uuid(), $3) RETURNING tableoid::regclass::text AS part
            """, [seed.appID, notification, event]
        )[0].decode(String.self, "part")
    }

    /// An app, a notification, and a partition made 40 days ago (as the maintenance made it then) holding one of
    /// the notification's events written that day: (the notification, the partition's name).
    static func partitionFortyDaysOld(_ seed: Seed) throws -> (notification: UUID, partition: String) {
        try seed.app()
        let notification = try seed.notification(target: #"{"all": true}"#)
        let old = try #require(
            try seed.connection.query(
                "SELECT pushizo_create_event_partition((now() AT TIME ZONE 'UTC')::date - 40) AS n"
            )[0].decodeIfPresent(String.self, "n"))
        #expect(try insertEvent(seed, notification: notification, at: "now() - interval '40 days'") == old)
        return (notification, old)
    }

    /// `notification_counts` and the same counts grouped straight from the events, per notification.
    static func countsAndDirectCounts(_ connection: PostgresConnection) throws -> (view: [String], direct: [String]) {
        let view = try connection.query(
            "SELECT notification_id::text || ':' || sent || '/' || failed || '/' || skipped || '/' || deferred AS c FROM notification_counts ORDER BY 1"
        ).map { try $0.decode(String.self, "c") }
        let direct = try connection.query(
            """
            SELECT n.id::text || ':' || count(*) FILTER (WHERE e.event = 'sent') || '/' || count(*) FILTER (WHERE e.event = 'failed')
                   || '/' || count(*) FILTER (WHERE e.event = 'skipped') || '/' || count(*) FILTER (WHERE e.event = 'deferred') AS c
            FROM notifications n LEFT JOIN delivery_events e ON e.notification_id = n.id GROUP BY n.id ORDER BY 1
            """
        ).map { try $0.decode(String.self, "c") }
        return (view, direct)
    }

    @Test func partitionsExistFromTodayToSevenDaysAheadAndMaintenanceRecreatesAMissingOne() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                let expected = try (0...7).map { try Self.dayPartition(seed.connection, offset: $0) }
                #expect(Set(expected).isSubset(of: Set(try Self.partitions(seed.connection))))
                #expect(try Self.partitions(seed.connection).contains("delivery_events_default"))
                // An event six days ahead finds its own partition, not the safety net.
                #expect(try Self.insertEvent(seed, notification: notification, at: "now() + interval '6 days'") == expected[6])

                // Gone (say the fleet was down a week): the maintenance creates it again.
                try seed.connection.execute("DROP TABLE \(expected[7])")
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.createdPartitions == [expected[7]])
                #expect(report.problems.isEmpty)
                #expect(try Self.relationExists(seed.connection, expected[7]))
                // Nothing left to do: a second run changes nothing.
                let again = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(!again.didWork)
            }
        }
    }

    @Test func anEventOlderThanTheRetentionGoesWithItsDroppedPartition() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let (notification, old) = try Self.partitionFortyDaysOld(seed)
                // Today's: inside the retention.
                try Self.insertEvent(seed, notification: notification, at: "now()", event: "failed")

                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.droppedPartitions == [old])
                #expect(report.problems.isEmpty)
                // The table itself is gone, not merely its rows.
                #expect(!(try Self.relationExists(seed.connection, old)))
                #expect(!(try Self.partitions(seed.connection).contains(old)))
                let left = try seed.connection.query("SELECT event FROM delivery_events").map { try $0.decode(String.self, "event") }
                #expect(left == ["failed"])
                // Counts are of the events written; dropping a partition does not rewrite history.
                let counts = try seed.connection.query(
                    "SELECT sent, failed FROM notification_counts WHERE notification_id = $1", [notification])[0]
                #expect(try counts.decode(Int.self, "sent") == 1)
                #expect(try counts.decode(Int.self, "failed") == 1)
            }
        }
    }

    /// A worker role with data rights only (the schema owned by another role, as docs/systemd.md sets it up)
    /// still maintains: creating and dropping partitions run as the schema owner through the functions of
    /// migration 0010, and a role without EXECUTE on them (PUBLIC's is revoked) cannot drop events at all.
    @Test func aWorkerRoleWithDataRightsOnlyMaintainsAndOtherRolesCannotDropEvents() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let (_, old) = try Self.partitionFortyDaysOld(seed)
                let suffix = UUID().uuidString.prefix(8).lowercased()
                let worker = "pushizo_test_worker_\(suffix)"
                let stranger = "pushizo_test_stranger_\(suffix)"
                try seed.connection.execute("CREATE ROLE \(worker) NOLOGIN")
                try seed.connection.execute("CREATE ROLE \(stranger) NOLOGIN")
                defer {
                    try? seed.connection.execute("RESET ROLE")
                    for role in [worker, stranger] {
                        try? seed.connection.execute("DROP OWNED BY \(role)")
                        try? seed.connection.execute("DROP ROLE \(role)")
                    }
                }
                for statement in [
                    "GRANT USAGE ON SCHEMA public TO \(worker)",
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \(worker)",
                    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO \(worker)",
                    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO \(worker)",
                    "GRANT USAGE ON SCHEMA public TO \(stranger)",
                ] { try seed.connection.execute(statement) }
                // Today's partition gone: the maintenance must create it again, as the worker role.
                let today = try Self.dayPartition(seed.connection, offset: 0)
                try seed.connection.execute("DROP TABLE \(today)")

                try seed.connection.execute("SET ROLE \(stranger)")
                #expect(throws: PostgresError.self) {
                    try seed.connection.query("SELECT pushizo_drop_event_partition($1, 86400) AS d", [old])
                }
                #expect(throws: PostgresError.self) {
                    try seed.connection.query("SELECT pushizo_create_event_partition(date '2001-01-01') AS n")
                }
                try seed.connection.execute("SET ROLE \(worker)")
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                try seed.connection.execute("RESET ROLE")
                #expect(report.problems.isEmpty)
                #expect(report.droppedPartitions == [old])
                #expect(report.createdPartitions.contains(today))
                #expect(!(try Self.relationExists(seed.connection, old)))
                #expect(try Self.partitions(seed.connection).contains(today))
                // However long a caller says the retention is, a day-old partition is never one to drop.
                let yesterday = try Self.dayPartition(seed.connection, offset: -1)
                _ = try seed.connection.query("SELECT pushizo_create_event_partition((now() AT TIME ZONE 'UTC')::date - 1) AS n")
                let dropped = try seed.connection.query(
                    "SELECT pushizo_drop_event_partition($1, 0) AS d", [yesterday])[0].decode(Bool.self, "d")
                #expect(!dropped)
                #expect(try Self.relationExists(seed.connection, yesterday))
            }
        }
    }

    @Test func providerTokensExpiredForADayAreDeletedAndOthersKept() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                for (fingerprint, expiry) in [
                    ("expired-two-days", "now() - interval '2 days'"), ("expired-an-hour", "now() - interval '1 hour'"),
                    ("current", "now() + interval '50 minutes'"),
                ] {
                    _ = try seed.connection.query(
                        """
                        INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                        VALUES ($1, 'apns', '\\x00', 1, now() - interval '3 days', \(expiry))
                        """, [fingerprint])
                }
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.prunedProviderTokens == 1)
                #expect(report.problems.isEmpty)
                let left = try seed.connection.query("SELECT fingerprint FROM provider_tokens ORDER BY 1")
                    .map { try $0.decode(String.self, "fingerprint") }
                #expect(left == ["current", "expired-an-hour"])
            }
        }
    }

    /// FCM project buckets no charge touched for a day (``DataLifecycle/idleFCMProjectBucketAge``) go, the others
    /// stay; the project's next charge makes its bucket again, full. The delete waits for a charge under way (its
    /// transaction still open here), so a run meanwhile gives up on its lock timeout and deletes nothing.
    @Test func fcmProjectBucketsIdleForADayAreDeletedAndChargesUnderWayAreWaitedFor() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let now = try seed.connection.query("SELECT now() AS now")[0].decode(Date.self, "now")
                for (project, hoursAgo) in [("idle-two-days", 48.0), ("idle-a-day", 25.0), ("charged-23h-ago", 23.0), ("charged-now", 0.0)] {
                    _ = try seed.connection.query(
                        "INSERT INTO fcm_project_buckets (project_id, per_minute, tokens, refilled_at) VALUES ($1, 61, 1, $2)",
                        [project, now.addingTimeInterval(-hoursAgo * 3600)])
                }
                // A charge under way on another session: its transaction holds the table until it ends.
                let charging = try PostgresConnection(connectionString: url)
                defer { charging.close() }
                try charging.execute("BEGIN")
                _ = try charging.query("SELECT * FROM pushizo_fcm_project_charge(ARRAY['charged-now'], ARRAY[1])")
                var settings = Self.days30
                settings.lockTimeout = .milliseconds(200)
                let waited = try #require(try DataLifecycle.maintain(on: seed.connection, settings: settings, waitForLock: false))
                #expect(waited.prunedFCMProjectBuckets == 0)
                #expect(waited.problems.count == 1 && waited.problems.first?.hasPrefix("fcm project buckets:") == true, "\(waited.problems)")
                try charging.execute("COMMIT")

                let report = try #require(try DataLifecycle.maintain(on: seed.connection, settings: settings, waitForLock: false))
                #expect(report.prunedFCMProjectBuckets == 2)
                #expect(report.fields["fcm_project_buckets_pruned"] == "2")
                #expect(report.problems.isEmpty, "\(report.problems)")
                let left = try seed.connection.query("SELECT project_id FROM fcm_project_buckets ORDER BY 1")
                    .map { try $0.decode(String.self, "project_id") }
                #expect(left == ["charged-23h-ago", "charged-now"])
                let again = try FCMProjectQuotaStore.charge(on: seed.connection, asks: [(project: "idle-a-day", sends: 5)])
                // No channel names the project: Firebase's default, a new bucket full (600,000 / 61 permits).
                #expect(again.first?.granted == 5 && (again.first?.permitsLeft ?? 0) > 9_000, "\(again)")
            }
        }
    }

    /// Heartbeat rows not seen for a day (``WorkerHeartbeatStore/pruneAge``) go, stopped or stale; the others stay.
    @Test func workerHeartbeatsNotSeenForADayAreDeletedAndOthersKept() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                var ids: [UUID] = []
                for number in 0..<4 {
                    let beat = WorkerHeartbeatStore.Beat(
                        workerID: UUID(), leasedBy: "w-\(number)", host: "host", pid: Int32(100 + number), version: "0",
                        commit: "c", roles: ["send"], interval: .seconds(5))
                    #expect(try WorkerHeartbeatStore.beat(on: seed.connection, beat) == number + 1)
                    ids.append(beat.workerID)
                }
                try WorkerHeartbeatStore.stopped(on: seed.connection, workerID: ids[0], inFlight: 0)
                _ = try seed.connection.query(
                    "UPDATE worker_heartbeats SET last_seen_at = now() - interval '25 hours' WHERE worker_id = ANY($1)",
                    [[ids[0], ids[1]]])
                _ = try seed.connection.query(
                    "UPDATE worker_heartbeats SET last_seen_at = now() - interval '23 hours' WHERE worker_id = $1", [ids[2]])
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.prunedWorkerHeartbeats == 2)
                #expect(report.fields["worker_heartbeats_pruned"] == "2")
                #expect(report.problems.isEmpty)
                let left = try seed.connection.query("SELECT worker_id FROM worker_heartbeats")
                    .map { try $0.decode(UUID.self, "worker_id") }
                #expect(Set(left) == [ids[2], ids[3]])
            }
        }
    }

    @Test func eventsAtPartitionBoundariesLandInTheDayTheyStart() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                let tomorrow = try Self.dayPartition(seed.connection, offset: 1)
                let today = try Self.dayPartition(seed.connection, offset: 0)
                let midnight = "(((now() AT TIME ZONE 'UTC')::date + 1)::timestamp AT TIME ZONE 'UTC')"
                // Lower bounds are inclusive, upper bounds exclusive.
                #expect(try Self.insertEvent(seed, notification: notification, at: midnight) == tomorrow)
                #expect(try Self.insertEvent(seed, notification: notification, at: "\(midnight) - interval '1 microsecond'") == today)
                #expect(try Self.insertEvent(seed, notification: notification, at: "\(midnight) + interval '1 day' - interval '1 microsecond'") == tomorrow)
                // The same instants written in another session time zone land in the same UTC days.
                try seed.connection.execute("SET TIME ZONE 'Pacific/Kiritimati'")
                #expect(try Self.insertEvent(seed, notification: notification, at: midnight) == tomorrow)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0].decode(Int.self, "n") == 4)
            }
        }
    }

    @Test func rowsInTheDefaultPartitionAreMovedIntoTheirNewDayOrDeletedPastTheRetention() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                let day3 = try Self.dayPartition(seed.connection, offset: 3)
                try seed.connection.execute("DROP TABLE \(day3)")
                // While day 3 has no partition, its events wait in DEFAULT; so do events beyond the window and
                // events written already older than the retention.
                #expect(try Self.insertEvent(seed, notification: notification, at: "now() + interval '3 days'") == "delivery_events_default")
                #expect(try Self.insertEvent(seed, notification: notification, at: "now() + interval '30 days'", event: "failed") == "delivery_events_default")
                #expect(try Self.insertEvent(seed, notification: notification, at: "now() - interval '45 days'", event: "skipped") == "delivery_events_default")

                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.createdPartitions == [day3])
                #expect(report.expiredDefaultRows == 1)
                let placed = try seed.connection.query(
                    "SELECT event, tableoid::regclass::text AS part FROM delivery_events ORDER BY event"
                ).map { "\(try $0.decode(String.self, "event"))@\(try $0.decode(String.self, "part"))" }
                #expect(placed == ["failed@delivery_events_default", "sent@\(day3)"])
            }
        }
    }

    @Test func notificationCountsEqualADirectCountThroughInsertsUpdatesDeletesAndFolding() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notifications = try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
                _ = try seed.connection.query(
                    """
                    INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event)
                    SELECT now() - make_interval(hours => i % 50), $1, ($2::uuid[])[1 + i % 3], gen_random_uuid(),
                           (ARRAY['sent', 'failed', 'skipped', 'deferred', 'retrying', 'opened'])[1 + i % 6]
                    FROM generate_series(1, 3000) AS i
                    """, [seed.appID, notifications])
                // One row per statement, as the worker's completions write them.
                for index in 0..<20 {
                    try Self.insertEvent(seed, notification: notifications[index % 3], at: "now()", event: index % 2 == 0 ? "sent" : "deferred")
                }
                var counts = try Self.countsAndDirectCounts(seed.connection)
                #expect(counts.view == counts.direct)
                // Events rewritten or deleted (not what the worker does, but exact anyway).
                _ = try seed.connection.query(
                    "UPDATE delivery_events SET event = 'failed' WHERE event = 'sent' AND notification_id = $1", [notifications[0]])
                _ = try seed.connection.query("DELETE FROM delivery_events WHERE event = 'skipped' AND notification_id = $1", [notifications[1]])
                counts = try Self.countsAndDirectCounts(seed.connection)
                #expect(counts.view == counts.direct)
                // Folding the deltas keeps the sums and leaves one row per notification.
                let report = try #require(
                    try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false))
                #expect(report.foldedCounts == 3)
                counts = try Self.countsAndDirectCounts(seed.connection)
                #expect(counts.view == counts.direct)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM notification_event_counts")[0].decode(Int.self, "n") == 3)
                // A notification without events counts zeros; a deleted one leaves no delta behind.
                let quiet = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query("DELETE FROM notifications WHERE id = $1", [notifications[2]])
                _ = try DataLifecycle.maintain(on: seed.connection, settings: Self.days30, waitForLock: false)
                counts = try Self.countsAndDirectCounts(seed.connection)
                #expect(counts.view == counts.direct)
                #expect(counts.view.contains("\(quiet.uuidString.lowercased()):0/0/0/0"))
                #expect(
                    try seed.connection.query(
                        "SELECT count(*) AS n FROM notification_event_counts WHERE notification_id = $1", [notifications[2]]
                    )[0].decode(Int.self, "n") == 0)
            }
        }
    }

    @Test func grantsGoOnlyOutsideEveryCapWindow() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let long = UUID()
                let broken = UUID()
                // Numbers the worker refuses as a window: beyond float8 (which failed the whole statement, so no
                // app's grants were pruned), negative, fractional, zero.
                let tiny = UUID(), huge = UUID(), fraction = UUID(), zero = UUID()
                // No caps any more: its grants count nowhere.
                let none = UUID()
                _ = try seed.connection.query(
                    """
                    INSERT INTO apps (id, frequency_caps) VALUES
                        ($1, '[{"max": 3, "per_seconds": 8640000}]'), ($2, '[{"max": 3, "per_second": 86400}]'),
                        ($3, '[{"max": 1, "per_seconds": 1e-1000}]'), ($4, '[{"max": 1, "per_seconds": -1e1000}]'),
                        ($5, '[{"max": 1, "per_seconds": 86400.5}]'), ($6, '[{"max": 1, "per_seconds": 0}]'),
                        ($7, '[]')
                    """, [long, broken, tiny, huge, fraction, zero, none])
                _ = try seed.connection.query(
                    "UPDATE apps SET frequency_caps = '[{\"max\": 3, \"per_seconds\": 86400}]' WHERE id = $1", [seed.appID])
                // (app, age in days, kept?): one day's window keeps 28 days (what the reservation keeps); a 100-day
                // window keeps 100 days; an unreadable rule or window keeps the longest window there is (366 days).
                let cases: [(UUID, Int, Bool)] = [
                    (seed.appID, 10, true), (seed.appID, 27, true), (seed.appID, 29, false), (seed.appID, 200, false),
                    (long, 40, true), (long, 99, true), (long, 101, false),
                    (broken, 40, true), (broken, 365, true), (broken, 367, false),
                    (tiny, 365, true), (tiny, 367, false), (huge, 365, true), (huge, 367, false),
                    (fraction, 365, true), (fraction, 367, false), (zero, 365, true), (zero, 367, false),
                    (none, 27, true), (none, 29, false),
                ]
                for (app, age, _) in cases {
                    _ = try seed.connection.query(
                        """
                        INSERT INTO frequency_cap_grants (app_id, cap_key, notification_id, granted_at)
                        VALUES ($1, gen_random_uuid(), gen_random_uuid(), now() - make_interval(days => $2::integer))
                        """, [app, age])
                }
                var settings = Self.days30
                settings.batchSize = 2  // several batches
                let report = try #require(try DataLifecycle.maintain(on: seed.connection, settings: settings, waitForLock: false))
                #expect(report.problems.isEmpty)
                #expect(report.prunedGrants == cases.filter { !$0.2 }.count)
                let left = try seed.connection.query(
                    "SELECT app_id, round(extract(epoch FROM now() - granted_at) / 86400)::integer AS age FROM frequency_cap_grants"
                ).map { "\(try $0.decode(UUID.self, "app_id"))/\(try $0.decode(Int.self, "age"))" }
                #expect(Set(left) == Set(cases.filter(\.2).map { "\($0.0)/\($0.1)" }))
            }
        }
    }

    @Test func onlyFinishedNotificationsPastTheirRetentionAreDeleted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                func notification(status: String, ageDays: Int, expandedDaysAgo: Int?) throws -> UUID {
                    try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, status, created_at, expanded_at)
                        VALUES ($1, '{}', '{"all": true}', $2, now() - make_interval(days => $3::integer),
                                now() - make_interval(days => $4::integer)) RETURNING id
                        """, [seed.appID, status, ageDays, expandedDaysAgo]
                    )[0].decode(UUID.self, "id")
                }
                let expandedOld = try notification(status: "expanded", ageDays: 100, expandedDaysAgo: 95)
                let failedOld = try notification(status: "failed", ageDays: 100, expandedDaysAgo: nil)
                let canceledOld = try notification(status: "canceled", ageDays: 100, expandedDaysAgo: nil)
                let expandedRecently = try notification(status: "expanded", ageDays: 100, expandedDaysAgo: 10)
                let stillQueued = try notification(status: "expanded", ageDays: 100, expandedDaysAgo: 95)
                let pendingOld = try notification(status: "pending", ageDays: 100, expandedDaysAgo: nil)
                let expandingOld = try notification(status: "expanding", ageDays: 100, expandedDaysAgo: nil)
                _ = try seed.connection.query(
                    "INSERT INTO deliveries (notification_id, subscription_id, app_id) VALUES ($1, $2, $3)",
                    [stillQueued, subscription, seed.appID])
                try Self.insertEvent(seed, notification: expandedOld, at: "now()")

                // Off: nothing is deleted.
                var settings = Self.days30
                settings.notificationRetention = nil
                #expect(try DataLifecycle.maintain(on: seed.connection, settings: settings, waitForLock: false)?.prunedNotifications == 0)

                settings.notificationRetention = .seconds(90 * 86_400)
                settings.batchSize = 1
                let report = try #require(try DataLifecycle.maintain(on: seed.connection, settings: settings, waitForLock: false))
                #expect(report.prunedNotifications == 3)
                let left = Set(try seed.connection.query("SELECT id FROM notifications").map { try $0.decode(UUID.self, "id") })
                #expect(left == [expandedRecently, stillQueued, pendingOld, expandingOld])
                #expect(!left.contains(failedOld) && !left.contains(canceledOld))
                // Its count deltas went with it; its events stay until their partition's retention.
                #expect(
                    try seed.connection.query(
                        "SELECT count(*) AS n FROM notification_event_counts WHERE notification_id = $1", [expandedOld]
                    )[0].decode(Int.self, "n") == 0)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0].decode(Int.self, "n") == 1)
            }
        }
    }

    @Test func aRunningMaintenanceMakesTheFleetSkipAndMaintainWait() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let holder = try PostgresConnection(connectionString: url)
                defer { holder.close() }
                let other = try PostgresConnection(connectionString: url)
                defer { other.close() }
                _ = try holder.query("SELECT pg_advisory_lock($1)", [DataLifecycle.advisoryLockKey])
                #expect(try DataLifecycle.maintain(on: other, settings: Self.days30, waitForLock: false) == nil)
                _ = try holder.query("SELECT pg_advisory_unlock($1)", [DataLifecycle.advisoryLockKey])
                #expect(try DataLifecycle.maintain(on: other, settings: Self.days30, waitForLock: false) != nil)
                // The lock is released after a run: the holder can take it again at once.
                #expect(try holder.query("SELECT pg_try_advisory_lock($1) AS l", [DataLifecycle.advisoryLockKey])[0].decode(Bool.self, "l"))
            }
        }
    }

    /// Two `pushizo-worker maintain` processes at once on a database with work to do: both succeed, each
    /// partition is created or dropped by exactly one of them, and the result is what one run would leave.
    @Test func twoMaintainProcessesAtOnceDoNotConflict() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (missing, old) = try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let missing = try (4...7).map { try Self.dayPartition(seed.connection, offset: $0) }
                for name in missing { try seed.connection.execute("DROP TABLE \(name)") }
                let old = try (40...45).map { offset in
                    try seed.connection.query(
                        "SELECT pushizo_create_event_partition((now() AT TIME ZONE 'UTC')::date - $1::integer) AS n", [offset]
                    )[0].decode(String.self, "n")
                }
                return (missing, old)
            }
            async let first = Self.runMaintain(url)
            async let second = Self.runMaintain(url)
            let outputs = try await [first, second]
            for output in outputs { #expect(output.status == 0, "\(output.text)") }
            func names(_ key: String) -> [String] {
                outputs.flatMap { output in
                    output.text.split(separator: "\n").filter { $0.hasPrefix(key + "=") }
                        .flatMap { $0.dropFirst(key.count + 1).split(separator: ",").map(String.init) }
                        .filter { $0 != "0" }
                }
            }
            #expect(names("partitions_created").sorted() == missing.sorted())
            #expect(names("partitions_dropped").sorted() == old.sorted())
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                let partitions = Set(try Self.partitions(connection))
                #expect(Set(missing).isSubset(of: partitions))
                #expect(partitions.isDisjoint(with: old))
            }
        }
    }

    static func runMaintain(_ url: String) async throws -> (status: Int32, text: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["maintain"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": url, "PUSHIZO_LOG_LEVEL": "warning",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = try await onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        return (process.terminationStatus, text)
    }

    /// `run` does the maintenance on its own schedule (first at start).
    @Test func theWorkerMaintainsOnItsSchedule() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let missing = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                let name = try Self.dayPartition(connection, offset: 7)
                try connection.execute("DROP TABLE \(name)")
                return name
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
            process.arguments = ["run", "--poll-interval", "0.2"]
            process.environment = [
                "PUSHIZO_DATABASE_URL": url, "PUSHIZO_LOG_LEVEL": "warning",
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            ]
            try process.run()
            let database = PostgresClient(connectionString: url, maximumConnections: 1)
            // Hang guard only (generous for a loaded machine): the first round runs at start.
            let deadline = ContinuousClock.now + .seconds(90)
            var created = false
            while ContinuousClock.now < deadline, !created {
                created = try await database.query("SELECT to_regclass($1) IS NOT NULL AS e", [missing])[0].decode(Bool.self, "e")
                if !created { try await Task.sleep(for: .milliseconds(50)) }
            }
            process.terminate()
            try await onThread { process.waitUntilExit() }
            await database.shutdown()
            #expect(created)
            #expect(process.terminationStatus == 0)
        }
    }
}
