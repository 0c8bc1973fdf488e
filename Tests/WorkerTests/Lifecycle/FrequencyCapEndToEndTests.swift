import Foundation
import Postgres
import Testing
@testable import Worker

/// Frequency caps through real workers, the APNs emulator and PostgreSQL (docs/frequency-caps.md).
@Suite("Frequency caps end to end", .serialized)
struct FrequencyCapEndToEndTests {
    @Test func oneGrantServesEveryDeviceAndExemptSilentAndFailedNotificationsDoNotCount() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        #"UPDATE apps SET frequency_caps = '[{"max": 1, "per_seconds": 86400}]' WHERE id = $1"#, [seed.appID])
                    let ana = try seed.user("ana")
                    let phone = try seed.subscription(user: ana)
                    let tablet = try seed.subscription(user: ana)
                    // Ben's only device is gone (the emulator answers 410 Unregistered to tokens starting 0410).
                    let ben = try seed.user("ben")
                    try seed.subscription(user: ben, token: Seed.token(prefix: "0410"))
                    let target = #"{"include_external_ids": ["ana", "ben"]}"#
                    let first = try seed.notification(message: #"{"contents": {"en": "one"}}"#, target: target)
                    let second = try seed.notification(message: #"{"contents": {"en": "two"}}"#, target: #"{"include_external_ids": ["ana"]}"#)
                    let exempt = try seed.notification(
                        message: #"{"contents": {"en": "code 1234"}, "frequency_cap_exempt": true}"#,
                        target: #"{"include_external_ids": ["ana"]}"#)
                    let silent = try seed.notification(
                        message: #"{"content_available": true, "data": {"sync": 1}}"#, target: #"{"include_external_ids": ["ana"]}"#)
                    return (ana, ben, phone, tablet, first, second, exempt, silent)
                }
                let (ana, ben, phone, tablet, first, second, exempt, silent) = ids
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)

                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    func events(_ notification: UUID) throws -> [UUID: String] {
                        var result: [UUID: String] = [:]
                        for row in try connection.query(
                            "SELECT subscription_id, event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE notification_id = $1",
                            [notification])
                        {
                            result[try row.decode(UUID.self, "subscription_id")] = row["e"] ?? ""
                        }
                        return result
                    }
                    // Ana's first and second notifications race for her one slot: one of them reaches both of
                    // her devices, the other neither.
                    let outcomes = [try events(first)[phone], try events(first)[tablet], try events(second)[phone], try events(second)[tablet]]
                    let sentFirst = outcomes[0] == "sent"
                    #expect(outcomes[0] == outcomes[1])
                    #expect(outcomes[2] == outcomes[3])
                    #expect(Set([outcomes[0], outcomes[2]]) == ["sent", "skipped/frequency_capped"])
                    #expect(try events(exempt) == [phone: "sent", tablet: "sent"])
                    #expect(try events(silent) == [phone: "sent", tablet: "sent"])
                    let capped = try connection.query(
                        "SELECT detail FROM delivery_events WHERE reason = 'frequency_capped' LIMIT 1")[0]["detail"] ?? ""
                    #expect(capped.contains(#""used": 1"#))
                    // Grants: Ana's one sent notification; Ben's failed one was given back.
                    let grants = try connection.query("SELECT cap_key, notification_id FROM frequency_cap_grants")
                    #expect(grants.count == 1)
                    #expect(try grants.first?.decode(UUID.self, "cap_key") == ana)
                    #expect(try grants.first?.decode(UUID.self, "notification_id") == (sentFirst ? first : second))
                    let benEvents = try connection.query(
                        """
                        SELECT e.event || '/' || e.reason AS e FROM delivery_events e
                        JOIN subscriptions s ON s.id = e.subscription_id WHERE s.user_id = $1
                        """, [ben])
                    #expect(benEvents.map { $0["e"] ?? "" } == ["failed/unregistered"])
                    #expect(emulator.apns.acceptedCount == 6)
                }
            }
        }
    }

    /// The race between workers: four worker processes on one database; 100 users with 1-3 devices; 10 capped
    /// notifications per user under {"max": 3, "per_seconds": 86400}, plus 2 exempt ones.
    @Test func fourWorkerProcessesNeverGiveAUserAFourthNotification() async throws {
        let users = 100
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0) { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        #"UPDATE apps SET frequency_caps = '[{"max": 3, "per_seconds": 86400}]' WHERE id = $1"#, [seed.appID])
                    _ = try seed.connection.query(
                        "INSERT INTO users (app_id, external_id) SELECT $1, 'u' || n FROM generate_series(1, $2) n",
                        [seed.appID, users])
                    // 1, 2 or 3 devices per user.
                    _ = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language)
                        SELECT u.app_id, u.id, 'ios', 'a0' || md5(u.id::text || d) || substr(md5(d || u.id::text), 1, 30),
                               'production', 'en'
                        FROM users u, generate_series(1, 3) d
                        WHERE d <= 1 + (substr(u.external_id, 2)::int % 3)
                        """)
                    // A user's notifications are adjacent in the queue, so the workers claim them at once.
                    _ = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, created_at)
                        SELECT $1,
                               CASE WHEN k <= 10 THEN jsonb_build_object('contents', jsonb_build_object('en', 'capped ' || k))
                                    ELSE jsonb_build_object('contents', jsonb_build_object('en', 'exempt ' || k),
                                                            'frequency_cap_exempt', true) END,
                               jsonb_build_object('include_external_ids', jsonb_build_array(u.external_id)),
                               now() + make_interval(secs => (row_number() OVER (ORDER BY u.external_id, k))::float8 / 1e6)
                        FROM users u, generate_series(1, 12) k
                        """, [seed.appID])
                }

                var processes: [Process] = []
                for index in 0..<4 {
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                    process.arguments = ["run", "--concurrency", "32", "--claim-batch", "8", "--poll-interval", "0.05"]
                    process.environment = [
                        "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "error",
                        "PUSHIZO_EXIT_WHEN_DRAINED": "true", "PUSHIZO_WORKER_ID": "race-\(index)",
                        "PUSHIZO_DATABASE_CONNECTIONS": "6",
                        "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
                        "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                    ]
                    try process.run()
                    processes.append(process)
                }
                // Hang guard: each process exits by itself once the queue is drained.
                let guardTask = Task {
                    try await Task.sleep(for: .seconds(120))
                    for process in processes where process.isRunning { process.terminate() }
                }
                for process in processes {
                    try await onThread { process.waitUntilExit() }
                    #expect(process.terminationReason == .exit)
                    #expect(process.terminationStatus == 0)
                }
                guardTask.cancel()

                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    #expect(try connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                    // Per user: capped notifications sent (distinct), sent events of capped ones, devices.
                    let rows = try connection.query(
                        """
                        WITH devices AS (
                            SELECT user_id, count(*) AS devices FROM subscriptions GROUP BY user_id
                        ), outcomes AS (
                            SELECT s.user_id, e.notification_id, e.event, e.reason,
                                   coalesce((n.message->>'frequency_cap_exempt')::bool, false) AS exempt
                            FROM delivery_events e
                            JOIN subscriptions s ON s.id = e.subscription_id
                            JOIN notifications n ON n.id = e.notification_id
                        )
                        SELECT d.user_id, d.devices,
                               count(DISTINCT o.notification_id) FILTER (WHERE o.event = 'sent' AND NOT o.exempt) AS capped_notifications_sent,
                               count(*) FILTER (WHERE o.event = 'sent' AND NOT o.exempt) AS capped_sends,
                               count(*) FILTER (WHERE o.event = 'skipped' AND o.reason = 'frequency_capped') AS capped_skips,
                               count(*) FILTER (WHERE o.event = 'sent' AND o.exempt) AS exempt_sends,
                               count(*) FILTER (WHERE o.event NOT IN ('sent', 'skipped')) AS other_events
                        FROM devices d LEFT JOIN outcomes o ON o.user_id = d.user_id
                        GROUP BY d.user_id, d.devices
                        """)
                    #expect(rows.count == users)
                    var devicesTotal = 0
                    var violations: [String] = []
                    for row in rows {
                        let devices = try row.decode(Int.self, "devices")
                        devicesTotal += devices
                        let got = (
                            try row.decode(Int.self, "capped_notifications_sent"), try row.decode(Int.self, "capped_sends"),
                            try row.decode(Int.self, "capped_skips"), try row.decode(Int.self, "exempt_sends"),
                            try row.decode(Int.self, "other_events"))
                        if got != (3, 3 * devices, 7 * devices, 2 * devices, 0) {
                            violations.append("user \(row["user_id"] ?? "?") with \(devices) devices: \(got)")
                        }
                    }
                    #expect(violations.isEmpty, "\(violations.prefix(5))")
                    #expect(devicesTotal == 200)  // 33 users with 1 device, 34 with 2, 33 with 3
                    #expect(try connection.query("SELECT count(*) AS n FROM frequency_cap_grants")[0]["n"] == "300")
                    // Every accepted push has its one sent event: nothing went out twice.
                    let sent = try connection.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")[0]
                    #expect(try sent.decode(Int.self, "n") == 5 * devicesTotal)
                    #expect(emulator.apns.acceptedCount == 5 * devicesTotal)
                }
            }
        }
    }
}
