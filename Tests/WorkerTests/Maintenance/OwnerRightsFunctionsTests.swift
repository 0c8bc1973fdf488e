import Foundation
import Postgres
import Testing
@testable import Worker

/// The functions that run with their owner's rights (SECURITY DEFINER: event partitions, planner statistics, an
/// app's send limit, notifications or subscriptions deleted, notifications renumbered, event counts, time-zone
/// names) and the functions they call resolve no
/// name through the schema (migrations 0023 and 0024): a role with CREATE there cannot have its own code run as
/// the schema's owner.
@Suite("Owner-rights functions")
struct OwnerRightsFunctionsTests {
    /// Every owner-rights function, and every function pinning a search path, pins exactly pg_catalog, pg_temp.
    /// A new one that does not is caught here, before review.
    @Test func everyOwnerRightsFunctionSearchesOnlyPgCatalog() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                let rows = try connection.query(
                    """
                    SELECT p.proname::text AS name, p.prosecdef AS owner_rights,
                           coalesce((SELECT c FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%'), '') AS path
                    FROM pg_proc p
                    WHERE p.pronamespace = current_schema()::regnamespace
                      AND (p.prosecdef OR EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%'))
                    ORDER BY 1
                    """)
                var ownerRights: [String] = []
                for row in rows {
                    let name = try row.decode(String.self, "name")
                    if try row.decode(Bool.self, "owner_rights") { ownerRights.append(name) }
                    #expect(try row.decode(String.self, "path") == "search_path=pg_catalog, pg_temp", "\(name)")
                }
                #expect(ownerRights == [
                    "pushizo_app_throttle_changed", "pushizo_count_events", "pushizo_create_event_partition",
                    "pushizo_drop_event_partition", "pushizo_known_zones", "pushizo_notification_id_changed",
                    "pushizo_notifications_deleted", "pushizo_refresh_grown_statistics", "pushizo_refresh_time_zone_names",
                    "pushizo_subscriptions_deleted",
                ])
            }
        }
    }

    /// Operators made in the schema with the exact argument types of expressions these functions hold, where
    /// PostgreSQL's own operator needs an implicit cast (`oid = regclass`, `float8 * integer`, `float8 * numeric`,
    /// `text[] || text`), would be chosen over the built-in if the schema were on the path. Each raises; every
    /// owner-rights function still does its work.
    @Test func noOwnerRightsFunctionCallsAnOperatorOfTheSchema() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.subscription()
                let notification = try seed.notification(target: #"{"all": true}"#)
                var suspects = ExpansionSuspects()
                _ = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                while try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects) != nil {}
                let deliveries = "SELECT count(*) AS n FROM deliveries"
                #expect(try seed.connection.query(deliveries)[0].decode(Int.self, "n") == 1)

                try seed.connection.execute(
                    """
                    CREATE FUNCTION stand_in_eq(a oid, b regclass) RETURNS boolean LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'the schema''s operator was called'; END $$;
                    CREATE FUNCTION stand_in_times(a float8, b integer) RETURNS float8 LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'the schema''s operator was called'; END $$;
                    CREATE FUNCTION stand_in_times(a float8, b numeric) RETURNS float8 LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'the schema''s operator was called'; END $$;
                    CREATE FUNCTION stand_in_cat(a text[], b text) RETURNS text[] LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'the schema''s operator was called'; END $$;
                    CREATE OPERATOR = (leftarg = oid, rightarg = regclass, function = stand_in_eq);
                    CREATE OPERATOR * (leftarg = float8, rightarg = integer, function = stand_in_times);
                    CREATE OPERATOR * (leftarg = float8, rightarg = numeric, function = stand_in_times);
                    CREATE OPERATOR || (leftarg = text[], rightarg = text, function = stand_in_cat);
                    """)

                // Event partitions: listed, created (beside their parent), dropped.
                let created = try seed.connection.query(
                    "SELECT pushizo_create_event_partition(date '2001-02-03') AS n")[0].decodeIfPresent(String.self, "n")
                #expect(created == "delivery_events_p20010203")
                let listed = try seed.connection.query("SELECT name FROM pushizo_event_partitions()")
                    .map { try $0.decode(String.self, "name") }
                #expect(listed.contains("delivery_events_p20010203"))
                #expect(listed.contains("delivery_events_default"))
                let dropped = try seed.connection.query(
                    "SELECT pushizo_drop_event_partition('delivery_events_p20010203', 86400) AS d")[0].decode(Bool.self, "d")
                #expect(dropped)
                #expect(!(try DataLifecycleTests.relationExists(seed.connection, "delivery_events_p20010203")))

                // Planner statistics: `deliveries` has rows its (absent) statistics do not describe.
                _ = try seed.connection.query("SELECT * FROM pushizo_refresh_grown_statistics(2, 0, 0)")
                _ = try seed.connection.query("SELECT pushizo_grown_tables(2, 0, 0) AS g")

                // An app's send limit set, changed, cleared: its bucket follows, and its claim turn comes now.
                _ = try seed.connection.query("UPDATE apps SET max_sends_per_second = 50 WHERE id = $1", [seed.appID])
                #expect(try seed.connection.query("SELECT count(*) AS n FROM app_send_buckets")[0].decode(Int.self, "n") == 1)
                _ = try seed.connection.query(
                    "UPDATE app_claim_turns SET turn_at = now() + interval '1 hour' WHERE app_id = $1", [seed.appID])
                _ = try seed.connection.query("UPDATE apps SET max_sends_per_second = NULL WHERE id = $1", [seed.appID])
                #expect(try seed.connection.query("SELECT count(*) AS n FROM app_send_buckets")[0].decode(Int.self, "n") == 0)
                let due = "SELECT count(*) AS n FROM app_claim_turns WHERE app_id = $1 AND turn_at <= now()"
                #expect(try seed.connection.query(due, [seed.appID])[0].decode(Int.self, "n") == 1)

                // Zone names.
                #expect(try TimeZoneNames.refresh(on: seed.connection) == 0)

                // A notification with deliveries keeps its id; deleting it deletes them.
                let renumbered = try #require(throws: PostgresError.self) {
                    try seed.connection.query("UPDATE notifications SET id = gen_random_uuid() WHERE id = $1", [notification])
                }
                #expect(renumbered.sqlState == "23503")
                _ = try seed.connection.query("DELETE FROM notifications WHERE id = $1", [notification])
                #expect(try seed.connection.query(deliveries)[0].decode(Int.self, "n") == 0)
            }
        }
    }

    /// Partition bounds go through text, so the partition functions fix DateStyle and TimeZone themselves: a
    /// caller with DateStyle 'Postgres' and a POSIX zone named like an abbreviation does not get today's and
    /// tomorrow's partitions taken for expired ones, and one in Asia/Kolkata gets a day partition that starts at
    /// UTC midnight.
    @Test func partitionFunctionsIgnoreTheCallersDateSettings() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                _ = try connection.query(
                    "SELECT pushizo_create_event_partition((now() AT TIME ZONE 'UTC')::date + d) FROM generate_series(0, 1) d")
                try connection.execute("SET DateStyle = 'Postgres'; SET TimeZone = 'LINT+160'")
                for offset in [0, 1] {
                    let dropped = try connection.query(
                        """
                        SELECT pushizo_drop_event_partition(
                            'delivery_events_p' || to_char((now() AT TIME ZONE 'UTC')::date + $1::integer, 'YYYYMMDD'), 86400) AS d
                        """, [offset])[0].decode(Bool.self, "d")
                    #expect(!dropped, "day +\(offset)")
                }
                try connection.execute("SET TimeZone = 'Asia/Kolkata'")
                #expect(try connection.query("SELECT pushizo_create_event_partition(date '2027-02-01') AS n")[0]["n"] == "delivery_events_p20270201")
                try connection.execute("SET DateStyle = 'ISO'; SET TimeZone = 'UTC'")
                let bounds = try connection.query(
                    "SELECT lower_bound::text AS l, upper_bound::text AS u FROM pushizo_event_partitions() WHERE name = 'delivery_events_p20270201'")
                #expect(bounds.first?["l"] == "2027-02-01 00:00:00+00" && bounds.first?["u"] == "2027-02-02 00:00:00+00")
                #expect(try connection.query("SELECT pushizo_create_event_partition(date '2027-02-02') AS n")[0]["n"] == "delivery_events_p20270202")
            }
        }
    }
}
