import Foundation
import Postgres
import Testing
@testable import Worker

/// The claim statement's token bucket (`apps.max_sends_per_second`, migration 0012) against PostgreSQL, with
/// the bucket's state set directly so that no assertion depends on timing.
@Suite("Per-app throttle in the claim statement")
struct ThrottleClaimTests {
    /// An app with `count` subscriptions and one notification expanded to them at `priority`.
    static func appWithDueDeliveries(_ url: String, count: Int, priority: Int, limit: Double?) throws -> Seed {
        let seed = try Seed(url)
        try seed.app()
        if let limit {
            _ = try seed.connection.query("UPDATE apps SET max_sends_per_second = $2 WHERE id = $1", [seed.appID, limit])
        }
        _ = try seed.connection.query(
            "INSERT INTO subscriptions (app_id, platform, token) SELECT $1::uuid, 'ios', md5($1::uuid::text || n) FROM generate_series(1, $2) n",
            [seed.appID, count])
        let notification = try seed.notification(target: #"{"all": true}"#)
        _ = try seed.connection.query(
            """
            INSERT INTO deliveries (notification_id, subscription_id, app_id, priority, run_at)
            SELECT $1, id, app_id, $3, now() - interval '1 minute' FROM subscriptions WHERE app_id = $2
            """, [notification, seed.appID, priority])
        return seed
    }

    static func claimedCounts(_ claimed: [ClaimedDelivery], _ seeds: Seed...) -> [Int] {
        seeds.map { seed in claimed.filter { $0.appID == seed.appID }.count }
    }

    /// Empties the bucket and dates its last refill an hour ahead, so it holds no permit until then.
    static func emptyBucket(_ seed: Seed) throws {
        _ = try seed.connection.query(
            "UPDATE app_send_buckets SET tokens = 0, refilled_at = now() + interval '1 hour' WHERE app_id = $1",
            [seed.appID])
    }

    static func tokens(_ seed: Seed) throws -> Double? {
        try seed.connection.query("SELECT tokens FROM app_send_buckets WHERE app_id = $1", [seed.appID])
            .first?.decode(Double.self, "tokens")
    }

    /// Seconds from the database's now() to the app's claim turn (nil for 'infinity').
    static func secondsToTurn(_ seed: Seed) throws -> Double? {
        try seed.connection.query(
            """
            SELECT CASE WHEN turn_at < 'infinity' THEN extract(epoch FROM turn_at - now())::float8 END AS s
            FROM app_claim_turns WHERE app_id = $1
            """, [seed.appID])[0].decodeIfPresent(Double.self, "s")
    }

    @Test func aLimitedAppGetsItsBurstAndTheRestOfTheBatchGoesToOthers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let limited = try Self.appWithDueDeliveries(url, count: 300, priority: 10, limit: 200)
                let free = try Self.appWithDueDeliveries(url, count: 40, priority: 5, limit: nil)
                // A full bucket: 20 permits (a tenth of 200/s).
                let first = try ClaimStore.claim(on: limited.connection, limit: 100, lease: .seconds(60), workerID: "t")
                #expect(Self.claimedCounts(first, limited, free) == [20, 40])
                // Its turn waits for the next permit (a two-hundredth of a second), the other app's for its lease.
                #expect(try #require(try Self.secondsToTurn(limited)) < 1)
                #expect(try #require(try Self.secondsToTurn(free)) > 30)
                // No permit left (refill set an hour ahead): only the unlimited app's rows, made due again by hand
                // (its turn brought forward by the repair, as the worker runs it), none of them left after.
                try Self.emptyBucket(limited)
                _ = try free.connection.query("UPDATE deliveries SET run_at = now() - interval '1 minute' WHERE app_id = $1", [free.appID])
                #expect(try ClaimStore.repairClaimTurns(on: free.connection) == 1)
                let second = try ClaimStore.claim(on: limited.connection, limit: 100, lease: .seconds(60), workerID: "t")
                #expect(Self.claimedCounts(second, limited, free) == [0, 40])
                // Visited without a permit: its turn waits for the refill, an hour ahead.
                #expect(try #require(try Self.secondsToTurn(limited)) > 3_000)
                // Waiting rows were not written: still due, unleased, attempt 0.
                let waiting = try limited.connection.query(
                    """
                    SELECT count(*) FILTER (WHERE run_at <= now() AND leased_by IS NULL AND attempt = 0) AS waiting
                    FROM deliveries WHERE app_id = $1
                    """, [limited.appID])[0].decode(Int.self, "waiting")
                #expect(waiting == 280)
            }
        }
    }

    @Test func permitsOfRowsNotClaimedStayInTheBucket() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let limited = try Self.appWithDueDeliveries(url, count: 5, priority: 5, limit: 200)
                _ = try limited.connection.query(
                    "UPDATE app_send_buckets SET tokens = 20, refilled_at = now() + interval '1 hour' WHERE app_id = $1",
                    [limited.appID])
                let claimed = try ClaimStore.claim(on: limited.connection, limit: 100, lease: .seconds(60), workerID: "t")
                #expect(claimed.count == 5)
                #expect(try Self.tokens(limited) == 15)
                // A batch of 3 shared with another app: the limited app is charged for what it got, not its permits.
                _ = try limited.connection.query(
                    "UPDATE app_send_buckets SET tokens = 15, refilled_at = now() + interval '1 hour' WHERE app_id = $1",
                    [limited.appID])
                let free = try Self.appWithDueDeliveries(url, count: 3, priority: 10, limit: nil)
                _ = try limited.connection.query("UPDATE deliveries SET run_at = now() - interval '1 minute' WHERE app_id = $1", [limited.appID])
                _ = try ClaimStore.repairClaimTurns(on: limited.connection)
                let batch = try ClaimStore.claim(on: limited.connection, limit: 3, lease: .seconds(60), workerID: "t")
                let counts = Self.claimedCounts(batch, limited, free)
                #expect(counts[0] >= 1 && counts[1] >= 1 && counts[0] + counts[1] == 3)
                #expect(try Self.tokens(limited) == 15 - Double(counts[0]))
            }
        }
    }

    /// Any positive finite limit the column's CHECK takes: the claim, the claim loop's wait and `status` stay in
    /// float8's range (migration 0025). Before, 1.7e308/s failed every worker's every claim at once ("value out of
    /// range: overflow"), 1e305/s after an idle hour, and 5e-324/s underflowed.
    @Test func extremeLimitsNeitherOverflowNorStopTheClaim() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let huge = try Self.appWithDueDeliveries(url, count: 30, priority: 5, limit: 1.7e308)
                let idle = try Self.appWithDueDeliveries(url, count: 30, priority: 5, limit: 1e305)
                let tiny = try Self.appWithDueDeliveries(url, count: 30, priority: 5, limit: .leastNonzeroMagnitude)
                let free = try Self.appWithDueDeliveries(url, count: 10, priority: 5, limit: nil)
                _ = try idle.connection.query(
                    "UPDATE app_send_buckets SET tokens = 0, refilled_at = now() - interval '1 hour' WHERE app_id = $1",
                    [idle.appID])
                // The tiny limit's bucket starts full: one permit (the burst is at least one).
                let claimed = try ClaimStore.claim(on: free.connection, limit: 200, lease: .seconds(60), workerID: "t")
                #expect(Self.claimedCounts(claimed, huge, idle, tiny, free) == [30, 30, 1, 10])
                // Only the tiny limit has due deliveries left; its next permit is ages away: its turn is a day off
                // (the cap), and the claim loop's wait is the nearest turn, the others' leases.
                #expect(try #require(try Self.secondsToTurn(tiny)) > 86_000)
                let wait = try #require(try ClaimStore.nextTurnWait(on: free.connection))
                #expect(wait > 30 && wait <= 60)
                let status = try FleetStatusStore.read(on: free.connection)
                #expect(status.throttledApps.count == 3)
                let text = FleetStatusRenderer.text(status)
                #expect(text.contains(tiny.appID.uuidString.lowercased()))
            }
        }
    }

    @Test func settingAndClearingALimitMakesOrDropsTheBucketAndBringsTheTurnForward() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let app = try Self.appWithDueDeliveries(url, count: 10, priority: 5, limit: nil)
                #expect(try Self.tokens(app) == nil)
                _ = try app.connection.query("UPDATE apps SET max_sends_per_second = 0.5 WHERE id = $1", [app.appID])
                #expect(try Self.tokens(app) == 1)  // the burst: at least one permit
                // Limited: a claim without permits puts the app's turn off until the refill, and a worker whose
                // claim came back short is told to come back then.
                try Self.emptyBucket(app)
                #expect(try ClaimStore.claim(on: app.connection, limit: 10, lease: .seconds(60), workerID: "t").isEmpty)
                let wait = try #require(try ClaimStore.nextTurnWait(on: app.connection))
                #expect(wait > 3_000)
                // Cleared: the bucket goes and the turn comes now.
                _ = try app.connection.query("UPDATE apps SET max_sends_per_second = NULL WHERE id = $1", [app.appID])
                #expect(try Self.tokens(app) == nil)
                #expect(try ClaimStore.nextTurnWait(on: app.connection) == nil)
                #expect(try ClaimStore.claim(on: app.connection, limit: 10, lease: .seconds(60), workerID: "t").count == 10)
                // Refused: a limit must be a positive finite rate.
                for bad in ["0", "-1", "'infinity'", "'NaN'"] {
                    #expect(throws: PostgresError.self) {
                        _ = try app.connection.query(
                            "UPDATE apps SET max_sends_per_second = \(bad) WHERE id = $1", [app.appID])
                    }
                }
            }
        }
    }

    /// Apps with a send limit and nothing queued cost a claim nothing: it visits only apps whose turn has come,
    /// so with 10,000 idle limited apps it reads none of their buckets (it locked and read every limited app's
    /// bucket before, and each claim slowed with their number: 10 ms with none, 53 ms with 10,000, measured).
    @Test func idleLimitedAppsCostAClaimNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let free = try Self.appWithDueDeliveries(url, count: 10, priority: 5, limit: nil)
                _ = try free.connection.query(
                    "INSERT INTO apps (max_sends_per_second) SELECT 5 FROM generate_series(1, 10000)")
                // One limited app with due deliveries: its bucket, and only its, is read (once to lock and once
                // to charge it), and the two apps' turns (to visit, lock and move them).
                let busy = try Self.appWithDueDeliveries(url, count: 10, priority: 5, limit: 100)
                _ = try free.connection.query("ANALYZE")
                let plan = try ExplainedPlan(
                    analyzing: ClaimStore.claimSQL(picking: .due), [200, 60.0, "explain", [UUID](), [UUID](), [Int]()],
                    on: free.connection, keep: true)
                #expect(plan.rowsRead(of: "app_send_buckets") <= 2, "\(plan.text)")
                #expect(plan.rowsRead(of: "app_claim_turns") <= 8, "\(plan.text)")
                let claimed = try free.connection.query(
                    "SELECT app_id, count(*) AS n FROM deliveries WHERE leased_by = 'explain' GROUP BY app_id")
                #expect(claimed.count == 2)
                _ = busy
            }
        }
    }
}
