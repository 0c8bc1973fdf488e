import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

@Suite("ClaimStore against PostgreSQL")
struct ClaimStoreTests {
    /// A claim costs its batch, not the tables it touches: with 3,000 subscriptions, 200 notifications and
    /// 3,000 deliveries not yet due in the database, claiming the 4 due deliveries reads 4 rows of
    /// `subscriptions`, 4 of `notifications` and of `deliveries` only those and a few probes for the app's next
    /// claim turn (one per distinct priority), however the statistics stand (none were gathered for subscriptions
    /// and notifications, which made the claim hash the whole subscriptions table; those of the queue made it scan
    /// the whole queue to update the rows it picked).
    @Test func aClaimReadsItsRowsNotTheTables() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 'a0a0' FROM generate_series(1, 3000)",
                    [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{}', '{}', 'expanded' FROM generate_series(1, 200)
                    """, [seed.appID])
                let later = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    SELECT $1, id, app_id, now() + interval '1 day' FROM subscriptions WHERE app_id = $2
                    """, [later, seed.appID])
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [later])
                let listed = try (0..<4).map { _ in try seed.subscription() }
                let id = try seed.notification(
                    target: #"{"include_subscription_ids": [\#(listed.map { "\"\($0)\"" }.joined(separator: ", "))]}"#)
                #expect(try ExpansionStore.expandNext(on: seed.connection) == .expanded(notificationID: id, created: 4))
                // Statistics of the queue as it stands, and a whole batch asked for: a join planned from them reads
                // the 3,004 rows at once rather than probing 200 times.
                _ = try seed.connection.query("ANALYZE deliveries")
                let plan = try ExplainedPlan(
                    analyzing: ClaimStore.claimSQL(picking: .due), [200, 60.0, "explain", [UUID](), [UUID](), [Int]()],
                    on: seed.connection)
                #expect(plan.rowsRead(of: "subscriptions") <= 4, "\(plan.text)")
                #expect(plan.rowsRead(of: "notifications") <= 4, "\(plan.text)")
                #expect(plan.rowsRead(of: "deliveries") <= 20, "\(plan.text)")
            }
        }
    }

    /// The claim's planned cost grows with the queue (its per-app picks' `LIMIT` is unknown at planning) and passed
    /// `jit_above_cost` on a deep queue, where compiling took most of each claim: the claim runs with `jit` off,
    /// whatever the session's setting. A trigger on the claim's own update of the turns reads the setting.
    @Test func theClaimRunsWithoutJIT() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let subscription = try seed.subscription()
                let notification = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                _ = try seed.connection.query(
                    "INSERT INTO deliveries (notification_id, subscription_id, app_id) VALUES ($1, $2, $3)",
                    [notification, subscription, seed.appID])
                _ = try seed.connection.query("CREATE TABLE jit_seen (setting text)")
                _ = try seed.connection.query(
                    """
                    CREATE FUNCTION note_jit() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN INSERT INTO jit_seen VALUES (current_setting('jit')); RETURN NULL; END $$
                    """)
                _ = try seed.connection.query(
                    "CREATE TRIGGER note_jit AFTER UPDATE ON app_claim_turns FOR EACH STATEMENT EXECUTE FUNCTION note_jit()")
                try seed.connection.execute("SET jit = on")
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "w")
                #expect(claimed.map(\.subscriptionID) == [subscription])
                let seen = try seed.connection.query("SELECT setting FROM jit_seen").map { try $0.decode(String.self, "setting") }
                #expect(seen == ["off"])
                // The session's own setting is as it was.
                #expect(try seed.connection.query("SELECT current_setting('jit') AS jit")[0].decode(String.self, "jit") == "on")
            }
        }
    }

    @Test func concurrentClaimersNeverShareADelivery() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let total = 1500
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token)
                    SELECT $1, 'ios', md5(n::text) || md5(n::text) FROM generate_series(1, $2) n
                    """, [seed.appID, total])
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target) VALUES ($1, '{}', '{"all": true}');
                    """, [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id)
                    SELECT n.id, s.id, s.app_id FROM subscriptions s CROSS JOIN notifications n
                    """)
            }
            let claims = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        try await onThread {
                            let connection = try PostgresConnection(connectionString: url)
                            var mine: [Int64] = []
                            while true {
                                let batch = try ClaimStore.claim(
                                    on: connection, limit: 37, lease: .seconds(600), workerID: "w\(worker)")
                                if batch.isEmpty { return mine }
                                mine += batch.map(\.id)
                            }
                        }
                    }
                }
                var all: [[Int64]] = []
                for try await claimed in group { all.append(claimed) }
                return all
            }
            let flat = claims.flatMap { $0 }
            #expect(flat.count == total)
            #expect(Set(flat).count == total)
        }
    }

    /// A row claimed again after its lease ran out names the worker whose lease it was (`rescued_from`); a row a
    /// completion put back (`leased_by` cleared) and a row never claimed name none.
    @Test func aClaimNamesTheWorkerWhoseExpiredLeaseItRescues() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                for _ in 0..<4 { try seed.subscription() }
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id)
                    SELECT $1, id, app_id FROM subscriptions WHERE app_id = $2
                    """, [notification, seed.appID])
                let first = try ClaimStore.claim(on: seed.connection, limit: 3, lease: .seconds(600), workerID: "w-dead")
                #expect(first.count == 3)
                #expect(first.allSatisfy { $0.rescuedFrom == nil })
                #expect(RescuedLeases(first) == nil)
                let ids = first.map(\.id).sorted()
                // Two leases run out; the third delivery's completion put it back as a retry does.
                _ = try seed.connection.query(
                    "UPDATE deliveries SET run_at = now() - interval '1 second' WHERE id = ANY($1)", [Array(ids.prefix(2))])
                _ = try seed.connection.query(
                    "UPDATE deliveries SET run_at = now() - interval '1 second', leased_by = NULL WHERE id = $1", [ids[2]])
                _ = try seed.connection.query("UPDATE app_claim_turns SET turn_at = now() WHERE app_id = $1", [seed.appID])
                let second = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(600), workerID: "w-alive")
                #expect(second.count == 4)
                let rescued = Dictionary(uniqueKeysWithValues: second.map { ($0.id, $0.rescuedFrom) })
                #expect(rescued[ids[0]] == "w-dead" && rescued[ids[1]] == "w-dead")
                #expect(rescued[ids[2]] == .some(nil))
                #expect(second.filter { $0.rescuedFrom != nil }.count == 2)
                let summary = try #require(RescuedLeases(second))
                #expect(summary.count == 2 && summary.byProvider == [.apns: 2] && summary.workers == ["w-dead"])
                #expect(summary.logFields == ["rescued": "2", "from": "w-dead"])
            }
        }
    }

    /// The claim loop's check before a claim it may skip says `due` exactly when the claim would visit an app: a
    /// turn at or before `now()` of an app with room, not paused, in a fleet not paused. A claim skipped on its
    /// answer would have taken nothing.
    @Test func theTurnCheckIsDueExactlyWhenTheClaimVisitsAnApp() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let subscription = try seed.subscription()
                let notification = try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                // Leased at insert: the turn is the lease's end.
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at, attempt, fence, leased_by)
                    VALUES ($1, $2, $3, now() + interval '60 seconds', 1, 1, 'w-other')
                    """, [notification, subscription, seed.appID])
                let ahead = try ClaimStore.turns(on: seed.connection, noRoom: [])
                #expect(!ahead.due)
                #expect((ahead.wait ?? 0) > 50 && (ahead.wait ?? 0) <= 60)
                #expect(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "w").isEmpty)
                // Due: the lease ran out.
                _ = try seed.connection.query("UPDATE deliveries SET run_at = now() - interval '1 second'")
                _ = try seed.connection.query("UPDATE app_claim_turns SET turn_at = now() - interval '1 second'")
                #expect(try ClaimStore.turns(on: seed.connection, noRoom: []).due)
                #expect(try !ClaimStore.turns(on: seed.connection, noRoom: [seed.appID]).due)
                _ = try seed.connection.query("UPDATE apps SET paused_until = 'infinity', paused_reason = 'operator'")
                #expect(try !ClaimStore.turns(on: seed.connection, noRoom: []).due)
                _ = try seed.connection.query("UPDATE apps SET paused_until = NULL, paused_reason = NULL")
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = 'infinity', paused_reason = 'operator'")
                #expect(try !ClaimStore.turns(on: seed.connection, noRoom: []).due)
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = NULL, paused_reason = NULL")
                #expect(try ClaimStore.turns(on: seed.connection, noRoom: []).due)
                #expect(try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "w").count == 1)
            }
        }
    }
}
