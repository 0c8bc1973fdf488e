import Foundation
import Postgres
import Testing
@testable import Worker

/// The real executable under SIGTERM: it stops claiming, finishes in-flight sends, writes their events and
/// exits 0 (what systemd's `systemctl stop` relies on).
@Suite("Graceful shutdown of pushizo-worker run")
struct GracefulShutdownTests {
    static var executable: String {
        if let configured = ProcessInfo.processInfo.environment["PUSHIZO_TEST_EXECUTABLE"] { return configured }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/pushizo-worker").path
    }

    @Test func sigtermFinishesInFlightSendsWritesTheirEventsAndExitsZero() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            // Each answer takes 0.3 s, so sends are in flight when the signal arrives.
            try await EmulatorHarness.with(latency: 0.3) { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token)
                        SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('y' || n), 1, 30) FROM generate_series(1, 300) n
                        """, [seed.appID])
                    _ = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target)
                        SELECT $1, '{"contents": {"en": "bye"}}', jsonb_build_object('include_subscription_ids', jsonb_agg(id))
                        FROM subscriptions
                        """, [seed.appID])
                }
                let process = Process()
                process.executableURL = URL(fileURLWithPath: Self.executable)
                process.arguments = ["run", "--concurrency", "40", "--claim-batch", "20", "--poll-interval", "0.05"]
                process.environment = [
                    "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "warning",
                    "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
                    "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                ]
                try process.run()

                // Wait (hang guard 30 s) until the worker has sent something, then ask it to stop.
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    let sent = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")
                    if sent[0]["n"] != "0" { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationReason == .exit)
                #expect(process.terminationStatus == 0)

                // Every delivery it claimed has its event; nothing is left leased behind.
                let claimedUnsettled = try await database.query("SELECT count(*) AS n FROM deliveries WHERE attempt > 0")
                #expect(claimedUnsettled[0]["n"] == "0")
                let sent = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")
                #expect(sent[0]["n"] == "\(emulator.apns.acceptedCount)")
                // It stopped part-way: the rest wait for the next worker, unclaimed or (its expansion paced by the
                // sends) not yet expanded.
                let waiting = try await database.query(
                    """
                    SELECT (SELECT count(*) FROM deliveries)
                           + 300 - (SELECT coalesce(max(targeted_count), 0) FROM notifications) AS n
                    """)[0].decode(Int.self, "n")
                #expect(waiting > 0)
                #expect(waiting + emulator.apns.acceptedCount == 300)
                await database.shutdown()
            }
        }
    }

    /// A stop while the worker has a grown table analyzed (which can take seconds on a large table) cancels the
    /// ANALYZE instead of waiting for it; the worker exits 0 at once.
    @Test func sigtermDuringAPlannerStatisticsRefreshCancelsItAndExitsZero() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let database = PostgresClient(connectionString: url, maximumConnections: 1)
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let notification = try seed.notification(target: #"{"all": true}"#)
                // A grown queue of deliveries not yet due (nothing to send), and ANALYZE slowed to a crawl for
                // new sessions by its cost-based delay.
                try seed.connection.execute("ALTER TABLE deliveries SET (autovacuum_enabled = false)")
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    SELECT $1, gen_random_uuid(), $2, now() + interval '1 hour' FROM generate_series(1, 30000)
                    """, [notification, seed.appID])
                let name = try seed.connection.query("SELECT current_database() AS name")[0]["name"] ?? ""
                try seed.connection.execute(
                    "ALTER DATABASE \(name) SET vacuum_cost_delay = '100ms'; ALTER DATABASE \(name) SET vacuum_cost_limit = 1")
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.executable)
            process.arguments = ["run", "--poll-interval", "0.05"]
            process.environment = [
                "PUSHIZO_DATABASE_URL": url, "PUSHIZO_LOG_LEVEL": "warning",
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            ]
            try process.run()
            // Until the worker's ANALYZE runs (a hang guard, however loaded the machine).
            var analyzing = false
            let deadline = ContinuousClock.now + .seconds(120)
            while ContinuousClock.now < deadline, !analyzing {
                let rows = try await database.query(
                    """
                    SELECT count(*) AS n FROM pg_stat_progress_analyze p JOIN pg_stat_activity a USING (pid)
                    WHERE a.application_name = 'pushizo-worker-statistics' AND a.datname = current_database()
                    """)
                analyzing = rows[0]["n"] != "0"
                if !analyzing { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(analyzing)
            let stoppedAt = ContinuousClock.now
            process.terminate()
            try await onThread { process.waitUntilExit() }
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 0)
            // The ANALYZE, slowed to 100 ms a page over a table of a few hundred pages, would take half a minute
            // and more: a worker that waited for it instead of cancelling would have let it finish, and the table
            // would carry its time. A hang guard only for the rest.
            #expect(ContinuousClock.now - stoppedAt < .seconds(120))
            let lastAnalyze = try await database.query(
                "SELECT last_analyze IS NULL AS never FROM pg_stat_user_tables WHERE relname = 'deliveries'")
            #expect(lastAnalyze.first?["never"] == "t", "the worker's ANALYZE ran to its end")
            // Cancelled, not left running on the server.
            var stillAnalyzing = true
            for _ in 0..<2_400 where stillAnalyzing {
                stillAnalyzing = try await database.query("SELECT count(*) AS n FROM pg_stat_progress_analyze")[0]["n"] != "0"
                if stillAnalyzing { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(!stillAnalyzing)
            await database.shutdown()
        }
    }
}

/// A stop reaches every loop at once, not after its poll interval: the expansion slice loops among them.
@Suite("A stop request reaches every loop")
struct StopReachesEveryLoopTests {
    @Test func anIdleWorkerWithAOneMinutePollStopsWellBeforeIt() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let configuration = try emulator.workerConfiguration(
                    databaseURL: url,
                    extra: ["PUSHIZO_POLL_INTERVAL": "60", "PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_EXPANSION_TASKS": "3",
                            "PUSHIZO_DATABASE_CONNECTIONS": "6"])
                #expect(configuration.expansionTasks == 3)
                let runtime = try WorkerRuntime(configuration: configuration, logger: quietLogger)
                let run = Task { await runtime.run() }
                // Every loop is waiting out its poll by now.
                try await Task.sleep(for: .seconds(1))
                let stopped = ContinuousClock.now
                runtime.requestStop()
                await run.value
                // A hang guard far below the poll interval, not a timing target: before the slice loops were
                // signalled, this waited the full minute.
                #expect(ContinuousClock.now - stopped < .seconds(30))
            }
        }
    }
}
