import Foundation
import Postgres
import Testing
@testable import Worker

/// The FCM projects' fleet-wide buckets (migration 0034; docs/fcm.md, "Project quota") against PostgreSQL, on a
/// clock the test drives (each charge's instant is given): apps on one project share one bucket whose grants stay
/// within the documented arithmetic (capacity and refill quota / 61 a second, so at most the quota in any 60
/// seconds), the smallest quota the sharing apps set wins, another project is unaffected, and concurrent charges
/// never grant more than the bucket holds.
@Suite("FCM project quota buckets")
struct FCMProjectQuotaStoreTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// An app with an fcm channel whose settings are `settings` (only the members the charge reads).
    static func app(_ connection: PostgresConnection, settings: String) throws -> UUID {
        let app = UUID()
        _ = try connection.query("INSERT INTO apps (id) VALUES ($1)", [app])
        _ = try connection.query(
            "INSERT INTO app_channels (app_id, provider, settings) VALUES ($1, 'fcm', $2::jsonb)", [app, settings])
        return app
    }

    @Test func appsOnOneProjectShareOneBucketAndAnotherProjectIsUnaffected() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                defer { c.close() }
                // Two apps on "shared-proj" that set different sizes (the smallest, 6,100 a minute, wins: 100
                // permits a second, 100 at most in the bucket), a third on "other-proj" with Firebase's default.
                _ = try Self.app(c, settings: #"{"project_id": "shared-proj", "project_quota_per_minute": 6100}"#)
                _ = try Self.app(c, settings: #"{"service_account": {"project_id": "shared-proj"}, "project_quota_per_minute": 12200}"#)
                _ = try Self.app(c, settings: #"{"service_account": {"project_id": "other-proj"}}"#)
                // A value that is not a whole number of 1 ... 1e9 is no setting (the default applies), and fails nothing.
                _ = try Self.app(c, settings: #"{"project_id": "odd-proj", "project_quota_per_minute": "fast"}"#)
                _ = try Self.app(c, settings: #"{"project_id": "odd-proj", "project_quota_per_minute": 1e400}"#)

                // 120 seconds in steps of half a second: each step the two apps' batches ask 40 sends each (160 a
                // second, beyond the 100 the bucket refills), the third app's batch 500 (1,000 a second, a tenth
                // of its project's refill).
                let step = 0.5, steps = 240
                var shared: [Int] = [], first: [Int] = [], second: [Int] = [], other: [Int] = []
                for n in 0...steps {
                    let at = Self.start.addingTimeInterval(Double(n) * step)
                    let a = try FCMProjectQuotaStore.charge(on: c, asks: [("shared-proj", 40)], at: at)
                    let b = try FCMProjectQuotaStore.charge(on: c, asks: [("shared-proj", 40)], at: at)
                    let o = try FCMProjectQuotaStore.charge(on: c, asks: [("other-proj", 500)], at: at)
                    #expect(a.map(\.quotaPerMinute) == [6100] && b.map(\.quotaPerMinute) == [6100])
                    #expect(o.map(\.quotaPerMinute) == [600_000])
                    first.append(a[0].granted)
                    second.append(b[0].granted)
                    shared.append(a[0].granted + b[0].granted)
                    other.append(o[0].granted)
                }
                // Any 60 seconds (121 charge instants, 60 s apart at the ends) hold at most the quota: the
                // capacity plus 60 s of refill, 100 + 6,000. Demand never let up, so the first minute took all of it.
                let window = Int(60 / step)
                for n in 0...(steps - window) {
                    let sum = shared[n...(n + window)].reduce(0, +)
                    #expect(sum <= 6100, "the 60 s from step \(n) granted \(sum)")
                }
                #expect(shared[0...window].reduce(0, +) == 6100)
                // The full bucket, then what it had left plus a step's refill, then exactly the refill, 50 a step.
                #expect(Array(shared.prefix(2)) == [80, 70])
                #expect(shared.dropFirst(2).allSatisfy { $0 == 50 }, "\(shared)")
                #expect(first.reduce(0, +) > 0 && second.reduce(0, +) > 0)
                #expect(other.allSatisfy { $0 == 500 }, "\(other)")

                let odd = try FCMProjectQuotaStore.charge(on: c, asks: [("odd-proj", 1)], at: Self.start)
                #expect(odd.map(\.quotaPerMinute) == [600_000])

                // The bucket's row: the quota applied, and the sends held back, counted.
                let row = try c.query(
                    "SELECT per_minute::float8 AS q, held_deliveries AS held, held_at IS NOT NULL AS was_held FROM fcm_project_buckets WHERE project_id = 'shared-proj'"
                )[0]
                #expect(row["q"] == "6100")
                #expect(row["held"] == "\((steps + 1) * 80 - shared.reduce(0, +))")
                #expect(row["was_held"] == "t")
                #expect(try c.query("SELECT held_at IS NULL AS never FROM fcm_project_buckets WHERE project_id = 'other-proj'")[0]["never"] == "t")
            }
        }
    }

    /// Eight workers charge one project at the same instant: together they are granted exactly the whole permits
    /// the bucket holds, whoever gets them.
    @Test func concurrentChargesNeverGrantMoreThanTheBucketHolds() async throws {
        try await TestDatabase.withMigratedDatabase { url in try await Self.raceCharges(url: url) }
    }

    /// Eight workers' charges at one instant on the database at `url`, after a charge that emptied the bucket: they
    /// share the refill, 7 whole permits, and no more.
    static func raceCharges(url: String) async throws {
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            // 610 a minute: 10 permits a second, 10 at most in the bucket. Emptied at the start.
            _ = try Self.app(c, settings: #"{"project_id": "race-proj", "project_quota_per_minute": 610}"#)
            #expect(try FCMProjectQuotaStore.charge(on: c, asks: [("race-proj", 100)], at: Self.start).map(\.granted) == [10])
        }
        let at = Self.start.addingTimeInterval(0.75)
        let granted = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await onThread {
                        let c = try PostgresConnection(connectionString: url)
                        defer { c.close() }
                        return try FCMProjectQuotaStore.charge(on: c, asks: [("race-proj", 3)], at: at)[0].granted
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        // 0.75 s of refill: 7.5 permits, 7 whole ones.
        #expect(granted.reduce(0, +) == 7, "\(granted)")
    }
}
