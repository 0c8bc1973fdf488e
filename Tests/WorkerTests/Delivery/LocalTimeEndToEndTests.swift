import Foundation
import Postgres
import Testing

/// Local-time delivery through the real `pushizo-worker run` process and the APNs emulator
/// (docs/local-time-delivery.md): the worker expands, waits for each subscriber's local time and sends then;
/// one expiring before its local time is skipped at once; one whose local time is an hour away stays scheduled.
@Suite("Local-time delivery end to end")
struct LocalTimeEndToEndTests {
    @Test func theWorkerSendsAtTheLocalTimeAndNotBefore() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (notification, subscribers, due) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    // The next whole UTC minute at least 4 s ahead: "HH:MM" there in UTC is a few seconds away
                    // (at most 64 s: local times are whole minutes, so the test waits for the clock).
                    let now = try seed.connection.query("SELECT now() AS t")[0].decode(Date.self, "t")
                    let due = Date(timeIntervalSince1970: ((now.timeIntervalSince1970 + 4) / 60).rounded(.up) * 60)
                    let formatter = DateFormatter()
                    formatter.locale = Locale(identifier: "en_US_POSIX")
                    formatter.timeZone = TimeZone(identifier: "UTC")
                    formatter.dateFormat = "HH:mm"
                    let time = formatter.string(from: due)
                    var subscribers: [String: UUID] = [:]
                    // UTC: due at `due`. Etc/GMT+1 (UTC-1): an hour later, inside the 2-hour ttl. Asia/Kathmandu
                    // (+05:45): that local time has passed today, tomorrow's is after the ttl.
                    for zone in ["UTC", "Etc/GMT+1", "Asia/Kathmandu"] {
                        let id = try seed.subscription()
                        _ = try seed.connection.query("UPDATE subscriptions SET timezone = $2 WHERE id = $1", [id, zone])
                        subscribers[zone] = id
                    }
                    let notification = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, send_after)
                        VALUES ($1, jsonb_build_object('contents', 'good morning', 'delivery_time_of_day', $2::text, 'ttl', 7200),
                                '{"all": true}', now() - interval '1 second')
                        RETURNING id
                        """, [seed.appID, time])[0].decode(UUID.self, "id")
                    return (notification, subscribers, due)
                }

                let process = Process()
                process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                process.arguments = ["run", "--poll-interval", "0.2"]
                process.environment = [
                    "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "warning",
                    "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
                    "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                ]
                try process.run()
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                // Hang guard only: the UTC delivery is due within about a minute.
                let deadline = ContinuousClock.now + .seconds(120)
                var settled = false
                while ContinuousClock.now < deadline {
                    let events = try await database.query(
                        "SELECT count(*) FILTER (WHERE event = 'sent') AS sent, count(*) FILTER (WHERE event = 'skipped') AS skipped FROM delivery_events")[0]
                    if events["sent"] == "1", events["skipped"] == "1" {
                        settled = true
                        break
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(settled)
                #expect(process.terminationStatus == 0)
                // Only the UTC subscriber's device got a push (more than once only if a send timed out and was
                // retried, which an overloaded machine can cause: at-least-once).
                let tokens = try await database.query(
                    "SELECT token FROM subscriptions WHERE id = $1", [subscribers["UTC"]!])[0]["token"]
                #expect(emulator.apns.acceptedCount >= 1)
                #expect(Set(emulator.apns.acceptedNotifications.map(\.deviceToken)) == [tokens ?? "?"])

                // The UTC subscriber's push was sent at its local time, not before it.
                let sent = try await database.query(
                    "SELECT subscription_id, at FROM delivery_events WHERE notification_id = $1 AND event = 'sent'",
                    [notification])
                #expect(sent.count == 1)
                if let row = sent.first {
                    #expect(try row.decode(UUID.self, "subscription_id") == subscribers["UTC"])
                    #expect(try row.decode(Date.self, "at") >= due)
                }
                let skipped = try await database.query(
                    "SELECT subscription_id, reason, detail->>'zone' AS zone FROM delivery_events WHERE event = 'skipped'")
                #expect(skipped.count == 1)
                #expect(try skipped.first?.decode(UUID.self, "subscription_id") == subscribers["Asia/Kathmandu"])
                #expect(skipped.first?["reason"] == "expired")
                #expect(skipped.first?["zone"] == "Asia/Kathmandu")
                // The UTC-1 subscriber waits an hour more: still queued, counted as scheduled, never claimed.
                let waiting = try await database.query(
                    "SELECT subscription_id, attempt, run_at = local_due_at AS on_time FROM deliveries")
                #expect(waiting.count == 1)
                #expect(try waiting.first?.decode(UUID.self, "subscription_id") == subscribers["Etc/GMT+1"])
                #expect(waiting.first?["attempt"] == "0")
                let counts = try await database.query(
                    "SELECT targeted, sent, skipped, scheduled FROM notification_counts WHERE notification_id = $1",
                    [notification])[0]
                #expect(counts["targeted"] == "3")
                #expect(counts["sent"] == "1")
                #expect(counts["skipped"] == "1")
                #expect(counts["scheduled"] == "1")
                await database.shutdown()
            }
        }
    }
}
