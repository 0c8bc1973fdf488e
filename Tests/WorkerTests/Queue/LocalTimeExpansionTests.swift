import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// Local-time delivery in the database (docs/local-time-delivery.md): migration 0011's functions against the
/// Swift rule, and both expansion paths scheduling each delivery in bulk.
@Suite("Local-time delivery in PostgreSQL")
struct LocalTimeExpansionTests {
    static let zones = [
        "UTC", "Europe/Paris", "Europe/London", "America/New_York", "America/St_Johns", "Pacific/Kiritimati",
        "Etc/GMT+12", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Eucla", "Australia/Lord_Howe", "Pacific/Chatham",
        "Asia/Tehran", "Pacific/Apia",
    ]
    static let times = ["00:00", "01:30", "02:30", "09:00", "23:59"]

    /// Starts: every 31 hours 7 minutes 13 seconds through 2026, plus every 5 hours 0.5 seconds around the
    /// year's DST nights, plus the two skipped days (Kiritimati 1994-12-31, Apia 2011-12-30).
    static var starts: [Date] {
        var result: [Date] = []
        let yearStart = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
        var t = yearStart
        while t < yearStart.addingTimeInterval(365 * 86_400) {
            result.append(t)
            t = t.addingTimeInterval(31 * 3600 + 7 * 60 + 13)
        }
        // 2026-03-08 (US), 03-29 (EU), 04-05 (AU/NZ back), 10-04 (AU/NZ forward), 11-01 (US back), 10-25 (EU).
        for day in [1_772_928_000.0, 1_774_742_400, 1_775_347_200, 1_791_072_000, 1_793_491_200, 1_792_886_400] {
            for step in -10...10 { result.append(Date(timeIntervalSince1970: day + Double(step) * 18_000.5)) }
        }
        for skipped in [788_781_600.0, 1_325_152_800] {  // 1994-12-30T10:00Z, 2011-12-29T10:00Z
            for step in -4...4 { result.append(Date(timeIntervalSince1970: skipped + Double(step) * 7_200)) }
        }
        return result
    }

    /// The authority (PostgreSQL's `pushizo_local_due`) and the Swift rule give the same instant, for every
    /// zone, time and start above (one statement for all of them).
    @Test func sqlAndSwiftAgree() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                var zones: [String] = [], times: [String] = [], starts: [Date] = []
                for zone in Self.zones {
                    for time in Self.times {
                        for start in Self.starts {
                            zones.append(zone)
                            times.append(time)
                            starts.append(start)
                        }
                    }
                }
                let rows = try connection.query(
                    """
                    SELECT i, pushizo_local_due(s, t::time, z) AS due
                    FROM unnest($1::text[], $2::text[], $3::timestamptz[]) WITH ORDINALITY AS x(z, t, s, i)
                    ORDER BY i
                    """, [zones, times, starts])
                #expect(rows.count == zones.count)
                var mismatches: [String] = []
                for (index, row) in rows.enumerated() {
                    let sql = try row.decodeIfPresent(Date.self, "due")
                    let swift = LocalTimeDelivery.dueAt(
                        timeOfDay: LocalTimeDelivery.parseTimeOfDay(times[index])!,
                        in: TimeZone(identifier: zones[index])!, start: starts[index])
                    if sql != swift {
                        mismatches.append("\(zones[index]) \(times[index]) from \(starts[index].timeIntervalSince1970): sql \(sql.map { "\($0.timeIntervalSince1970)" } ?? "nil"), swift \(swift.map { "\($0.timeIntervalSince1970)" } ?? "nil")")
                    }
                }
                #expect(mismatches.isEmpty, "\(mismatches.count) of \(rows.count) differ, e.g. \(mismatches.prefix(5))")
                // Unplaceable starts: no schedule on either side.
                let edges = try connection.query(
                    """
                    SELECT pushizo_local_due('infinity', '09:00', 'UTC') AS a, pushizo_local_due('-infinity', '09:00', 'UTC') AS b,
                           pushizo_local_due('294276-12-31 00:00Z', '09:00', 'UTC') AS c,
                           pushizo_local_due('4713-01-01 00:00Z BC', '09:00', 'UTC') AS d
                    """)[0]
                #expect(edges["a"] == nil && edges["b"] == nil && edges["c"] == nil && edges["d"] == nil)
            }
        }
    }

    /// Zone names are resolved as quiet hours resolve them: exactly as stored, unknown ones fall back.
    @Test func knownZonesAreExactNames() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                let names = ["UTC", "Europe/Paris", "europe/paris", "Americas/Vancouver", "", "EST", "PST", "UTC+5", "Etc/GMT+12"]
                let known = try connection.query(
                    "SELECT array_to_string(pushizo_known_zones($1::text[]), ',') AS k", [names])[0]["k"] ?? ""
                let knownSet = Set(known.split(separator: ",").map(String.init))
                #expect(knownSet == ["UTC", "Europe/Paris", "EST", "Etc/GMT+12"])
                for name in names where knownSet.contains(name) {
                    #expect(TimeZone(identifier: name) != nil, "\(name) is known to PostgreSQL but not to Foundation")
                }
            }
        }
    }

    /// Known names come from `time_zone_names` (a lookup by key, not a read of every zone file), which a refresh
    /// makes what the tz database lists: a missing zone is unknown until then, a name the tz database does not
    /// have is dropped, and a refresh with nothing to change writes nothing. A name the table holds but the
    /// server cannot load (zone files older than the table, on a replica or a restored copy) is unknown too, so
    /// its subscribers fall back to the app's zone instead of failing the expansion. An empty table falls back
    /// to the tz database itself.
    @Test func knownZonesComeFromTheRefreshedTable() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                func known(_ names: [String]) throws -> [String] {
                    let text = try connection.query("SELECT array_to_string(pushizo_known_zones($1::text[]), ',') AS k", [names])[0]["k"] ?? ""
                    return text.split(separator: ",").map(String.init).sorted()
                }
                let names = ["Asia/Kathmandu", "Europe/Paris", "Nowhere/Atlantis"]
                #expect(try known(names) == ["Asia/Kathmandu", "Europe/Paris"])
                #expect(try TimeZoneNames.refresh(on: connection) == 0)
                _ = try connection.query("DELETE FROM time_zone_names WHERE name = 'Asia/Kathmandu'")
                _ = try connection.query("INSERT INTO time_zone_names VALUES ('Nowhere/Atlantis')")
                #expect(try known(names) == ["Europe/Paris"])
                // Expanded while the table holds the name: the subscriber falls back to the app's zone.
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query("UPDATE apps SET default_timezone = 'Europe/Paris' WHERE id = $1", [seed.appID])
                let atlantis = try seed.subscription()
                _ = try seed.connection.query("UPDATE subscriptions SET timezone = 'Nowhere/Atlantis' WHERE id = $1", [atlantis])
                for target in [#"{"include_subscription_ids": ["\#(atlantis)"]}"#, #"{"all": true}"#] {
                    let local = try seed.notification(message: #"{"contents": "hi", "delivery_time_of_day": "09:00"}"#, target: target)
                    var suspects = ExpansionSuspects()
                    _ = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                    while try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects) != nil {}
                    try Self.checkSchedule(seed, notification: local, audience: [(atlantis, "Nowhere/Atlantis")], time: "09:00", ttl: nil)
                }
                #expect(try TimeZoneNames.refresh(on: connection) == 2)
                #expect(try known(names) == ["Asia/Kathmandu", "Europe/Paris"])
                _ = try connection.query("DELETE FROM time_zone_names")
                #expect(try known(names) == ["Asia/Kathmandu", "Europe/Paris"])
                #expect(try TimeZoneNames.refresh(on: connection) > 400)
            }
        }
    }

    /// A worker role granted nothing on `time_zone_names` (rights given table by table before the table existed,
    /// not through default privileges) still knows zones and refreshes the table: both run as their owner.
    @Test func aRoleWithoutRightsOnTheTableKnowsAndRefreshesZones() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                // Roles belong to the cluster, which tests share: a name of this run's own.
                let role = "zones_test_" + UUID().uuidString.prefix(8).lowercased()
                try connection.execute("CREATE ROLE \(role); DELETE FROM time_zone_names WHERE name = 'Asia/Kathmandu'; SET ROLE \(role)")
                defer { try? connection.execute("RESET ROLE; DROP ROLE \(role)") }
                let denied = try #require(throws: PostgresError.self) { try connection.query("SELECT count(*) FROM time_zone_names") }
                #expect(denied.sqlState == "42501")
                let known = try connection.query(
                    "SELECT array_to_string(pushizo_known_zones(ARRAY['Europe/Paris', 'Asia/Kathmandu']), ',') AS k")[0]["k"]
                #expect(known == "Europe/Paris")
                #expect(try TimeZoneNames.refresh(on: connection) == 1)
                let after = try connection.query(
                    "SELECT array_to_string(pushizo_known_zones(ARRAY['Asia/Kathmandu']), ',') AS k")[0]["k"]
                #expect(after == "Asia/Kathmandu")
            }
        }
    }

    /// The owner-rights functions resolve nothing through the schema: an operator made there with the exact
    /// argument types of a polymorphic built-in they use (`text[] || text`) is not called with the owner's rights.
    @Test func theOwnerRightsFunctionsUseNoOperatorOfTheSchema() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                try connection.execute(
                    """
                    CREATE FUNCTION stand_in_cat(a text[], b text) RETURNS text[] LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'the schema''s operator was called'; END $$;
                    CREATE OPERATOR || (leftarg = text[], rightarg = text, function = stand_in_cat);
                    """)
                let known = try connection.query(
                    "SELECT array_to_string(pushizo_known_zones(ARRAY['Europe/Paris', 'UTC']), ',') AS k")[0]["k"]
                #expect(known?.split(separator: ",").sorted() == ["Europe/Paris", "UTC"])
                #expect(try TimeZoneNames.refresh(on: connection) == 0)
            }
        }
    }

    /// An app (default zone Europe/Paris) with one subscriber per zone case; returns (subscription, stored zone).
    static func audience(_ seed: Seed) throws -> [(id: UUID, zone: String?)] {
        try seed.app()
        _ = try seed.connection.query("UPDATE apps SET default_timezone = 'Europe/Paris' WHERE id = $1", [seed.appID])
        let zones: [String?] = [
            "Asia/Kathmandu", "America/New_York", "Pacific/Kiritimati", "Etc/GMT+12", "Australia/Eucla", "Asia/Kolkata",
            nil, "", "Americas/Vancouver", "america/new_york", String(repeating: "x", count: 300),
        ]
        return try zones.map { zone in
            let id = try seed.subscription()
            _ = try seed.connection.query("UPDATE subscriptions SET timezone = $2 WHERE id = $1", [id, zone])
            return (id, zone)
        }
    }

    /// Each delivery's `local_due_at` is the Swift rule's answer, and `run_at` is it too unless the
    /// notification expires first (then `run_at` is the expansion's now: it is skipped at once).
    static func checkSchedule(
        _ seed: Seed, notification: UUID, audience: [(id: UUID, zone: String?)], time: String, ttl: Int?
    ) throws {
        let header = try seed.connection.query(
            "SELECT coalesce(send_after, created_at) AS start, expanded_at FROM notifications WHERE id = $1",
            [notification])[0]
        let start = try header.decode(Date.self, "start")
        let expandedAt = try header.decode(Date.self, "expanded_at")
        let rows = try seed.connection.query(
            "SELECT subscription_id, run_at, local_due_at FROM deliveries WHERE notification_id = $1", [notification])
        #expect(rows.count == audience.count)
        var byID: [UUID: (runAt: Date, due: Date?)] = [:]
        for row in rows {
            byID[try row.decode(UUID.self, "subscription_id")] = (
                try row.decode(Date.self, "run_at"), try row.decodeIfPresent(Date.self, "local_due_at")
            )
        }
        let timeOfDay = LocalTimeDelivery.parseTimeOfDay(time)!
        for (id, zone) in audience {
            let expected = LocalTimeDelivery.due(
                timeOfDay: timeOfDay, subscriberZone: zone, appDefaultZone: "Europe/Paris", start: start)
            let row = try #require(byID[id])
            #expect(row.due == expected.dueAt, "\(zone ?? "nil") -> \(expected.zone)")
            let expires = start.addingTimeInterval(Double(ttl ?? 2_419_200))
            if let due = expected.dueAt, due <= expires {
                #expect(row.runAt == due, "\(zone ?? "nil")")
            } else {
                #expect(row.runAt <= expandedAt, "\(zone ?? "nil") expires first: due at once")
            }
        }
    }

    @Test(arguments: [false, true])
    func bothExpansionPathsScheduleEachZone(small: Bool) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                let audience = try Self.audience(seed)
                let ids = audience.map { "\"\($0.id.uuidString.lowercased())\"" }.joined(separator: ",")
                let target = small ? #"{"include_subscription_ids": [\#(ids)]}"# : #"{"all": true}"#
                // One without ttl, one whose 6 hours leave some zones' 09:00 out, one plain (no local time).
                let plain = try seed.notification(target: target)
                let local = try seed.notification(message: #"{"contents": "hi", "delivery_time_of_day": "09:00"}"#, target: target)
                let short = try seed.notification(
                    message: #"{"contents": "hi", "delivery_time_of_day": "09:00", "ttl": 21600}"#, target: target)
                if small {
                    var suspects = ExpansionSuspects()
                    let result = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                    #expect(result.expanded == 3)
                    #expect(!result.fellBack)
                } else {
                    while let result = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 4) {
                        if case .failed(_, let reason) = result { Issue.record("failed: \(reason)") }
                    }
                }
                try Self.checkSchedule(seed, notification: local, audience: audience, time: "09:00", ttl: nil)
                try Self.checkSchedule(seed, notification: short, audience: audience, time: "09:00", ttl: 21_600)
                let plainRows = try seed.connection.query(
                    "SELECT count(*) FILTER (WHERE local_due_at IS NULL AND run_at <= now()) AS n FROM deliveries WHERE notification_id = $1",
                    [plain])[0]
                #expect(plainRows["n"] == "\(audience.count)")
            }
        }
    }

    /// Each delivery finds its (notification, zone) schedule by key: the statements' work grows with the
    /// deliveries, not with deliveries times pairs. Both once joined every delivery with every pair in a nested
    /// loop: the bulk pass's generic plan expects ten rows of each array, and the chunk's page met its zones the
    /// same way (2.4 s for 500 notifications of 10 devices over 1,200 zones; 0.8 s a page of 5,000).
    @Test(arguments: [false, true])
    func eachDeliveryFindsItsScheduleByKeyNotByComparingEveryPair(small: Bool) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let count = 40
                // One subscription in each of `count` zones PostgreSQL knows.
                let subscriptions = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token, timezone)
                    SELECT $1, 'ios', 'a0a0' || z.n, z.name
                    FROM (SELECT name, row_number() OVER (ORDER BY name) AS n FROM pg_timezone_names
                          WHERE name LIKE '%/%' ORDER BY name LIMIT $2) z
                    RETURNING id
                    """, [seed.appID, count]).map { try $0.decode(UUID.self, "id") }
                #expect(subscriptions.count == count)
                let plan: ExplainedPlan
                let deliveries: Int
                if small {
                    // `count` notifications listing every subscription: count x count deliveries and pairs.
                    let listed = subscriptions.map { #""\#($0.uuidString.lowercased())""# }.joined(separator: ",")
                    let notifications = try (0..<count).map { _ in
                        try seed.notification(
                            message: #"{"contents": "hi", "delivery_time_of_day": "09:00"}"#,
                            target: #"{"include_subscription_ids": [\#(listed)]}"#)
                    }
                    deliveries = count * count
                    let parameters: [any PostgresEncodable] = [
                        notifications, Array(repeating: seed.appID, count: count), Array(repeating: 6, count: count),
                        Array(repeating: nil, count: count) as [String?],
                        notifications.flatMap { Array(repeating: $0, count: count) },
                        Array((0..<count).map { _ in subscriptions }.joined()),
                        [] as [UUID], [] as [String], Array(repeating: "device", count: count),
                        Array(repeating: false, count: count), 60.0, "",
                        Array(repeating: "09:00:00", count: count) as [String?], Array(repeating: nil, count: count) as [Int?],
                    ]
                    plan = try ExplainedPlan(
                        analyzing: SmallNotificationStore.smallInsertWithLocalTimeSQL, parameters, on: seed.connection, keep: true,
                        generic: true)
                } else {
                    // One broadcast whose page holds every subscription, each in its own zone.
                    let notification = try seed.notification(
                        message: #"{"contents": "hi", "delivery_time_of_day": "09:00"}"#, target: #"{"all": true}"#)
                    deliveries = count
                    let query = AudienceQuery(
                        selection: AudienceSelection(target: .all, platforms: nil), first: true,
                        localTime: ExpansionStore.LocalTimeSchedule(timeOfDay: "09:00:00", ttl: 2_419_200))
                    let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
                    plan = try ExplainedPlan(
                        analyzing: query.sql, [notification, seed.appID, nilUUID, 5_000, 5, nil as [String]?] + query.parameters,
                        on: seed.connection, keep: true)
                }
                #expect(plan.rowsRemovedByJoinFilters() < Double(deliveries), "\(plan.text)")
                let scheduled = try seed.connection.query(
                    "SELECT count(*) FILTER (WHERE local_due_at IS NOT NULL AND run_at = local_due_at) AS n FROM deliveries")[0]
                #expect(try scheduled.decode(Int.self, "n") == deliveries)
            }
        }
    }

    @Test(arguments: [false, true])
    func aMalformedTimeFailsTheNotificationAtExpansion(small: Bool) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let subscription = try seed.subscription()
                let target = small ? #"{"include_subscription_ids": ["\#(subscription)"]}"# : #"{"all": true}"#
                let bad = try seed.notification(message: #"{"contents": "hi", "delivery_time_of_day": "9am"}"#, target: target)
                let good = try seed.notification(message: #"{"contents": "hi", "delivery_time_of_day": "09:00"}"#, target: target)
                if small {
                    var suspects = ExpansionSuspects()
                    _ = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                } else {
                    while try ExpansionStore.expandNext(on: seed.connection) != nil {}
                }
                let rows = try seed.connection.query(
                    "SELECT id, status, status_reason, (SELECT count(*) FROM deliveries d WHERE d.notification_id = n.id) AS d FROM notifications n")
                for row in rows {
                    let id = try row.decode(UUID.self, "id")
                    if id == bad {
                        #expect(row["status"] == "failed")
                        #expect(row["status_reason"]?.hasPrefix("invalid_message: delivery_time_of_day must be a local time of day") == true, "\(row["status_reason"] ?? "")")
                        #expect(row["d"] == "0")
                    } else {
                        #expect(id == good)
                        #expect(row["status"] == "expanded")
                        #expect(row["d"] == "1")
                    }
                }
            }
        }
    }

    /// `notification_counts.scheduled` counts deliveries waiting for their local time; a cancellation sweeps
    /// them as `skipped` / `canceled` like any pending delivery.
    @Test func scheduledCountAndCancellation() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                // A zone where 09:00 is between 1 and 25 hours ahead: the local time one hour from now, in UTC.
                let subscriptions = try (0..<5).map { _ in try seed.subscription() }
                _ = try seed.connection.query("UPDATE subscriptions SET timezone = 'UTC' WHERE app_id = $1", [seed.appID])
                let time = try seed.connection.query(
                    "SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 hour', 'HH24:MI') AS t")[0]["t"]!
                let notification = try seed.notification(
                    message: #"{"contents": "hi", "delivery_time_of_day": "\#(time)"}"#, target: #"{"all": true}"#)
                while try ExpansionStore.expandNext(on: seed.connection) != nil {}
                func counts() throws -> PostgresRow {
                    try seed.connection.query(
                        "SELECT targeted, sent, skipped, deferred, scheduled FROM notification_counts WHERE notification_id = $1",
                        [notification])[0]
                }
                var row = try counts()
                #expect(row["targeted"] == "\(subscriptions.count)")
                #expect(row["scheduled"] == "\(subscriptions.count)")
                #expect(row["sent"] == "0")
                // Nothing is due: a claim takes none of them.
                #expect(try ClaimStore.claim(on: seed.connection, limit: 100, lease: .seconds(60), workerID: "A").isEmpty)
                // Cancel: the sweep takes the scheduled deliveries too.
                _ = try seed.connection.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [notification])
                let swept = try ExpansionStore.sweepCanceled(on: seed.connection)
                #expect(swept?.skipped == subscriptions.count)
                row = try counts()
                #expect(row["scheduled"] == "0")
                #expect(row["skipped"] == "\(subscriptions.count)")
            }
        }
    }
}
