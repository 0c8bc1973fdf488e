import Foundation
import Postgres
import Testing

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
                // It stopped part-way: the rest wait, unclaimed, for the next worker.
                let waiting = try await database.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n")
                #expect(waiting > 0)
                #expect(waiting + emulator.apns.acceptedCount == 300)
                await database.shutdown()
            }
        }
    }
}
