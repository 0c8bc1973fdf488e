import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// Small notifications expanded in bulk (docs/targets.md, "Small notifications in bulk") against a real PostgreSQL.
@Suite("Small notifications expanded in bulk")
struct SmallNotificationExpansionTests {
    /// `count` subscriptions of `seed`'s app, each with its own user `user-<n>`, in creation order.
    static func subscribers(_ seed: Seed, _ count: Int, platform: String = "ios") throws -> [UUID] {
        try (0..<count).map { index in
            try seed.subscription(user: try seed.user("user-\(platform)-\(index)"), platform: platform)
        }
    }

    static func oneDevice(_ seed: Seed, _ subscription: UUID) throws -> UUID {
        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription.uuidString.lowercased())"]}"#)
    }

    /// deliveries per notification, and the notifications' status and targeted_count.
    static func outcome(_ seed: Seed) throws -> [UUID: (status: String, targeted: String?, deliveries: Int, reason: String?)] {
        var result: [UUID: (status: String, targeted: String?, deliveries: Int, reason: String?)] = [:]
        for row in try seed.connection.query(
            """
            SELECT n.id, n.status, n.targeted_count, n.status_reason,
                   (SELECT count(*) FROM deliveries d WHERE d.notification_id = n.id) AS deliveries
            FROM notifications n
            """)
        {
            result[try row.decode(UUID.self, "id")] = (
                row["status"] ?? "", row["targeted_count"], try row.decode(Int.self, "deliveries"), row["status_reason"]
            )
        }
        return result
    }

    @Test func manySmallNotificationsExpandInOneTransactionWithExactlyTheirAudience() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let devices = try Self.subscribers(seed, 120)
                let android = try seed.subscription(user: try seed.user("two-devices"), platform: "android")
                let iosOfSameUser = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, user_id, platform, token) SELECT app_id, user_id, 'ios', 'ab' FROM
                    subscriptions WHERE id = $1 RETURNING id
                    """, [android])[0].decode(UUID.self, "id")
                let small = try devices.map { try Self.oneDevice(seed, $0) }
                // External ids (two devices of one user), a platform narrowing, an unknown id, a listed duplicate.
                let byUser = try seed.notification(target: #"{"include_external_ids": ["two-devices", "nobody"]}"#)
                let onlyAndroid = try seed.notification(
                    target: #"{"include_external_ids": ["two-devices"], "platforms": ["android"]}"#)
                let duplicate = try seed.notification(
                    target: #"{"include_subscription_ids": ["\#(devices[0])", "\#(devices[0])", "\#(UUID())"]}"#)
                // Not small: a broadcast and a refused target are not taken (the refused one fails in the pass).
                let broadcast = try seed.notification(target: #"{"all": true}"#)
                let refused = try seed.notification(target: #"{"include_subscription_ids": ["not-a-uuid"]}"#)

                var suspects = ExpansionSuspects()
                let pass = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                #expect(pass.picked == small.count + 4)
                #expect(pass.transactions == 1)
                #expect(pass.expanded == small.count + 3)
                #expect(pass.failed.map(\.notificationID) == [refused])
                #expect(!pass.fellBack)
                let outcome = try Self.outcome(seed)
                for (index, id) in small.enumerated() {
                    #expect(outcome[id]?.status == "expanded")
                    #expect(outcome[id]?.deliveries == 1)
                    #expect(outcome[id]?.targeted == "1")
                    let reached = try seed.connection.query(
                        "SELECT subscription_id, priority FROM deliveries WHERE notification_id = $1", [id])
                    #expect(try reached.first?.decode(UUID.self, "subscription_id") == devices[index])
                    // Listed forms are claimed ahead of broadcasts of the same urgency.
                    #expect(reached.first?["priority"] == "6")
                }
                let reachedByUser = Set(
                    try seed.connection.query("SELECT subscription_id FROM deliveries WHERE notification_id = $1", [byUser])
                        .map { try $0.decode(UUID.self, "subscription_id") })
                #expect(reachedByUser == [android, iosOfSameUser])
                #expect(outcome[byUser]?.targeted == "2")
                #expect(outcome[onlyAndroid]?.deliveries == 1)
                #expect(outcome[duplicate]?.deliveries == 1)
                #expect(outcome[duplicate]?.targeted == "1")
                #expect(outcome[refused]?.status == "failed")
                #expect(outcome[refused]?.reason?.hasPrefix("invalid_target:") == true)
                #expect(outcome[broadcast]?.status == "pending")
                // Nothing small is left; a second pass picks nothing and the broadcast goes the chunked way.
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked == 0)
                let next = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall)
                #expect(next == .expanded(notificationID: broadcast, created: devices.count + 2))
            }
        }
    }

    /// A pass costs its lists, not the apps: in an app of 3,000 subscriptions, the bulk statement for a few
    /// listed subscriptions and users reads only those rows of `subscriptions` and `users`.
    @Test func aPassReadsItsListsNotTheApp() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query(
                    """
                    WITH u AS (
                        INSERT INTO users (app_id, external_id) SELECT $1, 'bulk-' || n FROM generate_series(1, 3000) n
                        RETURNING id
                    )
                    INSERT INTO subscriptions (app_id, user_id, platform, token) SELECT $1, id, 'ios', 'a0a0' FROM u
                    """, [seed.appID])
                let listed = try Self.subscribers(seed, 2)
                let twoDevices = try seed.user("two-devices")
                let devices = [try seed.subscription(user: twoDevices), try seed.subscription(user: twoDevices, platform: "android")]
                let byID = try seed.notification(target: "{}")
                let byUser = try seed.notification(target: "{}")
                let parameters: [any PostgresEncodable] = [
                    [byID, byUser], [seed.appID, seed.appID], [6, 6], [nil, nil] as [String?],
                    [byID, byID, byID], [listed[0], listed[1], UUID()],
                    [byUser, byUser], ["two-devices", "nobody"],
                    ["device", "device"], [false, false], 60.0, "",
                ]
                let plan = try ExplainedPlan(
                    analyzing: SmallNotificationStore.smallInsertPlainSQL, parameters, on: seed.connection, keep: true)
                #expect(plan.rowsRead(of: "subscriptions") <= 10, "\(plan.text)")
                #expect(plan.rowsRead(of: "users") <= 10, "\(plan.text)")
                let reached = try seed.connection.query("SELECT notification_id, subscription_id FROM deliveries")
                    .map { [try $0.decode(UUID.self, "notification_id"), try $0.decode(UUID.self, "subscription_id")] }
                #expect(Set(reached) == [[byID, listed[0]], [byID, listed[1]], [byUser, devices[0]], [byUser, devices[1]]])
            }
        }
    }

    /// The pass as the worker runs it, a prepared statement whose generic plan knows no array's length: its
    /// work grows with the notifications, not with their square (it once joined each notification with every
    /// count: 250,000 comparisons for 500).
    @Test func aPassUnderItsGenericPlanComparesNotEveryNotificationWithEveryOther() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let count = SmallNotificationStore.smallNotificationBatch
                let leased = SmallNotificationStore.maximumLeasedPerPass
                let pairs = try seed.connection.query(
                    """
                    WITH s AS (
                        INSERT INTO subscriptions (app_id, platform, token)
                        SELECT $1, 'ios', 'a0a0' || n FROM generate_series(1, $2) n RETURNING id
                    )
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "hi"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array(id))
                    FROM s RETURNING id, (target->'include_subscription_ids'->>0)::uuid AS subscription_id
                    """, [seed.appID, count])
                let notifications = try pairs.map { try $0.decode(UUID.self, "id") }
                let subscriptions = try pairs.map { try $0.decode(UUID.self, "subscription_id") }
                // A history of expanded notifications: a scan of the table would read them too.
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{"contents": {"en": "old"}}', '{"all": true}', 'expanded' FROM generate_series(1, 5000)
                    """, [seed.appID])
                let parameters: [any PostgresEncodable] = [
                    notifications, Array(repeating: seed.appID, count: count), Array(repeating: 6, count: count),
                    Array(repeating: nil, count: count) as [String?],
                    notifications, subscriptions, [] as [UUID], [] as [String],
                    Array(repeating: "device", count: count),
                    // As many rows leased as a pass leases at most, returned in the claim's row shape: their joins too.
                    (0..<count).map { $0 < leased }, 60.0, "explaining-worker",
                ]
                let plan = try ExplainedPlan(
                    analyzing: SmallNotificationStore.smallInsertPlainSQL, parameters, on: seed.connection, keep: true, generic: true)
                // A generic plan knows no array's length (PostgreSQL assumes 10 elements).
                #expect(!plan.estimatedRows(ofNodeType: "Function Scan").contains(Double(count)), "\(plan.text)")
                // The leased rows' join to their notifications in the claim's tail compares each with each: bounded by
                // what a pass leases, whatever the pass's size.
                #expect(plan.rowsRemovedByJoinFilters() <= Double(count + leased * leased), "\(plan.text)")
                #expect(plan.rowsRead(of: "notifications") <= Double(count + leased), "\(plan.text)")
                let done = try seed.connection.query(
                    """
                    SELECT count(*) FILTER (WHERE status = 'expanded' AND targeted_count = 1) AS expanded,
                           (SELECT count(*) FROM deliveries) AS deliveries
                    FROM notifications WHERE id = ANY ($1)
                    """, [notifications])[0]
                #expect(try done.decode(Int.self, "expanded") == count)
                #expect(try done.decode(Int.self, "deliveries") == count)
            }
        }
    }

    /// Whether any app is send-rate limited (asked by the deliveries insert trigger on every pass) reads no row
    /// of `apps` when none is (migration 0018), however many tenants there are.
    @Test func aPassReadsNoAppsRowWhenNoAppIsLimited() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query("INSERT INTO apps (id) SELECT gen_random_uuid() FROM generate_series(1, 3000)")
                _ = try seed.connection.query("ANALYZE apps")
                let devices = try Self.subscribers(seed, 3)
                for device in devices { _ = try Self.oneDevice(seed, device) }
                let read = try rowsRead(of: "apps", on: seed.connection) { () throws in
                    var suspects = ExpansionSuspects()
                    #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).created == 3)
                }
                #expect(read <= 10)
            }
        }
    }

    /// The pass's statements run under generic plans made once per connection. One made while the tables held
    /// three rows must still look every listed id and user up by key once they hold 20,000 (statistics not yet
    /// refreshed): a plan that scans the table inside each lookup read it once per listed id.
    @Test func aGenericPlanMadeOnTinyTablesStillLooksUpByKey() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                for table in ["subscriptions", "users", "notifications"] {
                    _ = try seed.connection.query("ALTER TABLE \(table) SET (autovacuum_enabled = false)")
                }
                let few = try Self.subscribers(seed, 3)
                _ = try seed.connection.query("ANALYZE subscriptions, users, notifications")
                var suspects = ExpansionSuspects()
                for device in few { _ = try Self.oneDevice(seed, device) }
                _ = try seed.connection.query(
                    #"INSERT INTO notifications (app_id, message, target) VALUES ($1, '{"contents": {"en": "hi"}}', '{"include_external_ids": ["user-ios-0"]}')"#,
                    [seed.appID])
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).expanded == 4)
                // 20,000 more subscriptions, each with its own user; the statistics still say three.
                _ = try seed.connection.query(
                    "INSERT INTO users (app_id, external_id) SELECT $1, 'bulk-' || n FROM generate_series(1, 20000) n", [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, user_id, platform, token)
                    SELECT app_id, id, 'ios', 'a0a0' || md5(external_id) FROM users WHERE external_id LIKE 'bulk-%'
                    """)
                let listed = try seed.connection.query(
                    "SELECT s.id, u.external_id FROM subscriptions s JOIN users u ON u.id = s.user_id WHERE u.external_id LIKE 'bulk-%' LIMIT 40"
                ).map { (try $0.decode(UUID.self, "id"), $0["external_id"] ?? "") }
                for index in stride(from: 0, to: 20, by: 2) {
                    let ids = listed[index..<index + 2].map { #""\#($0.0.uuidString.lowercased())""# }.joined(separator: ", ")
                    _ = try seed.notification(target: #"{"include_subscription_ids": [\#(ids)]}"#)
                    _ = try seed.notification(target: #"{"include_external_ids": ["\#(listed[20 + index].1)"]}"#)
                }
                var subscriptionsRead = 0
                let usersRead = try rowsRead(of: "users", on: seed.connection) { () throws in
                    subscriptionsRead = try rowsRead(of: "subscriptions", on: seed.connection) { () throws in
                        #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).created == 30)
                    }
                }
                // 30 listed subscriptions and 10 users (by key, plus their devices): a scan of either table read 20,000.
                #expect(subscriptionsRead <= 200)
                #expect(usersRead <= 200)
            }
        }
    }

    /// `count` subscriptions of one new user `externalID`, made in one statement.
    static func devices(_ seed: Seed, of externalID: String, count: Int) throws {
        let user = try seed.user(externalID)
        _ = try seed.connection.query(
            "INSERT INTO subscriptions (app_id, user_id, platform, token) SELECT $1, $2, 'ios', 'a0a0' FROM generate_series(1, $3::integer)",
            [seed.appID, user, count])
    }

    /// A target's size bounds its ids, not its audience: a pass creates at most `smallPassDeliveryBudget`
    /// deliveries. A notification to a user with more devices than that goes the chunked way (no transaction
    /// larger than a chunk), and so does a heavy one (a tenth of the budget or more) that does not fit what is
    /// left; a light one that does not fit waits for the next pass; all end expanded with every device once.
    @Test func aPassCreatesAtMostItsBudgetAndLargeAudiencesGoTheChunkedWay() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let budget = SmallNotificationStore.smallPassDeliveryBudget
                let lightCount = SmallNotificationStore.smallPassHeavyCost - 1
                try Self.devices(seed, of: "heavy", count: budget + 1)
                try Self.devices(seed, of: "two-fifths", count: budget * 2 / 5)
                try Self.devices(seed, of: "light", count: lightCount)
                func to(_ user: String) throws -> UUID { try seed.notification(target: #"{"include_external_ids": ["\#(user)"]}"#) }
                let heavy = try to("heavy")
                let fits = try (0..<2).map { _ in try to("two-fifths") }
                let lights = try (0..<3).map { _ in try to("light") }
                let late = try to("two-fifths")
                let device = try seed.subscription()
                let single = try Self.oneDevice(seed, device)

                var suspects = ExpansionSuspects()
                let first = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                // Two fifths twice and two light ones fit, and the one-device one; the third light one waits, the
                // third two-fifths one is heavy and goes the chunked way.
                #expect(first.chunked == [heavy, late])
                #expect(first.expanded == 5)
                #expect(first.deferred == 1)
                #expect(first.created == 2 * (budget * 2 / 5) + 2 * lightCount + 1)
                #expect(first.created <= budget)
                let second = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                #expect(second.expanded == 1 && second.deferred == 0 && second.chunked.isEmpty)
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked == 0)
                // The chunked ones, chunk by chunk, none larger than a chunk.
                var chunks: [UUID: [Int]] = [:]
                while case let result? = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall) {
                    switch result {
                    case .expanding(let id, let created), .expanded(let id, let created): chunks[id, default: []].append(created)
                    default: Issue.record("unexpected \(result)")
                    }
                }
                #expect(chunks[heavy]?.count == 2 && chunks[late]?.count == 1)
                #expect(chunks.values.joined().allSatisfy { $0 <= ExpansionStore.expansionChunkSize })
                let outcome = try Self.outcome(seed)
                #expect(outcome[heavy]?.status == "expanded" && outcome[heavy]?.deliveries == budget + 1)
                for id in fits + [late] { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == budget * 2 / 5) }
                for id in lights { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == lightCount) }
                #expect(outcome[single]?.deliveries == 1)
            }
        }
    }

    /// Counting the devices of listed users reads a bounded number of entries, not what the users own: one past
    /// the budget in pick order (again after a notification that passed it alone, a few times), then at most
    /// ``SmallNotificationStore/smallPassHeavyCost`` for each notification after that. Eight notifications of three users with
    /// 2,000 devices each (48,000 devices) cost a pass about 22,000 entries, not 48,000 (each user's devices were
    /// counted up to the budget, whatever the others had); the light ones behind them are counted exactly and
    /// expanded in the same pass. Every device gets its delivery once.
    @Test func countingListedUsersDevicesReadsAboutAPassesWorth() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let budget = SmallNotificationStore.smallPassDeliveryBudget
                var heavy: [UUID] = []
                for n in 0..<8 {
                    let users = (0..<3).map { "user-\(n)-\($0)" }
                    for user in users { try Self.devices(seed, of: user, count: 2000) }
                    let list = users.map { "\"\($0)\"" }.joined(separator: ",")
                    heavy.append(try seed.notification(target: #"{"include_external_ids": [\#(list)]}"#))
                }
                let light = try (0..<3).map { n in
                    try Self.devices(seed, of: "light-\(n)", count: 2)
                    return try seed.notification(target: #"{"include_external_ids": ["light-\#(n)"]}"#)
                }
                // Not vacuumed: the count's index-only scans visit every row's heap tuple, which the counters see.
                var suspects = ExpansionSuspects()
                var first = SmallNotificationStore.SmallExpansionResult()
                let read = try rowsRead(of: "subscriptions", on: seed.connection) { () throws in
                    first = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                }
                #expect(first.chunked == heavy)
                #expect(first.expanded == 3 && first.created == 6 && first.deferred == 0)
                // The ordered counts (one past the budget each, one notification passed each), the rest each up to
                // the heavy cost, the light ones' inserts.
                let ordered = SmallNotificationStore.maxOrderedDeviceCounts
                let bound = ordered * (budget + 1) + (heavy.count - ordered + light.count) * SmallNotificationStore.smallPassHeavyCost + 6
                #expect(read <= bound, "\(read) subscriptions read")
                #expect(read < 8 * 6000 / 2)
                // rowsRead rolled the pass back: now for real, then the chunked ones.
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).chunked == heavy)
                while try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall) != nil {}
                let outcome = try Self.outcome(seed)
                for id in heavy { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == 6000) }
                for id in light { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == 2) }
            }
        }
    }

    /// Light notifications waiting behind a full pass are not all counted again on every pass: after the budget's
    /// count, the rest are counted up to ``SmallNotificationStore/classifyingDeviceCount`` devices in all. 100 notifications to
    /// users with 400 devices each (40,000): a pass reads about 30,000 entries (the budget's count, the
    /// classifying count, its inserts), not 40,000 and more, and they all expand, twelve a pass.
    @Test func waitingLightNotificationsAreCountedWithinABound() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let budget = SmallNotificationStore.smallPassDeliveryBudget
                let notifications = try (0..<100).map { n in
                    try Self.devices(seed, of: "user-\(n)", count: 400)
                    return try seed.notification(target: #"{"include_external_ids": ["user-\#(n)"]}"#)
                }
                // Not vacuumed: the count's index-only scans visit every row's heap tuple, which the counters see.
                var suspects = ExpansionSuspects()
                var first = SmallNotificationStore.SmallExpansionResult()
                let read = try rowsRead(of: "subscriptions", on: seed.connection) { () throws in
                    first = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                }
                #expect(first.expanded == budget / 400 && first.created == budget / 400 * 400, "\(first)")
                #expect(first.deferred == 100 - budget / 400 && first.chunked.isEmpty, "\(first)")
                #expect(read <= budget + 1 + SmallNotificationStore.classifyingDeviceCount + budget, "\(read) subscriptions read")
                #expect(read < 100 * 400, "\(read) subscriptions read")
                var passes = 0
                while try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked > 0 { passes += 1 }
                #expect(passes == (100 + budget / 400 - 1) / (budget / 400))
                let outcome = try Self.outcome(seed)
                for id in notifications { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == 400) }
            }
        }
    }

    /// Listed external ids that name no user still cost the pass their lookups: a pass takes no more listed ids
    /// than its budget, whatever they reach, and sends the heavy rest the chunked way (each pass looks every id up twice,
    /// to count devices and to insert, so unknown users once made a full pass of 500 notifications cost
    /// hundreds of thousands of lookups while counting as nothing).
    @Test func unknownExternalIDsCountAgainstAPassesBudget() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let budget = SmallNotificationStore.smallPassDeliveryBudget
                // Three-character ids, as many as fit a small target (8 KiB as jsonb's text: `"abc", ` is 7 bytes),
                // none of them a user.
                let digits = Array("abcdefghijklmnopqrstuvwxyz0123456789")
                let perNotification = (SmallNotificationStore.smallTargetBytes - 64) / 7
                let notifications = try (0..<5).map { n in
                    let ids = (0..<perNotification).map { i in
                        "\"\(digits[n])\(digits[i / 36 % 36])\(digits[i % 36])\""
                    }
                    return try seed.notification(target: #"{"include_external_ids": [\#(ids.joined(separator: ","))]}"#)
                }
                #expect(perNotification * notifications.count > budget)
                var suspects = ExpansionSuspects()
                let first = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                #expect(first.expanded == budget / perNotification)
                #expect(first.created == 0)
                // Each is heavy (more than a tenth of the budget): what does not fit goes the chunked way, so no
                // later pass picks and parses it again.
                #expect(perNotification >= SmallNotificationStore.smallPassHeavyCost)
                #expect(first.chunked.count == notifications.count - budget / perNotification && first.deferred == 0)
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked == 0)
                while try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall) != nil {}
                let outcome = try Self.outcome(seed)
                for id in notifications { #expect(outcome[id]?.status == "expanded" && outcome[id]?.deliveries == 0) }
            }
        }
    }

    /// Notifications scheduled for later stay out of the bulk pick's index until their send_after passes and
    /// the worker releases them: a pick reads none of the 2,000 waiting; one released (or moved to the past by
    /// its producer) is taken by the next pass.
    @Test func scheduledNotificationsWaitOutsideThePickUntilReleased() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let device = try seed.subscription()
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, send_after)
                    SELECT $1, '{"contents": {"en": "later"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array($2::uuid)),
                           now() + interval '1 day'
                    FROM generate_series(1, 2000)
                    """, [seed.appID, device])
                let soon = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, send_after)
                    VALUES ($1, '{"contents": {"en": "soon"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array($2::uuid)),
                            now() + interval '1 hour')
                    RETURNING id
                    """, [seed.appID, device])[0].decode(UUID.self, "id")
                let moved = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, send_after)
                    VALUES ($1, '{"contents": {"en": "moved"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array($2::uuid)),
                            now() + interval '1 day')
                    RETURNING id
                    """, [seed.appID, device])[0].decode(UUID.self, "id")
                let now = try Self.oneDevice(seed, device)
                _ = try seed.connection.query("ANALYZE notifications")
                let plan = try ExplainedPlan(
                    analyzing: SmallNotificationStore.smallPickSQL(limit: 500), [ExpansionStore.schedulingMemberBytes], on: seed.connection)
                #expect(plan.rowsRead(of: "notifications") <= 2, "\(plan.text)")

                var suspects = ExpansionSuspects()
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).expanded == 1)
                #expect(try Self.outcome(seed)[now]?.status == "expanded")
                // The producer moves one to the past: its own update clears the flag.
                _ = try seed.connection.query("UPDATE notifications SET send_after = now() - interval '1 minute' WHERE id = $1", [moved])
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).expanded == 1)
                #expect(try Self.outcome(seed)[moved]?.status == "expanded")
                // Not due yet: nothing to release, nothing picked.
                #expect(try ExpansionStore.releaseScheduled(on: seed.connection) == 0)
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked == 0)
                // Its time comes: its send_after moves into the past with the triggers off (they would clear the
                // flag as a producer's update does), which is what the clock passing it looks like to the release.
                try seed.connection.execute("BEGIN")
                try seed.connection.execute("SET LOCAL session_replication_role = replica")
                _ = try seed.connection.query(
                    "UPDATE notifications SET send_after = now() - interval '1 second' WHERE id = $1", [soon])
                try seed.connection.execute("COMMIT")
                #expect(try ExpansionStore.releaseScheduled(on: seed.connection) == 1)
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).expanded == 1)
                #expect(try Self.outcome(seed)[soon]?.status == "expanded")
            }
        }
    }

    @Test func theBatchSizeBoundsAPassAndTheRestFollowOldestFirst() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let devices = try Self.subscribers(seed, 7)
                let small = try devices.map { try Self.oneDevice(seed, $0) }
                var suspects = ExpansionSuspects()
                var passes: [Int] = []
                while true {
                    let pass = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, limit: 3, suspects: &suspects)
                    if pass.picked == 0 { break }
                    passes.append(pass.expanded)
                    #expect(pass.transactions == 1)
                }
                #expect(passes == [3, 3, 1])
                let order = try seed.connection.query("SELECT id FROM notifications ORDER BY expanded_at, expansion_touched_at")
                    .map { try $0.decode(UUID.self, "id") }
                #expect(Array(order.prefix(3)).sorted { $0.uuidString < $1.uuidString } == Array(small.prefix(3)).sorted { $0.uuidString < $1.uuidString })
            }
        }
    }

    /// A statement of the pass fails on one notification's data (a trigger raising 22003 for it): the pass is
    /// rolled back and redone one at a time, so the others expand at once and the poisoned one is set aside,
    /// then failed on evidence with its SQLSTATE on its next try.
    @Test func aPoisonedNotificationAmongSmallOnesFailsAloneAndTheOthersExpand() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let devices = try Self.subscribers(seed, 20)
                let small = try devices.map { try Self.oneDevice(seed, $0) }
                let poisoned = small[7]
                try seed.poisonDeliveries(
                    before: "INSERT",
                    """
                    IF NEW.notification_id = '\(poisoned)' THEN
                        RAISE EXCEPTION 'value out of range' USING ERRCODE = '22003';
                    END IF;
                    """)
                var suspects = ExpansionSuspects()
                let pass = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                #expect(pass.fellBack)
                #expect(pass.picked == 20)
                #expect(pass.expanded == 19)
                #expect(pass.setAside == [poisoned])
                #expect(pass.failed.isEmpty)
                var outcome = try Self.outcome(seed)
                for id in small where id != poisoned {
                    #expect(outcome[id]?.status == "expanded")
                    #expect(outcome[id]?.deliveries == 1)
                }
                #expect(outcome[poisoned]?.status == "pending")
                // No longer small (touched): the chunked path takes it and convicts it.
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).picked == 0)
                let next = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall)
                guard case .failed(poisoned, let reason)? = next else {
                    Issue.record("expected the poisoned notification to fail, got \(String(describing: next))")
                    return
                }
                #expect(reason.hasPrefix("data_exception: SQLSTATE 22003"))
                outcome = try Self.outcome(seed)
                #expect(outcome[poisoned]?.status == "failed")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "19")
            }
        }
    }

    /// The expand loop's order of calls: a bulk pass, then one chunk of anything else. A broadcast in flight
    /// still gets a chunk after every pass although small notifications keep arriving, and every small one
    /// created during the broadcast is expanded before the broadcast's next chunk.
    @Test func aBroadcastAndAStreamOfSmallNotificationsInterleave() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let devices = try Self.subscribers(seed, 10)
                let broadcast = try seed.notification(target: #"{"all": true}"#)
                var suspects = ExpansionSuspects()
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 2, suspects: &suspects)
                        == .expanding(notificationID: broadcast, created: 2))
                var broadcastChunks = 1
                var round = 0
                while true {
                    round += 1
                    // Two new small notifications per round, created before the pass...
                    let arrived = try devices.prefix(2).map { try Self.oneDevice(seed, $0) }
                    let pass = try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects)
                    // (with the two that arrived after the previous pass)
                    #expect(pass.expanded == (round == 1 ? 2 : 4))
                    // ...and two more right after it: the broadcast's chunk still comes first.
                    let late = try devices.suffix(2).map { try Self.oneDevice(seed, $0) }
                    let chunk = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 2, suspects: &suspects, pick: .skippingSmall)
                    let outcome = try Self.outcome(seed)
                    for id in arrived { #expect(outcome[id]?.status == "expanded") }
                    for id in late { #expect(outcome[id]?.status == "pending") }
                    switch chunk {
                    case .expanding(broadcast, _)?: broadcastChunks += 1
                    case .expanded(broadcast, _)?:
                        broadcastChunks += 1
                        #expect(broadcastChunks == 6)
                        #expect(round == 5)
                        #expect(try Self.outcome(seed)[broadcast]?.deliveries == devices.count)
                        return
                    default:
                        Issue.record("round \(round): expected a chunk of the broadcast, got \(String(describing: chunk))")
                        return
                    }
                    if round > 10 {
                        Issue.record("the broadcast does not finish")
                        return
                    }
                }
            }
        }
    }

    /// Migration 0008 replaced the foreign key deliveries.subscription_id by a statement-level trigger: deleting
    /// subscriptions (directly, or through their app) still deletes their queued deliveries.
    @Test func deletingSubscriptionsStillDeletesTheirQueuedDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let devices = try Self.subscribers(seed, 3)
                for device in devices { _ = try Self.oneDevice(seed, device) }
                let other = try Seed(url)
                try other.app()
                _ = try Self.oneDevice(other, try other.subscription())
                var suspects = ExpansionSuspects()
                #expect(try SmallNotificationStore.expandSmallNotifications(on: seed.connection, suspects: &suspects).created == 4)
                _ = try seed.connection.query("DELETE FROM subscriptions WHERE id = $1", [devices[0]])
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "3")
                _ = try seed.connection.query("DELETE FROM apps WHERE id = $1", [seed.appID])
                let left = try seed.connection.query("SELECT app_id FROM deliveries")
                #expect(try left.map { try $0.decode(UUID.self, "app_id") } == [other.appID])
            }
        }
    }

    /// The race the foreign key used to close (a delivery inserted while its subscription is deleted) leaves a
    /// delivery without its subscription: it is claimed as status `deleted` (the send pipeline skips it as
    /// subscription_inactive), never leased again and again unseen.
    @Test func aDeliveryWhoseSubscriptionIsGoneIsClaimedAsDeleted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                let gone = UUID()
                _ = try seed.connection.query(
                    "INSERT INTO deliveries (notification_id, subscription_id, app_id) VALUES ($1, $2, $3)",
                    [notification, gone, seed.appID])
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "test")
                #expect(claimed.count == 1)
                #expect(claimed.first?.subscriptionID == gone)
                #expect(claimed.first?.subscriptionStatus == "deleted")
            }
        }
    }
}
