import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// Audience expansion (docs/targets.md) against a real PostgreSQL.
@Suite("Audience expansion against PostgreSQL")
struct ExpansionTests {
    /// A small audience covering every field a target can select on, plus rows no target may reach.
    struct Audience {
        let seed: Seed
        var a1 = UUID(), a2 = UUID(), b1 = UUID(), c1 = UUID(), x1 = UUID(), inactive = UUID(), otherApp = UUID()

        init(_ url: String) throws {
            seed = try Seed(url)
            try seed.app()
            let alice = try user("alice", #"{"level": 5, "plan": "gold", "vip": true}"#)
            let bob = try user("bob", #"{"level": "2", "plan": "silver"}"#)
            let carol = try user("carol", #"{"nick": "gold"}"#)
            a1 = try subscription(alice, "ios", "en", "US")
            a2 = try subscription(alice, "android", "tr", "TR")
            b1 = try subscription(bob, "web", "tr", nil)
            c1 = try subscription(carol, "ios", "de", "DE")
            x1 = try subscription(nil, "android", "en", "US")
            inactive = try subscription(alice, "ios", "en", "US", status: "unsubscribed")
            // Another app with a user of the same external id: never part of this app's audience.
            let other = UUID()
            _ = try seed.connection.query("INSERT INTO apps (id) VALUES ($1)", [other])
            let otherAlice = try seed.connection.query(
                "INSERT INTO users (app_id, external_id, tags) VALUES ($1, 'alice', '{\"level\": 9}') RETURNING id",
                [other])[0].decode(UUID.self, "id")
            otherApp = try seed.connection.query(
                """
                INSERT INTO subscriptions (app_id, user_id, platform, token, language, country)
                VALUES ($1, $2, 'ios', 'ff', 'en', 'US') RETURNING id
                """, [other, otherAlice])[0].decode(UUID.self, "id")
        }

        private func user(_ externalID: String, _ tags: String) throws -> UUID {
            try seed.connection.query(
                "INSERT INTO users (app_id, external_id, tags) VALUES ($1, $2, $3::jsonb) RETURNING id",
                [seed.appID, externalID, tags])[0].decode(UUID.self, "id")
        }

        private func subscription(
            _ user: UUID?, _ platform: String, _ language: String, _ country: String?, status: String = "active"
        ) throws -> UUID {
            try seed.connection.query(
                """
                INSERT INTO subscriptions (app_id, user_id, platform, token, language, country, status)
                VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id
                """, [seed.appID, user, platform, Seed.token(), language, country, status]
            )[0].decode(UUID.self, "id")
        }

        /// Creates a notification for `target`, expands it to the end in chunks of 2 and returns the
        /// subscriptions it reached, checking `targeted_count` on the way.
        func expand(_ target: String) throws -> Set<UUID> {
            let id = try seed.notification(target: target)
            var chunks = 0
            while let result = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 2) {
                chunks += 1
                if case .failed(_, let reason) = result { Issue.record("\(target) failed: \(reason)") }
                if case .expanded = result { break }
            }
            #expect(chunks >= 1)
            let rows = try seed.connection.query(
                "SELECT subscription_id FROM deliveries WHERE notification_id = $1", [id])
            let reached = Set(try rows.map { try $0.decode(UUID.self, "subscription_id") })
            let status = try seed.connection.query(
                "SELECT status, targeted_count FROM notifications WHERE id = $1", [id])[0]
            #expect(status["status"] == "expanded", "\(target)")
            #expect(status["targeted_count"] == "\(reached.count)", "\(target)")
            return reached
        }
    }

    @Test func everyTargetFormReachesExactlyItsAudience() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let a = try Audience(url)
                func ids(_ list: [UUID]) -> String { list.map { "\"\($0)\"" }.joined(separator: ", ") }
                let cases: [(String, Set<UUID>)] = [
                    (#"{"include_subscription_ids": [\#(ids([a.a1, a.b1, a.inactive, a.otherApp]))]}"#, [a.a1, a.b1]),
                    (#"{"include_external_ids": ["alice", "bob", "nobody"]}"#, [a.a1, a.a2, a.b1]),
                    // A repeated id or user is one delivery.
                    (#"{"include_subscription_ids": [\#(ids([a.b1, a.a1, a.b1, a.a1, a.c1]))]}"#, [a.a1, a.b1, a.c1]),
                    (#"{"include_external_ids": ["bob", "alice", "bob"]}"#, [a.a1, a.a2, a.b1]),
                    (#"{"include_external_ids": ["alice"], "platforms": ["android"]}"#, [a.a2]),
                    (#"{"all": true}"#, [a.a1, a.a2, a.b1, a.c1, a.x1]),
                    (#"{"all": true, "platforms": ["ios", "web"]}"#, [a.a1, a.b1, a.c1]),
                    (#"{"filters": [{"field": "tag", "key": "level", "relation": ">", "value": 3}]}"#, [a.a1, a.a2]),
                    // "2" stored as a string still compares as a number; "gold" never does (and fails nothing).
                    (#"{"filters": [{"field": "tag", "key": "level", "relation": "<", "value": 3}]}"#, [a.b1]),
                    (#"{"filters": [{"field": "tag", "key": "nick", "relation": ">", "value": 1}]}"#, []),
                    (#"{"filters": [{"field": "tag", "key": "level", "relation": "=", "value": 5}]}"#, [a.a1, a.a2]),
                    (#"{"filters": [{"field": "tag", "key": "level", "relation": "=", "value": "2"}]}"#, [a.b1]),
                    (#"{"filters": [{"field": "tag", "key": "vip", "relation": "=", "value": true}]}"#, [a.a1, a.a2]),
                    (#"{"filters": [{"field": "tag", "key": "plan", "relation": "!=", "value": "gold"}]}"#,
                     [a.b1, a.c1, a.x1]),
                    (#"{"filters": [{"field": "tag", "key": "plan", "relation": "exists"}]}"#, [a.a1, a.a2, a.b1]),
                    (#"{"filters": [{"field": "tag", "key": "plan", "relation": "not_exists"}]}"#, [a.c1, a.x1]),
                    (#"{"filters": [{"field": "tag", "key": "plan", "relation": "in", "value": ["silver", "x"]}]}"#,
                     [a.b1]),
                    (#"{"filters": [{"field": "language", "relation": "=", "value": "tr"}]}"#, [a.a2, a.b1]),
                    (#"{"filters": [{"field": "language", "relation": "in", "value": ["en", "de"]}]}"#,
                     [a.a1, a.c1, a.x1]),
                    (#"{"filters": [{"field": "country", "relation": "=", "value": "US"}]}"#, [a.a1, a.x1]),
                    (#"{"filters": [{"field": "country", "relation": "!=", "value": "US"}]}"#, [a.a2, a.b1, a.c1]),
                    (#"{"filters": [{"field": "country", "relation": "not_exists"}]}"#, [a.b1]),
                    (#"{"filters": [{"field": "country", "relation": "exists"}], "platforms": ["android"]}"#,
                     [a.a2, a.x1]),
                    (#"{"filters": [{"field": "platform", "relation": "=", "value": "web"}]}"#, [a.b1]),
                    (#"{"filters": [{"field": "platform", "relation": "!=", "value": "ios"}]}"#, [a.a2, a.b1, a.x1]),
                    // Filters are AND-ed.
                    (#"{"filters": [{"field": "language", "relation": "=", "value": "tr"}, {"field": "tag", "key": "level", "relation": ">", "value": 3}]}"#,
                     [a.a2]),
                    // Values are bound parameters: SQL in a value is just text that matches nothing.
                    (#"{"filters": [{"field": "tag", "key": "plan'; DROP TABLE users; --", "relation": "=", "value": "x' OR '1'='1"}]}"#,
                     []),
                ]
                for (target, expected) in cases {
                    #expect(try a.expand(target) == expected, "\(target)")
                }
                #expect(try a.seed.connection.query("SELECT count(*) AS n FROM users")[0]["n"] == "4")
            }
        }
    }

    /// An id-list chunk costs its list, not the app: in an app of 3,000 subscriptions, with statistics that
    /// make walking the app's index look cheap, the chunk for a few listed subscriptions or users reads only
    /// those rows of `subscriptions`.
    @Test func anIDListChunkReadsItsListNotTheApp() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let a = try Audience(url)
                _ = try a.seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token, language)
                    SELECT $1, 'ios', 'a0a0' || md5(n::text), 'en' FROM generate_series(1, 3000) n
                    """, [a.seed.appID])
                let targets: [(AudienceTarget, Set<UUID>)] = [
                    (.subscriptionIDs([a.c1, a.a1, a.inactive, a.otherApp, UUID()]), [a.a1, a.c1]),
                    (.externalIDs(["alice", "carol", "nobody"]), [a.a1, a.a2, a.c1]),
                ]
                for (target, audience) in targets {
                    let query = AudienceQuery(selection: AudienceSelection(target: target, platforms: nil), first: true)
                    let notification = try a.seed.notification(target: #"{"all": true}"#)
                    let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
                    let parameters: [any PostgresEncodable] =
                        [notification, a.seed.appID, nilUUID, 5_000, 5, nil as [String]?] + query.parameters
                    let read = try ExplainedPlan(analyzing: query.sql, parameters, on: a.seed.connection, keep: true)
                    #expect(read.rowsRead(of: "subscriptions") <= 10, "\(target): \(read.text)")
                    let reached = try a.seed.connection.query(
                        "SELECT subscription_id FROM deliveries WHERE notification_id = $1", [notification])
                    #expect(Set(try reached.map { try $0.decode(UUID.self, "subscription_id") }) == audience, "\(target)")
                }
            }
        }
    }

    /// `count` users of the seed's app with tag `level` = n % 10, each with one iOS subscription (language `en`).
    static func usersWithLevelTags(_ seed: Seed, _ count: Int) throws {
        _ = try seed.connection.query(
            """
            WITH u AS (
                INSERT INTO users (app_id, external_id, tags)
                SELECT $1, 'u' || n, jsonb_build_object('level', n % 10) FROM generate_series(1, $2) n
                RETURNING id, app_id
            )
            INSERT INTO subscriptions (app_id, user_id, platform, token, language)
            SELECT app_id, id, 'ios', md5(id::text) || md5(id::text), 'en' FROM u
            """, [seed.appID, count])
    }

    /// A tag filter's chunk reads its page's users by key, not the users table: a chunk of 5,000 of an app's
    /// 50,000 subscriptions reads at most its 5,000 users, never the table (as a hash join of the page with users
    /// would, once per chunk).
    @Test func aTagFiltersChunkReadsItsPagesUsersNotTheTable() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.usersWithLevelTags(seed, 50_000)
                _ = try seed.connection.query("ANALYZE users, subscriptions")
                let selection = try AudienceSelection(parsing: [
                    "filters": [["field": "tag", "key": "level", "relation": "=", "value": "7"]]
                ])
                let query = AudienceQuery(selection: selection, first: true)
                let notification = try seed.notification(
                    target: #"{"filters": [{"field": "tag", "key": "level", "relation": "=", "value": "7"}]}"#)
                let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
                let parameters: [any PostgresEncodable] = [notification, seed.appID, nilUUID, 5_000, 5, nil as [String]?] + query.parameters
                let plan = try ExplainedPlan(analyzing: query.sql, parameters, on: seed.connection)
                #expect(plan.rowsRead(of: "users") <= 5_000, "\(plan.text)")
                var suspects = ExpansionSuspects()
                while try ExpansionStore.expandNext(on: seed.connection, chunkSize: 5_000, suspects: &suspects) != nil {}
                let reached = try seed.connection.query("SELECT count(*) AS n FROM deliveries WHERE notification_id = $1", [notification])[0]
                #expect(try reached.decode(Int.self, "n") == 5_000)
            }
        }
    }

    /// The chunk step's pick of what is not small reads past none of the pending small notifications nor of
    /// those scheduled for later (the partial index of migration 0017 matches its clauses), however many wait.
    @Test func theChunkStepsPickReadsNoPendingSmallNotification() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let device = try seed.subscription()
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "hi"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array($2::uuid))
                    FROM generate_series(1, 2000)
                    """, [seed.appID, device])
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, send_after)
                    SELECT $1, '{"contents": {"en": "hi"}}', '{"all": true}', now() + interval '1 day'
                    FROM generate_series(1, 500)
                    """, [seed.appID])
                let broadcast = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query("ANALYZE notifications")
                let plan = try ExplainedPlan(
                    analyzing: ExpansionStore.chunkPickSQL(.skippingSmall), [ExpansionStore.schedulingMemberBytes], on: seed.connection)
                #expect(plan.rowsRead(of: "notifications") <= 2, "\(plan.text)")
                var suspects = ExpansionSuspects()
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall)
                        == .expanded(notificationID: broadcast, created: 1))
            }
        }
    }

    /// A leasing chunk step's pick that skips the notifications of an app without room walks past them without
    /// reading their `target`: under its lock the walk kept `notifications_to_expand_large`'s predicate as a
    /// filter, which wrote out the target of every pending notification it passed twice (75-80 ms for 100 lists
    /// of 1,000 ids).
    @Test func aPickSkippingAnAppWithoutRoomReadsNoTarget() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                // 20 id lists of 300 ids each (about 12 KB: not small), pending.
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "hi"}}',
                           jsonb_build_object('include_subscription_ids', (SELECT jsonb_agg(gen_random_uuid()) FROM generate_series(1, 300 + n % 2)))
                    FROM generate_series(1, 20) n
                    """, [seed.appID])
                _ = try seed.connection.query("ANALYZE notifications")
                let sql = ExpansionStore.chunkPickSQL(.skippingSmall, roomless: true)
                // As a chunk's transaction plans it: every statement a lookup by key or a walk of an index.
                try seed.connection.execute("SET enable_seqscan = off")
                try seed.connection.execute("SET enable_bitmapscan = off")
                let withoutRoom = try ExplainedPlan(
                    analyzing: sql, [ExpansionStore.schedulingMemberBytes, false, [seed.appID]], on: seed.connection,
                    generic: true)
                #expect(withoutRoom.rowsRead(of: "notifications") == 20, "\(withoutRoom.text)")
                let filters = Self.filters(ofScansOf: "notifications", in: withoutRoom.text)
                #expect(!filters.isEmpty && !filters.contains { $0.contains("target") }, "\(withoutRoom.text)")
                let picked = try seed.connection.query(sql, [ExpansionStore.schedulingMemberBytes, false, [UUID]()])
                #expect(picked.count == 1)
            }
        }
    }

    /// The filters of the scans of `relation` in an `EXPLAIN (FORMAT JSON)` answer.
    static func filters(ofScansOf relation: String, in plan: String) -> [String] {
        func walk(_ node: Any) -> [String] {
            if let list = node as? [Any] { return list.flatMap(walk) }
            guard let object = node as? [String: Any] else { return [] }
            var found = object["Relation Name"] as? String == relation ? [object["Filter"] as? String ?? ""] : []
            for (key, value) in object where key == "Plan" || key == "Plans" { found += walk(value) }
            return found
        }
        return walk((try? JSONSerialization.jsonObject(with: Data(plan.utf8))) ?? [])
    }

    /// On a notifications table whose statistics say it is empty (new, or not analyzed since it filled), a chunk's
    /// pick still walks its index to the first candidate: planned from those statistics it read every pending
    /// notification and sorted them, each one's target turned into text on the way (52 ms for 100 of 1,000
    /// listed ids, at every pick).
    @Test func aPickOnStatisticsOfAnEmptyTableStillWalksTheIndex() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query("ALTER TABLE notifications SET (autovacuum_enabled = false)")
                _ = try seed.connection.query("ANALYZE notifications")
                // 200 id lists of 300 ids each (about 12 KB: not small), none of them a subscription.
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "hi"}}',
                           jsonb_build_object('include_subscription_ids', (SELECT jsonb_agg(gen_random_uuid()) FROM generate_series(1, 300 + n % 2)))
                    FROM generate_series(1, 200) n
                    """, [seed.appID])
                var suspects = ExpansionSuspects()
                var result: ExpansionStore.ExpansionResult?
                let read = try rowsRead(of: "notifications", on: seed.connection) {
                    result = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects, pick: .skippingSmall)
                }
                guard case .expanded(_, 0)? = result else {
                    Issue.record("unexpected \(String(describing: result))")
                    return
                }
                #expect(read <= 5)
            }
        }
    }

    @Test func prioritiesPutHighAndListedTargetsFirst() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let a = try Audience(url)
                let seed = a.seed
                let cases: [(String, String, Int)] = [
                    (#"{"priority": "high"}"#, #"{"include_external_ids": ["bob"]}"#, 11),
                    (#"{"priority": "high"}"#, #"{"all": true}"#, 10),
                    (#"{}"#, #"{"include_subscription_ids": ["\#(a.b1)"]}"#, 6),
                    (#"{"priority": "normal"}"#, #"{"all": true}"#, 5),
                ]
                for (message, target, priority) in cases {
                    let id = try seed.notification(message: message, target: target)
                    while case .expanding? = try ExpansionStore.expandNext(on: seed.connection) {}
                    let found = try seed.connection.query(
                        "SELECT DISTINCT priority FROM deliveries WHERE notification_id = $1", [id])
                    #expect(found.count == 1)
                    #expect(found.first?["priority"] == "\(priority)", "\(message) \(target)")
                }
            }
        }
    }

    /// OneSignal-style filters send the operand of `>` / `<` as a string; it compares as a number, exactly
    /// (`numeric`, never a double), against tags stored as JSON numbers or numeric strings alike.
    @Test func numericStringOperandsCompareAsNumbers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let a = try Audience(url)
                func tag(_ relation: String, _ value: String) -> String {
                    #"{"filters": [{"field": "tag", "key": "level", "relation": "\#(relation)", "value": \#(value)}]}"#
                }
                let cases: [(String, Set<UUID>)] = [
                    (tag(">", #""15""#), []),
                    (tag(">", #""3""#), [a.a1, a.a2]),
                    (tag("<", #"" 3 ""#), [a.b1]),
                    (tag(">", #""1.5e0""#), [a.a1, a.a2, a.b1]),
                    (tag("<", #""+5""#), [a.b1]),
                    (tag(">", #""-.5""#), [a.a1, a.a2, a.b1]),
                    // As doubles both sides would be 5.0; as numeric 5 is greater.
                    (tag(">", #""4.99999999999999999999""#), [a.a1, a.a2]),
                    (tag(">", "4.99999999999999999999"), [a.a1, a.a2]),
                    (tag("<", "12345678901234567890"), [a.a1, a.a2, a.b1]),
                ]
                for (target, expected) in cases {
                    #expect(try a.expand(target) == expected, "\(target)")
                }
            }
        }
    }

    /// The example table of docs/targets.md ("Every operator with an example"), row by row.
    @Test func documentedFilterExamples() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let user = try seed.connection.query(
                    "INSERT INTO users (app_id, external_id, tags) VALUES ($1, 'u', $2::jsonb) RETURNING id",
                    [seed.appID, #"{"level": 5, "plan": "gold", "score": "12.5", "vip": true}"#])[0].decode(UUID.self, "id")
                let subscription = try seed.subscription(user: user, platform: "ios", language: "tr")
                let examples: [(String, Bool?)] = [
                    (#"{"field": "tag", "key": "plan", "relation": "=", "value": "gold"}"#, true),
                    (#"{"field": "tag", "key": "level", "relation": "=", "value": "5"}"#, true),
                    (#"{"field": "tag", "key": "vip", "relation": "=", "value": true}"#, true),
                    (#"{"field": "language", "relation": "=", "value": "TR"}"#, false),
                    (#"{"field": "tag", "key": "plan", "relation": "!=", "value": "silver"}"#, true),
                    (#"{"field": "tag", "key": "city", "relation": "!=", "value": "Izmir"}"#, true),
                    (#"{"field": "country", "relation": "!=", "value": "TR"}"#, true),
                    (#"{"field": "tag", "key": "plan", "relation": "exists"}"#, true),
                    (#"{"field": "country", "relation": "exists"}"#, false),
                    (#"{"field": "tag", "key": "city", "relation": "not_exists"}"#, true),
                    (#"{"field": "tag", "key": "plan", "relation": "in", "value": ["gold", "silver"]}"#, true),
                    (#"{"field": "platform", "relation": "in", "value": ["ios", "web"]}"#, true),
                    (#"{"field": "tag", "key": "level", "relation": ">", "value": 3}"#, true),
                    (#"{"field": "tag", "key": "level", "relation": ">", "value": "15"}"#, false),
                    (#"{"field": "tag", "key": "score", "relation": "<", "value": "12.50000000000000000001"}"#, true),
                    (#"{"field": "tag", "key": "level", "relation": ">", "value": " 4.5 "}"#, true),
                    (#"{"field": "tag", "key": "plan", "relation": ">", "value": 1}"#, false),
                    (#"{"field": "tag", "key": "level", "relation": ">", "value": "five"}"#, nil),
                    (#"{"field": "language", "relation": ">", "value": 1}"#, nil),
                ]
                for (filter, matches) in examples {
                    let id = try seed.notification(target: #"{"filters": [\#(filter)]}"#)
                    var failed = false
                    while let result = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10) {
                        if case .failed = result { failed = true; break }
                        if case .expanded = result { break }
                    }
                    let reached = try seed.connection.query(
                        "SELECT subscription_id FROM deliveries WHERE notification_id = $1", [id]
                    ).map { try $0.decode(UUID.self, "subscription_id") }
                    if let matches {
                        #expect(!failed && reached == (matches ? [subscription] : []), "\(filter)")
                    } else {
                        #expect(failed && reached.isEmpty, "\(filter)")
                    }
                }
            }
        }
    }

    @Test func badTargetsFailTheirNotificationAndTheNextOneStillExpands() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let a = try Audience(url)
                let tooMany = (0...AudienceTarget.maximumIDs).map { "\"u\($0)\"" }.joined(separator: ",")
                let bad: [(String, String)] = [
                    (#"{}"#, "invalid_target: target names no audience"),
                    (#"{"include_external_ids": []}"#, "invalid_target: include_external_ids is empty"),
                    (#"{"include_external_ids": [\#(tooMany)]}"#, "invalid_target: include_external_ids lists 20001 entries"),
                    (#"{"filters": [{"field": "tag", "key": "a", "relation": "like", "value": "x"}]}"#,
                     #"invalid_target: filters[0].relation "like" is unknown"#),
                    (#"{"filters": [{"field": "tag", "key": "a", "relation": ">", "value": "many"}]}"#,
                     "invalid_target: filters[0].value must be a number or a numeric string"),
                    (#"{"filters": []}"#, "invalid_target: filters is empty"),
                    // Valid jsonb, but beyond what a Double holds: refused, never retried forever.
                    (#"{"filters": [{"field": "tag", "key": "a", "relation": ">", "value": 1e400}]}"#, "invalid_target: "),
                ]
                for (target, reason) in bad {
                    let id = try a.seed.notification(target: target)
                    let result = try ExpansionStore.expandNext(on: a.seed.connection)
                    guard case .failed(let failed, let message)? = result else {
                        Issue.record("\(target): expected failure, got \(String(describing: result))")
                        continue
                    }
                    #expect(failed == id)
                    #expect(message.hasPrefix(reason), "\(message)")
                    let row = try a.seed.connection.query(
                        "SELECT status, status_reason FROM notifications WHERE id = $1", [id])[0]
                    #expect(row["status"] == "failed")
                    #expect(row["status_reason"] == message)
                }
                #expect(try a.seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                #expect(try a.expand(#"{"include_external_ids": ["carol"]}"#) == [a.c1])
            }
        }
    }

    /// Seeds `count` active subscriptions for the seed's app.
    static func seedSubscriptions(_ seed: Seed, _ count: Int) throws {
        _ = try seed.connection.query(
            """
            INSERT INTO subscriptions (app_id, platform, token, language)
            SELECT $1, 'ios', md5(n::text) || md5(n::text), 'en' FROM generate_series(1, $2) n
            """, [seed.appID, count])
    }

    struct SimulatedCrash: Error {}

    @Test func aCrashBetweenOrInsideChunksResumesWithoutDuplicates() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let id = try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 23)
                let id = try seed.notification(target: #"{"all": true}"#)
                // Worker A commits one chunk, then dies with a second chunk half done (never committed).
                let workerA = try PostgresConnection(connectionString: url)
                #expect(try ExpansionStore.expandNext(on: workerA, chunkSize: 5) == .expanding(notificationID: id, created: 5))
                #expect(throws: SimulatedCrash.self) {
                    try workerA.transaction { connection in
                        #expect(try ExpansionStore.expandNext(on: connection, chunkSize: 5) == .expanding(notificationID: id, created: 5))
                        throw SimulatedCrash()
                    }
                }
                workerA.close()
                let row = try seed.connection.query(
                    "SELECT status, targeted_count, expansion_cursor IS NOT NULL AS has_cursor FROM notifications")[0]
                #expect(row["status"] == "expanding")
                #expect(row["targeted_count"] == "5")
                #expect(row["has_cursor"] == "t")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "5")
                return id
            }
            try await onThread {
                // Worker B picks up where A's last commit left off.
                let workerB = try PostgresConnection(connectionString: url)
                defer { workerB.close() }
                var created: [Int] = []
                loop: while let result = try ExpansionStore.expandNext(on: workerB, chunkSize: 5) {
                    switch result {
                    case .expanding(_, let count): created.append(count)
                    case .expanded(_, let count): created.append(count); break loop
                    default: Issue.record("\(result)"); break loop
                    }
                }
                #expect(created == [5, 5, 5, 3])
                let counts = try workerB.query(
                    "SELECT count(*) AS n, count(DISTINCT subscription_id) AS d FROM deliveries WHERE notification_id = $1",
                    [id])[0]
                #expect(counts["n"] == "23")
                #expect(counts["d"] == "23")
                #expect(try workerB.query("SELECT targeted_count FROM notifications")[0]["targeted_count"] == "23")

                // Even a lost cursor creates no duplicate: ON CONFLICT DO NOTHING is the last guard.
                _ = try workerB.query(
                    "UPDATE notifications SET status = 'expanding', expansion_cursor = NULL WHERE id = $1", [id])
                while case .expanding? = try ExpansionStore.expandNext(on: workerB, chunkSize: 5) {}
                #expect(try workerB.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "23")
                #expect(try workerB.query("SELECT targeted_count FROM notifications")[0]["targeted_count"] == "23")
            }
        }
    }

    @Test func severalWorkersExpandDifferentNotificationsAtOnce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let ids = try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 40)
                return try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
            }
            let served = try await withThrowingTaskGroup(of: Set<UUID>.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        try await onThread {
                            let connection = try PostgresConnection(connectionString: url)
                            defer { connection.close() }
                            var seen: Set<UUID> = []
                            while let result = try ExpansionStore.expandNext(on: connection, chunkSize: 5) {
                                switch result {
                                case .expanding(let id, _), .expanded(let id, _): seen.insert(id)
                                default: Issue.record("\(result)")
                                }
                            }
                            return seen
                        }
                    }
                }
                var all: [Set<UUID>] = []
                for try await seen in group { all.append(seen) }
                return all
            }
            #expect(served.reduce(Set<UUID>()) { $0.union($1) } == Set(ids))
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                let rows = try connection.query(
                    """
                    SELECT n.status, n.targeted_count, count(d.id) AS made
                    FROM notifications n LEFT JOIN deliveries d ON d.notification_id = n.id
                    GROUP BY n.id, n.status, n.targeted_count
                    """)
                #expect(rows.count == 3)
                for row in rows {
                    #expect(row["status"] == "expanded")
                    #expect(row["targeted_count"] == "40")
                    #expect(row["made"] == "40")
                }
            }
        }
    }

    @Test func cancelingMidBroadcastStopsExpansionAndSkipsPendingDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 30)
                let id = try seed.notification(target: #"{"all": true}"#)
                #expect(try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10) == .expanding(notificationID: id, created: 10))
                // Two deliveries are in flight on some worker when the producer cancels.
                let inFlight = try ClaimStore.claim(on: seed.connection, limit: 2, lease: .seconds(600), workerID: "A")
                #expect(inFlight.count == 2)
                _ = try seed.connection.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [id])

                #expect(try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10) == nil)
                let first = try #require(try ExpansionStore.sweepCanceled(on: seed.connection, limit: 5))
                #expect(first.notificationID == id)
                #expect(first.skipped == 5)
                #expect(try ExpansionStore.sweepCanceled(on: seed.connection, limit: 5)?.skipped == 3)
                #expect(try ExpansionStore.sweepCanceled(on: seed.connection, limit: 5) == nil)

                let left = try seed.connection.query("SELECT id FROM deliveries ORDER BY id")
                #expect(Set(try left.map { try $0.decode(Int64.self, "id") }) == Set(inFlight.map(\.id)))
                let events = try seed.connection.query(
                    "SELECT event, reason, count(*) AS n FROM delivery_events GROUP BY event, reason")
                #expect(events.count == 1)
                #expect(events.first?["event"] == "skipped")
                #expect(events.first?["reason"] == "canceled")
                #expect(events.first?["n"] == "8")
                let row = try seed.connection.query("SELECT status, targeted_count FROM notifications")[0]
                #expect(row["status"] == "canceled")
                #expect(row["targeted_count"] == "10")
                let counts = try seed.connection.query(
                    "SELECT targeted, sent, failed, skipped, deferred FROM notification_counts WHERE notification_id = $1",
                    [id])[0]
                #expect(counts["targeted"] == "10")
                #expect(counts["skipped"] == "8")
                #expect(counts["sent"] == "0")
                #expect(counts["failed"] == "0")
                #expect(counts["deferred"] == "0")
            }
        }
    }

    @Test func sendAfterWaitsAndAnExpiredNotificationStopsExpanding() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 12)
                let later = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query(
                    "UPDATE notifications SET send_after = now() + interval '1 hour' WHERE id = $1", [later])
                #expect(try ExpansionStore.expandNext(on: seed.connection) == nil)

                let broadcast = try seed.notification(message: #"{"ttl": 60}"#, target: #"{"all": true}"#)
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 5)
                        == .expanding(notificationID: broadcast, created: 5))
                // Its ttl runs out between two chunks.
                _ = try seed.connection.query(
                    "UPDATE notifications SET send_after = now() - interval '61 seconds' WHERE id = $1", [broadcast])
                guard case .failed(broadcast, let reason)? = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 5)
                else {
                    Issue.record("expected the expired notification to stop")
                    return
                }
                #expect(reason.hasPrefix("expired"))
                #expect(try ExpansionStore.expandNext(on: seed.connection, chunkSize: 5) == nil)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "5")

                _ = try seed.connection.query(
                    "UPDATE notifications SET send_after = now() - interval '1 second' WHERE id = $1", [later])
                #expect(try ExpansionStore.expandNext(on: seed.connection) == .expanded(notificationID: later, created: 12))
            }
        }
    }

    @Test func aSmallNotificationOvertakesABroadcastInFlight() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 30)
                let user = try seed.user("dana")
                let dana = try seed.subscription(user: user)
                let broadcast = try seed.notification(target: #"{"all": true}"#)
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10)
                        == .expanding(notificationID: broadcast, created: 10))
                let small = try seed.notification(target: #"{"include_external_ids": ["dana"]}"#)
                // The next chunk goes to the notification never served yet, not to the broadcast.
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10)
                        == .expanded(notificationID: small, created: 1))
                // And its delivery is claimed ahead of the broadcast's older backlog.
                let first = try #require(try ClaimStore.claim(on: seed.connection, limit: 1, lease: .seconds(60), workerID: "A").first)
                #expect(first.notificationID == small)
                #expect(first.subscriptionID == dana)
                // Then the broadcast carries on.
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10)
                        == .expanding(notificationID: broadcast, created: 10))
            }
        }
    }

    /// A measurement, not a timed assertion: `PUSHIZO_TEST_EXPANSION_BENCHMARK=1000000 swift test --filter
    /// expansionBenchmark` prints how long expanding that many subscriptions (one user each, tag `level` 0-9)
    /// takes for `{"all": true}` and for a tag filter matching 40% of them.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["PUSHIZO_TEST_EXPANSION_BENCHMARK"] != nil))
    func expansionBenchmark() async throws {
        let count = Int(ProcessInfo.processInfo.environment["PUSHIZO_TEST_EXPANSION_BENCHMARK"] ?? "") ?? 1_000_000
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.usersWithLevelTags(seed, count)
                _ = try seed.connection.query("ANALYZE")
                let cases = [
                    (#"{"all": true}"#, count),
                    (#"{"filters": [{"field": "tag", "key": "level", "relation": ">", "value": 5}]}"#, count / 10 * 4),
                ]
                for (target, expected) in cases {
                    let id = try seed.notification(target: target)
                    let started = Date()
                    var chunks = 0
                    while case let result? = try ExpansionStore.expandNext(on: seed.connection) {
                        chunks += 1
                        if case .expanded = result { break }
                    }
                    let seconds = Date().timeIntervalSince(started)
                    let made = try seed.connection.query(
                        "SELECT targeted_count FROM notifications WHERE id = $1", [id])[0]["targeted_count"]
                    print("expansion benchmark: \(target): \(count) subscriptions, \(chunks) chunks, "
                        + "\(made ?? "?") deliveries, " + String(format: "%.1f s", seconds))
                    #expect(made == "\(expected)")
                }
            }
        }
    }
}

/// Poison rows (one notification's or one user's data) never stop expansion for everyone else.
extension ExpansionTests {
    /// Expands everything due, one chunk per call as the worker's loop does, and returns each notification's
    /// final status and reason. A thrown error fails the test: it would stall the loop for every app.
    /// A `.stalled` result fails the test too: with a poisoned notification and a good one there is evidence.
    static func expandAll(_ seed: Seed, calls: inout Int) throws -> [UUID: (status: String, reason: String?)] {
        var suspects = ExpansionSuspects()
        while let result = try ExpansionStore.expandNext(on: seed.connection, chunkSize: 50, suspects: &suspects) {
            calls += 1
            if case .stalled = result { Issue.record("expansion stalled: \(result)"); break }
            if calls > 1_000 { Issue.record("expansion does not end"); break }
        }
        return try statuses(seed)
    }

    static func expandAll(_ seed: Seed) throws -> [UUID: (status: String, reason: String?)] {
        var calls = 0
        return try expandAll(seed, calls: &calls)
    }

    static func statuses(_ seed: Seed) throws -> [UUID: (status: String, reason: String?)] {
        var result: [UUID: (status: String, reason: String?)] = [:]
        for row in try seed.connection.query("SELECT id, status, status_reason FROM notifications") {
            result[try row.decode(UUID.self, "id")] = (row["status"] ?? "", row["status_reason"])
        }
        return result
    }

    /// Another app with one subscription and a notification to it: what a poisoned tenant must not delay.
    static func goodNotificationOfAnotherApp(_ url: String) throws -> (notification: UUID, subscription: UUID) {
        let other = try Seed(url)
        try other.app()
        let subscription = try other.subscription()
        let notification = try other.notification(target: #"{"all": true}"#)
        return (notification, subscription)
    }

    @Test func aHugeOrMalformedTTLFailsItsNotificationAndTheOthersExpand() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 3)
                // Row 1 of the issue first, then variants; each is older than the good notification.
                let cases: [(String, String)] = [
                    (#"{"ttl": 1e13, "contents": {"en": "x"}}"#, "invalid_message: ttl must be a whole number of seconds from 0 to 2419200"),
                    (#"{"ttl": -1e13}"#, "invalid_message: ttl must be a whole number of seconds from 0 to 2419200"),
                    (#"{"ttl": 1e308}"#, "invalid_message: ttl must be a whole number"),
                    (#"{"ttl": -1}"#, "invalid_message: ttl must be a whole number of seconds from 0 to 2419200"),
                    (#"{"ttl": 2419201}"#, "invalid_message: ttl must be a whole number of seconds from 0 to 2419200"),
                    (#"{"ttl": "60"}"#, "invalid_message: ttl must be a whole number"),
                    (#"{"ttl": 1.5}"#, "invalid_message: ttl must be a whole number"),
                    (#"{"ttl": {"seconds": 60}}"#, "invalid_message: ttl must be a whole number"),
                    (#"{"ttl": 1\#(String(repeating: "0", count: 400))}"#, "invalid_message: ttl must be a whole number"),
                    (#"{"priority": 10}"#, "invalid_message: priority must be a string"),
                    (#"{"priority": "urgent"}"#, #"invalid_message: priority must be high or normal (got "urgent")"#),
                ]
                var poisoned: [UUID: String] = [:]
                for (message, reason) in cases { poisoned[try seed.notification(message: message, target: #"{"all": true}"#)] = reason }
                let good = try Self.goodNotificationOfAnotherApp(url)
                // Valid edges still expand: ttl 0 and the maximum, null members, a string priority.
                let edges = try [
                    #"{"ttl": 0}"#, #"{"ttl": 2419200, "priority": "high"}"#, #"{"ttl": null, "priority": null}"#,
                    #"{"ttl": 60.0}"#,
                ].map { try seed.notification(message: $0, target: #"{"all": true}"#) }

                let outcome = try Self.expandAll(seed)
                for (id, reason) in poisoned {
                    #expect(outcome[id]?.status == "failed")
                    #expect(outcome[id]?.reason?.hasPrefix(reason) == true, "\(outcome[id]?.reason ?? "nil")")
                }
                #expect(outcome[good.notification]?.status == "expanded")
                for id in edges { #expect(outcome[id]?.status == "expanded") }
                let made = try seed.connection.query(
                    "SELECT count(*) AS n FROM deliveries WHERE notification_id = ANY($1::uuid[])", [Array(poisoned.keys)])
                #expect(made[0]["n"] == "0")
                #expect(try ClaimStore.claim(on: seed.connection, limit: 100, lease: .seconds(60), workerID: "A").count == 13)
            }
        }
    }

    @Test func sendAfterAndCreatedAtAtTheEdgesOfTimestamptzNeverFailAPoll() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 2)
                func make(_ message: String, _ set: String) throws -> UUID {
                    let id = try seed.notification(message: message, target: #"{"all": true}"#)
                    _ = try seed.connection.query("UPDATE notifications SET \(set) WHERE id = $1", [id])
                    return id
                }
                // start + ttl beyond timestamptz's last day: used to fail every poll with 22008.
                let lateCreated = try make(#"{"ttl": 2419200}"#, "created_at = '294276-12-31 00:00:00+00'")
                let infiniteCreated = try make(#"{"ttl": 60}"#, "created_at = 'infinity'")
                let farFuture = try make(#"{"ttl": 60}"#, "send_after = '294276-12-31 00:00:00+00'")
                let never = try make(#"{}"#, "send_after = 'infinity'")
                let ancient = try make(#"{"ttl": 60}"#, "send_after = '4713-01-01 00:00:00+00 BC'")
                let minusInfinity = try make(#"{"ttl": 2419200}"#, "send_after = '-infinity'")
                let ancientWithoutTTL = try make(#"{}"#, "send_after = '0001-01-01 00:00:00+00 BC'")
                let good = try Self.goodNotificationOfAnotherApp(url)

                let outcome = try Self.expandAll(seed)
                #expect(outcome[lateCreated]?.status == "expanded")
                #expect(outcome[infiniteCreated]?.status == "expanded")
                #expect(outcome[farFuture]?.status == "pending")
                #expect(outcome[never]?.status == "pending")
                #expect(outcome[ancient]?.reason?.hasPrefix("expired") == true)
                #expect(outcome[minusInfinity]?.reason?.hasPrefix("expired") == true)
                // No ttl: the send pipeline applies the default and skips its deliveries as expired.
                #expect(outcome[ancientWithoutTTL]?.status == "expanded")
                #expect(outcome[good.notification]?.status == "expanded")
                #expect(try ExpansionStore.isExpansionDrained(on: seed.connection))
                // The claim reads those instants too (infinity and the year 294276 included).
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 100, lease: .seconds(60), workerID: "A")
                #expect(claimed.count == 7)
                #expect(try seed.connection.query("SELECT count(*) AS n FROM delivery_events")[0]["n"] == "0")
            }
        }
    }

    @Test func aTagThatIsNotASaneNumberNeverMatchesAndNeverFailsAPoll() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                // tags JSON -> whether `level > 5` holds (nil: not a number, neither > 5 nor < 5 holds).
                let digits400 = "1" + String(repeating: "0", count: 399)
                let tags: [(String, Bool?)] = [
                    (#"{"level": "1e999999"}"#, nil),  // row 2 of the issue
                    (#"{"level": "1e-999999"}"#, nil),
                    (#"{"level": "NaN"}"#, nil),
                    (#"{"level": "nan"}"#, nil),
                    (#"{"level": "Infinity"}"#, nil),
                    (#"{"level": "-Infinity"}"#, nil),
                    (#"{"level": "\#(digits400)"}"#, nil),
                    (#"{"level": \#(digits400)}"#, nil),
                    (#"{"level": "1.8e308"}"#, nil),
                    (#"{"level": "0x10"}"#, nil),
                    (#"{"level": "\u2003 9"}"#, nil),
                    (#"{"level": "٩"}"#, nil),
                    (#"{"level": ""}"#, nil),
                    (#"{"level": "."}"#, nil),
                    (#"{"level": "gold"}"#, nil),
                    (#"{"level": true}"#, nil),
                    (#"{"level": [9]}"#, nil),
                    (#"{"level": {"v": 9}}"#, nil),
                    (#"{"level": null}"#, nil),
                    (#"{"level": "9"}"#, true),
                    (#"{"level": " 9 "}"#, true),
                    (#"{"level": 9}"#, true),
                    (#"{"level": "1e308"}"#, true),
                    (#"{"level": 1e300}"#, true),
                    (#"{"level": "-1.7976931348623157e308"}"#, false),
                    (#"{"level": "1e-999"}"#, false),
                    (#"{"level": "+2.5"}"#, false),
                    (#"{"level": -3}"#, false),
                ]
                var expected: [UUID: Bool?] = [:]
                for (index, (json, greater)) in tags.enumerated() {
                    let user = try seed.connection.query(
                        "INSERT INTO users (app_id, external_id, tags) VALUES ($1, $2, $3::jsonb) RETURNING id",
                        [seed.appID, "u\(index)", json])[0].decode(UUID.self, "id")
                    expected[try seed.subscription(user: user)] = greater
                }
                let greater = try seed.notification(
                    target: #"{"filters": [{"field": "tag", "key": "level", "relation": ">", "value": 5}]}"#)
                let less = try seed.notification(
                    target: #"{"filters": [{"field": "tag", "key": "level", "relation": "<", "value": 5}]}"#)
                let good = try Self.goodNotificationOfAnotherApp(url)
                let outcome = try Self.expandAll(seed)
                #expect(outcome[greater]?.status == "expanded")
                #expect(outcome[less]?.status == "expanded")
                #expect(outcome[good.notification]?.status == "expanded")
                func reached(_ notification: UUID) throws -> Set<UUID> {
                    Set(try seed.connection.query(
                        "SELECT subscription_id FROM deliveries WHERE notification_id = $1", [notification]
                    ).map { try $0.decode(UUID.self, "subscription_id") })
                }
                #expect(try reached(greater) == Set(expected.filter { $0.value == true }.keys))
                #expect(try reached(less) == Set(expected.filter { $0.value == false }.keys))
            }
        }
    }

    @Test func numericFilterValuesAtAndBeyondTheirRange() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let user = try seed.connection.query(
                    "INSERT INTO users (app_id, external_id, tags) VALUES ($1, 'u', '{\"level\": 7}') RETURNING id",
                    [seed.appID])[0].decode(UUID.self, "id")
                try seed.subscription(user: user)
                func filter(_ relation: String, _ value: String) -> String {
                    #"{"filters": [{"field": "tag", "key": "level", "relation": "\#(relation)", "value": \#(value)}]}"#
                }
                let matching = try [filter(">", "-1.7976931348623157e308"), filter("<", "1e308"), filter(">", "5e-324"),
                                    filter("<", "9223372036854775807"), filter(">", "-9223372036854775808")]
                    .map { try seed.notification(target: $0) }
                let none = try [filter(">", "1e308"), filter("<", "-1e308"), filter("<", "5e-324")]
                    .map { try seed.notification(target: $0) }
                // Beyond a double: refused as the target's fault, never sent to SQL.
                let refused = try [filter(">", "1e400"), filter("<", "-1e400"), filter(">", "1" + String(repeating: "0", count: 400))]
                    .map { try seed.notification(target: $0) }
                let outcome = try Self.expandAll(seed)
                for id in matching + none { #expect(outcome[id]?.status == "expanded") }
                for id in refused {
                    #expect(outcome[id]?.status == "failed")
                    #expect(outcome[id]?.reason?.hasPrefix("invalid_target: ") == true, "\(outcome[id]?.reason ?? "nil")")
                }
                let counts = try seed.connection.query(
                    "SELECT notification_id, count(*) AS n FROM deliveries GROUP BY notification_id")
                let reached = Set(try counts.map { try $0.decode(UUID.self, "notification_id") })
                #expect(reached == Set(matching))
            }
        }
    }

    /// Rows 1 and 2 of the issue through a real expand-only worker: before, every poll failed (22008, 22003) and
    /// the worker never drained; now the poisoned notification fails, the tag does not match, the rest expand.
    @Test func anExpandOnlyWorkerDrainsPastTheIssuesPoisonRows() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    for (name, tags) in [("odd", #"{"level": "1e999999"}"#), ("fine", #"{"level": 7}"#)] {
                        let user = try seed.connection.query(
                            "INSERT INTO users (app_id, external_id, tags) VALUES ($1, $2, $3::jsonb) RETURNING id",
                            [seed.appID, name, tags])[0].decode(UUID.self, "id")
                        try seed.subscription(user: user)
                    }
                    let ttl = try seed.notification(message: #"{"ttl": 1e13, "contents": {"en": "x"}}"#, target: #"{"all": true}"#)
                    let filtered = try seed.notification(
                        target: #"{"filters": [{"field": "tag", "key": "level", "relation": ">", "value": 5}]}"#)
                    return (ttl, filtered, try Self.goodNotificationOfAnotherApp(url).notification)
                }
                try await runUntilDrained(
                    try WorkerRuntime(
                        configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_ROLES": "expand"]),
                        logger: quietLogger),
                    limit: 30)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let rows = try await database.query("SELECT id, status, status_reason, targeted_count FROM notifications")
                await database.shutdown()
                var found: [UUID: PostgresRow] = [:]
                for row in rows { found[try row.decode(UUID.self, "id")] = row }
                #expect(found[ids.0]?["status"] == "failed")
                #expect(found[ids.0]?["status_reason"]?.hasPrefix("invalid_message: ttl") == true)
                #expect(found[ids.1]?["status"] == "expanded")
                #expect(found[ids.1]?["targeted_count"] == "1")
                #expect(found[ids.2]?["status"] == "expanded")
            }
        }
    }

    /// Defence in depth: a statement that still fails on one notification's data (here a trigger raising a
    /// data exception and an integrity violation for it) fails that notification alone, with the SQLSTATE.
    @Test func aStatementFailingOnOneNotificationsDataFailsItAloneAndTheLoopMovesOn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 3)
                let dataException = try seed.notification(target: #"{"all": true}"#)
                let integrity = try seed.notification(target: #"{"all": true}"#)
                let good = try Self.goodNotificationOfAnotherApp(url)
                try seed.poisonDeliveries(
                    before: "INSERT",
                    """
                    IF NEW.notification_id = '\(dataException)' THEN
                        RAISE EXCEPTION 'value out of range: "token-like secret"' USING ERRCODE = '22003',
                            DETAIL = 'a detail that must not be copied';
                    END IF;
                    IF NEW.notification_id = '\(integrity)' THEN
                        RAISE EXCEPTION 'check failed' USING ERRCODE = '23514';
                    END IF;
                    """)
                let outcome = try Self.expandAll(seed)
                #expect(outcome[dataException]?.status == "failed")
                #expect(outcome[dataException]?.reason?.hasPrefix("data_exception: SQLSTATE 22003: value out of range") == true)
                #expect(outcome[dataException]?.reason?.contains("must not be copied") == false)
                #expect(outcome[integrity]?.status == "failed")
                #expect(outcome[integrity]?.reason == "integrity_constraint_violation: SQLSTATE 23514: check failed")
                #expect(outcome[good.notification]?.status == "expanded")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "1")
            }
        }
    }

    /// Test (a) with three: three notifications whose inserts a trigger refuses, created before a good one of
    /// another app. The good one's chunk is the evidence: it expands in the first call, and each poisoned one
    /// fails on its next try, one call each. Promptly: five calls, no timer.
    @Test func threePoisonedNotificationsAndAGoodOneEndFailedAndExpandedInFiveCalls() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 3)
                let poisoned = try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
                let good = try Self.goodNotificationOfAnotherApp(url)
                try seed.poisonDeliveries(
                    before: "INSERT",
                    """
                    IF NEW.notification_id = ANY('{\(poisoned.map(\.uuidString).joined(separator: ","))}'::uuid[]) THEN
                        RAISE EXCEPTION 'refused' USING ERRCODE = '23514';
                    END IF;
                    """)
                var suspects = ExpansionSuspects()
                let first = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects)
                #expect(first == .expanded(notificationID: good.notification, created: 1))
                #expect(Set(suspects.suspects.keys) == Set(poisoned))
                var failed: [UUID] = []
                while let result = try ExpansionStore.expandNext(on: seed.connection, suspects: &suspects) {
                    guard case .failed(let id, let reason) = result else {
                        Issue.record("unexpected \(result)")
                        break
                    }
                    #expect(reason == "integrity_constraint_violation: SQLSTATE 23514: refused")
                    failed.append(id)
                }
                #expect(failed == poisoned)
                let outcome = try Self.statuses(seed)
                for id in poisoned { #expect(outcome[id]?.status == "failed") }
                #expect(outcome[good.notification]?.status == "expanded")
                #expect(suspects.suspects.isEmpty)
            }
        }
    }

    /// Test (b): a trigger refusing every insert into `deliveries` (an operator's broken trigger). However
    /// often the workers poll, nothing is failed: every notification stays pending / expanding and the calls
    /// say `.stalled` once every notification was tried. Once the trigger is dropped, all expand in full.
    @Test func aFaultEveryChunkMeetsFailsNothingAndEverythingExpandsOnceFixed() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.seedSubscriptions(seed, 3)
                let broadcast = try seed.notification(target: #"{"all": true}"#)
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 2)
                        == .expanding(notificationID: broadcast, created: 2))
                let others = try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
                let good = try Self.goodNotificationOfAnotherApp(url)
                try seed.poisonDeliveries(before: "INSERT", "RAISE EXCEPTION 'broken trigger' USING ERRCODE = '22023';")
                // Two workers, each with its own memory, polling many times.
                let second = try PostgresConnection(connectionString: url)
                defer { second.close() }
                var suspects = [ExpansionSuspects(), ExpansionSuspects()]
                var stalled = 0
                for poll in 0..<40 {
                    let result = try ExpansionStore.expandNext(
                        on: poll % 2 == 0 ? seed.connection : second, chunkSize: 2, suspects: &suspects[poll % 2])
                    switch result {
                    case .stalled(_, let sqlState)?:
                        stalled += 1
                        #expect(sqlState == "22023")
                    case .setAside?:
                        break
                    default:
                        Issue.record("poll \(poll): \(String(describing: result))")
                    }
                }
                #expect(stalled >= 30)
                let during = try Self.statuses(seed)
                #expect(during.count == 5)
                for (id, row) in during {
                    #expect(row.status == (id == broadcast ? "expanding" : "pending"))
                    #expect(row.reason == nil)
                }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "2")

                _ = try seed.connection.query("DROP TRIGGER poison ON deliveries")
                var calls = 0
                while let result = try ExpansionStore.expandNext(on: second, chunkSize: 2, suspects: &suspects[1]) {
                    calls += 1
                    if case .expanded = result {} else if case .expanding = result {} else {
                        Issue.record("after the fix: \(result)")
                    }
                    if calls > 50 { break }
                }
                let after = try Self.statuses(seed)
                for id in [broadcast, good.notification] + others { #expect(after[id]?.status == "expanded") }
                let counts = try seed.connection.query(
                    "SELECT notification_id, count(*) AS n FROM deliveries GROUP BY notification_id")
                #expect(counts.count == 5)
                for row in counts {
                    let id = try row.decode(UUID.self, "notification_id")
                    #expect(row["n"] == (id == good.notification ? "1" : "3"))
                }
                #expect(suspects[1].suspects.isEmpty)
            }
        }
    }

    /// Test (c) through a real expand-only worker: its loop goes on at once after setting suspects aside (no
    /// backoff), the good notification's chunk convicts the poisoned ones, and the worker drains.
    @Test func anExpandOnlyWorkerFailsThreePoisonedNotificationsAndExpandsTheGoodOne() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (poisoned, good) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try Self.seedSubscriptions(seed, 2)
                    let poisoned = try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
                    try seed.poisonDeliveries(
                        before: "INSERT",
                        """
                        IF NEW.app_id = '\(seed.appID)' THEN RAISE EXCEPTION 'out of range' USING ERRCODE = '22003'; END IF;
                        """)
                    return (poisoned, try Self.goodNotificationOfAnotherApp(url).notification)
                }
                try await runUntilDrained(
                    try WorkerRuntime(
                        configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_ROLES": "expand"]),
                        logger: quietLogger),
                    limit: 30)
                let outcome = try await onThread { try Self.statuses(try Seed(url)) }
                for id in poisoned {
                    #expect(outcome[id]?.status == "failed")
                    #expect(outcome[id]?.reason == "data_exception: SQLSTATE 22003: out of range")
                }
                #expect(outcome[good]?.status == "expanded")
            }
        }
    }

    @Test func expandsExternalIDsIdempotentlyAndSkipsInactive() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let alice = try seed.user("alice")
                let bob = try seed.user("bob")
                try seed.subscription(user: alice)
                try seed.subscription(user: alice, platform: "android")
                try seed.subscription(user: bob)
                try seed.subscription(user: bob, status: "unsubscribed")
                try seed.subscription()  // anonymous, not targeted
                let id = try seed.notification(target: #"{"include_external_ids": ["alice", "bob", "nobody"]}"#)

                let result = try ExpansionStore.expandNext(on: seed.connection)
                #expect(result == .expanded(notificationID: id, created: 3))
                #expect(try ExpansionStore.expandNext(on: seed.connection) == nil)
                let status = try seed.connection.query(
                    "SELECT status, targeted_count FROM notifications WHERE id = $1", [id])[0]
                #expect(status["status"] == "expanded")
                #expect(status["targeted_count"] == "3")

                // Expanding the same notification again (e.g. after a crash) creates no duplicate.
                _ = try seed.connection.query("UPDATE notifications SET status = 'pending' WHERE id = $1", [id])
                #expect(try ExpansionStore.expandNext(on: seed.connection) == .expanded(notificationID: id, created: 0))
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "3")
            }
        }
    }

    @Test func platformsNarrowSubscriptionIDs() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let ios = try seed.subscription()
                let android = try seed.subscription(platform: "android")
                try seed.notification(
                    target: #"{"include_subscription_ids": ["\#(ios)", "\#(android)"], "platforms": ["android"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let rows = try seed.connection.query("SELECT subscription_id FROM deliveries")
                #expect(rows.count == 1)
                #expect(try rows[0].decode(UUID.self, "subscription_id") == android)
            }
        }
    }

    @Test func badTargetFailsTheNotificationWithoutDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.subscription()
                let id = try seed.notification(target: #"{"include_subscription_ids": ["not-a-uuid"]}"#)
                let result = try ExpansionStore.expandNext(on: seed.connection)
                guard case .failed(let failedID, let reason)? = result else {
                    Issue.record("expected failure, got \(String(describing: result))")
                    return
                }
                #expect(failedID == id)
                #expect(reason.contains("include_subscription_ids[0] is not a UUID"))
                let row = try seed.connection.query("SELECT status, status_reason FROM notifications")[0]
                #expect(row["status"] == "failed")
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
            }
        }
    }
}
