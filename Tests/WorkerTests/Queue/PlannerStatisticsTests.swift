import Foundation
import Postgres
import Testing
@testable import Worker

/// The refresh of grown tables' planner statistics (migrations 0021 and 0022) against a real PostgreSQL.
@Suite("Planner statistics of grown tables")
struct PlannerStatisticsTests {
    /// Queues `count` deliveries of one notification (subscription ids made up: deliveries do not reference
    /// subscriptions by foreign key).
    static func queue(_ seed: Seed, _ count: Int, on connection: PostgresConnection? = nil) throws {
        let notification = try seed.notification(target: #"{"all": true}"#)
        _ = try (connection ?? seed.connection).query(
            """
            INSERT INTO deliveries (notification_id, subscription_id, app_id)
            SELECT $1, gen_random_uuid(), $2 FROM generate_series(1, $3)
            """, [notification, seed.appID, count])
    }

    static func plan(of statement: String, on connection: PostgresConnection) throws -> String {
        try connection.query("EXPLAIN (COSTS OFF) EXECUTE \(statement)").map { $0["QUERY PLAN"] ?? "" }.joined(separator: "\n")
    }

    @Test func aQueueThatGrewIsAnalyzedOnceAndCachedPlansAreMadeAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                // No autoanalyze in between: the refresh is to be what describes the grown queue.
                try seed.connection.execute("ALTER TABLE deliveries SET (autovacuum_enabled = false)")
                try seed.connection.execute("VACUUM ANALYZE deliveries")
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
                // A claim-like statement whose generic plan is made while the queue is empty (a prepared
                // statement without parameters gets it at once).
                try seed.connection.execute(
                    """
                    PREPARE due AS SELECT id FROM deliveries WHERE app_id = '\(seed.appID.uuidString.lowercased())'
                    AND run_at <= now() ORDER BY priority DESC, run_at LIMIT 10
                    """)
                _ = try seed.connection.query("EXECUTE due")
                #expect(try Self.plan(of: "due", on: seed.connection).contains("Seq Scan on deliveries"))

                // The cached plan stays until something invalidates it: alone, the sequential scan is still used
                // now. Not checked: in a busy test run the server may reset this session's caches at any time
                // (its shared invalidation queue overflowing), which replans it too.
                try Self.queue(seed, 30_000)
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["deliveries"]))
                let plan = try Self.plan(of: "due", on: seed.connection)
                #expect(!plan.contains("Seq Scan"), "\(plan)")
                #expect(plan.contains("deliveries_claim_app"), "\(plan)")
                let pages = try seed.connection.query("SELECT relpages FROM pg_class WHERE relname = 'deliveries'")[0]
                #expect(try pages.decode(Int.self, "relpages") >= PlannerStatistics.minimumGrowthPages)
                // Analyzed now: no further growth, no further ANALYZE.
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
                try Self.queue(seed, 1_000)
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
            }
        }
    }

    /// The planner's row estimate for all of `deliveries` (`EXPLAIN`, nothing run).
    static func estimatedDeliveries(on connection: PostgresConnection) throws -> Int {
        let plan = try connection.query("EXPLAIN SELECT * FROM deliveries")[0]["QUERY PLAN"] ?? ""
        let rows = try #require(plan.split(separator: " ").first { $0.hasPrefix("rows=") })
        return try #require(Int(rows.dropFirst("rows=".count)))
    }

    /// Waits until the cumulative statistics' live-row count of `deliveries` satisfies `isReported`: a session's
    /// report comes within about a second on an idle server, later on a loaded one, so the wait is a hang guard
    /// (2 minutes), not a budget.
    static func awaitLiveDeliveries(on connection: PostgresConnection, until isReported: (Int) -> Bool) throws {
        for _ in 0..<1_200 {
            let live = try connection.query("SELECT pg_stat_get_live_tuples('deliveries'::regclass) AS live")[0]
            if isReported(try live.decode(Int.self, "live")) { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        Issue.record("the live-row count of deliveries was not reported within 2 minutes")
    }

    /// A seeded database whose queue held 30,000 deliveries (analyzed), all deleted, then vacuumed without
    /// truncation: what autovacuum leaves when it cannot take the lock to truncate, every page and no row.
    ///
    /// Rows are queued and deleted by sessions of their own, as the workers do. A session reports its counts to
    /// the cumulative statistics when it goes idle (a new one at once, later ones at most about once a second,
    /// later still when the statistics are busy): each report is awaited, so that none lands after the VACUUM has
    /// counted the table and moves its count.
    static func emptiedQueue(_ url: String) throws -> Seed {
        let seed = try Seed(url)
        try seed.app()
        try seed.connection.execute("ALTER TABLE deliveries SET (autovacuum_enabled = false)")
        try queue(seed, 30_000, on: PostgresConnection(connectionString: url))
        try awaitLiveDeliveries(on: seed.connection) { $0 >= 30_000 }
        #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["deliveries"]))
        try PostgresConnection(connectionString: url).execute("DELETE FROM deliveries")
        try awaitLiveDeliveries(on: seed.connection) { $0 <= 0 }
        try seed.connection.execute("VACUUM (TRUNCATE false) deliveries")
        return seed
    }

    /// Autovacuum that ran while the queue was empty and did not truncate its pages leaves statistics of zero rows
    /// over those pages: the planner then estimates one row, however many the next burst writes into the same
    /// pages (a completion planned that way joined its batch to the whole queue: 42 s for 20,000 deliveries).
    /// The file does not grow, so only the live-row rule finds it.
    @Test func statisticsOfAnEmptiedQueueAreRefreshedWhenItFillsItsPagesAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Self.emptiedQueue(url)
                let emptied = try seed.connection.query(
                    "SELECT relpages, reltuples::bigint AS reltuples FROM pg_class WHERE relname = 'deliveries'")[0]
                #expect(try emptied.decode(Int.self, "relpages") >= PlannerStatistics.minimumGrowthPages)
                #expect(try emptied.decode(Int.self, "reltuples") == 0)
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())

                try Self.queue(seed, 20_000, on: PostgresConnection(connectionString: url))
                #expect(try Self.estimatedDeliveries(on: seed.connection) == 1)
                // The file did not grow: only the live-row rule finds the table (polled in case the inserting
                // session's report was delayed).
                var grown: [String] = []
                for _ in 0..<100 where grown.isEmpty {
                    grown = try PlannerStatistics.grownTables(on: seed.connection)
                    if grown.isEmpty { Thread.sleep(forTimeInterval: 0.1) }
                }
                #expect(grown == ["deliveries"])
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["deliveries"]))
                let estimate = try Self.estimatedDeliveries(on: seed.connection)
                #expect((15_000...25_000).contains(estimate), "\(estimate)")
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
            }
        }
    }

    /// On a small queue that churns fast the cumulative statistics' live-row count drifts upward (deletions
    /// reported before the insertions they remove are set back at zero and lost): the table is counted before
    /// it is taken for grown, so an empty queue with a count of thousands is left alone.
    @Test func aLiveRowCountThatDriftedAboveTheRowsHeldAnalyzesNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Self.emptiedQueue(url)
                // A producer whose first report went out at once holds its next one for about a second...
                let producer = try PostgresConnection(connectionString: url)
                try Self.queue(seed, 1, on: producer)
                try Self.queue(seed, 5_000, on: producer)
                // ...while a consumer deletes those rows and reports first: the count stops at zero.
                try PostgresConnection(connectionString: url).execute("DELETE FROM deliveries")
                // The producer's report then brings it to 5,000 over an empty table.
                for _ in 0..<30 {
                    Thread.sleep(forTimeInterval: 0.1)
                    _ = try producer.query("SELECT 1")
                }
                try Self.awaitLiveDeliveries(on: seed.connection) { $0 >= 5_000 }
                #expect(try seed.connection.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n") == 0)
                #expect(try PlannerStatistics.grownTables(on: seed.connection) == [])
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
            }
        }
    }

    /// Grown notifications are analyzed for the columns the worker's statements look up and filter on, not for
    /// their documents (whose sampling made most of an ANALYZE's time).
    @Test func grownNotificationsAreAnalyzedWithoutTheirDocuments() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.connection.execute("ALTER TABLE notifications SET (autovacuum_enabled = false)")
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{"contents": {"en": "hi"}}', '{"all": true}', 'expanded' FROM generate_series(1, 20000)
                    """, [seed.appID])
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["notifications"]))
                let columns = try seed.connection.query(
                    "SELECT attname FROM pg_stats WHERE tablename = 'notifications' ORDER BY attname"
                ).map { $0["attname"] ?? "" }
                #expect(columns.contains("id") && columns.contains("status"), "\(columns)")
                #expect(!columns.contains("message") && !columns.contains("target"), "\(columns)")
            }
        }
    }

    /// A table autovacuum (or anyone) holds is skipped, not waited for (reported as skipped, so the worker checks
    /// less often); another worker's refresh in progress makes this one return at once. A later check does it.
    @Test func aTableAnotherSessionHoldsIsSkippedNotWaitedFor() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.connection.execute("ALTER TABLE deliveries SET (autovacuum_enabled = false)")
                try Self.queue(seed, 30_000)
                let other = try PostgresConnection(connectionString: url)
                // The lock ANALYZE and autovacuum take.
                try other.execute("BEGIN; LOCK TABLE deliveries IN SHARE UPDATE EXCLUSIVE MODE")
                #expect(try PlannerStatistics.grownTables(on: seed.connection) == ["deliveries"])
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(skipped: ["deliveries"]))
                try other.execute("COMMIT")
                // Another worker's refresh holds the fleet's turn.
                try other.execute("BEGIN; SELECT pg_advisory_xact_lock(x'5055534853544154'::bigint)")
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init())
                try other.execute("COMMIT")
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["deliveries"]))
            }
        }
    }

    /// The worker role may not own the tables (docs/systemd.md): the function analyzes with its owner's rights,
    /// for the roles granted it.
    @Test func aRoleThatOwnsNoTableCanAskForTheRefresh() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try Self.queue(seed, 30_000)
                // Roles belong to the cluster, which tests share: a name of this run's own.
                let role = "statistics_test_" + UUID().uuidString.prefix(8).lowercased()
                try seed.connection.execute("CREATE ROLE \(role); SET ROLE \(role)")
                defer {
                    try? seed.connection.execute(
                        "RESET ROLE; REVOKE ALL ON FUNCTION pushizo_refresh_grown_statistics(float8, integer, bigint) FROM \(role); DROP ROLE \(role)")
                }
                // Not for any role that can connect: the worker role is granted it (docs/systemd.md).
                let denied = try #require(throws: PostgresError.self) { try PlannerStatistics.refresh(on: seed.connection) }
                #expect(denied.sqlState == "42501")
                try seed.connection.execute(
                    "RESET ROLE; GRANT EXECUTE ON FUNCTION pushizo_refresh_grown_statistics(float8, integer, bigint) TO \(role); SET ROLE \(role)")
                #expect(try PlannerStatistics.grownTables(on: seed.connection) == ["deliveries"])
                #expect(try PlannerStatistics.refresh(on: seed.connection) == .init(analyzed: ["deliveries"]))
                try seed.connection.execute("RESET ROLE")
                let pages = try seed.connection.query("SELECT relpages FROM pg_class WHERE relname = 'deliveries'")[0]
                #expect(try pages.decode(Int.self, "relpages") >= PlannerStatistics.minimumGrowthPages)
            }
        }
    }

    @Test func checksComeLessOftenAfterSetbacks() {
        #expect(PlannerStatistics.pause(afterSetbacks: 0) == .seconds(1))
        #expect(PlannerStatistics.pause(afterSetbacks: 1) == .seconds(2))
        #expect(PlannerStatistics.pause(afterSetbacks: 3) == .seconds(8))
        #expect(PlannerStatistics.pause(afterSetbacks: 6) == .seconds(60))
        #expect(PlannerStatistics.pause(afterSetbacks: 1_000) == .seconds(60))
    }
}
