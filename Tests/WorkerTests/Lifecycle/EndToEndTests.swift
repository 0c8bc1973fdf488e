import Emulator
import Foundation
import Postgres
import PushCrypto
import Testing
@testable import Worker

/// Rows in, events out: PostgreSQL -> worker -> HTTP/2 over TLS -> the APNs emulator -> delivery_events.
@Suite("End to end through the APNs emulator", .serialized)
struct EndToEndTests {
    @Test func deliversInvalidatesAndRetries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en", channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let ayse = try seed.user("ayse")
                    _ = try seed.connection.query(
                        #"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [ayse])
                    let good = try seed.subscription(user: ayse, token: Seed.token(prefix: "a0a0"), language: "tr-TR")
                    let gone = try seed.subscription(user: ayse, token: Seed.token(prefix: "0410"))
                    let flaky = try seed.subscription(user: ayse, token: Seed.token(prefix: "0503"), language: "de")
                    let notification = try seed.notification(
                        message: #"""
                            {"headings": {"en": "Hello", "tr": "Merhaba {{ first_name | default: \"dostum\" }}"},
                             "contents": {"en": "Your order shipped", "tr": "Siparişin yola çıktı"},
                             "ios_sound": "chime.caf", "thread_id": "orders", "data": {"order": 42}}
                            """#,
                        target: #"{"include_external_ids": ["ayse"]}"#)
                    return (good, gone, flaky, notification)
                }
                let (good, gone, flaky, notification) = ids
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)

                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    func events(_ subscription: UUID) throws -> [String] {
                        try connection.query(
                            "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
                            [subscription]
                        ).map { $0["e"] ?? "" }
                    }
                    #expect(try events(good) == ["sent"])
                    #expect(try events(gone) == ["failed/unregistered"])
                    #expect(try events(flaky) == ["retrying/service_unavailable", "sent"])
                    #expect(try connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")

                    let statuses = try connection.query("SELECT id, status, invalid_reason FROM subscriptions")
                    for row in statuses {
                        let id = try row.decode(UUID.self, "id")
                        #expect(row["status"] == (id == gone ? "invalid" : "active"))
                    }
                    // `sent` carries the apns-id the emulator answered with; the retry kept the same apns-id
                    // (the emulator answers 503 only to the first request of each apns-id).
                    let sent = try connection.query(
                        "SELECT subscription_id, attempt, detail->>'apns_id' AS apns_id FROM delivery_events WHERE event = 'sent'")
                    let accepted = Set(emulator.apns.acceptedNotifications.map(\.apnsID))
                    #expect(accepted.count == 2)
                    for row in sent {
                        #expect(accepted.contains(row["apns_id"] ?? "?"))
                        if try row.decode(UUID.self, "subscription_id") == flaky { #expect(row["attempt"] == "2") }
                    }
                    let notificationRow = try connection.query(
                        "SELECT status, targeted_count FROM notifications WHERE id = $1", [notification])[0]
                    #expect(notificationRow["status"] == "expanded")
                    #expect(notificationRow["targeted_count"] == "3")
                }

                // What the Turkish subscriber's device got: her language, placeholders filled, the signed msgId.
                let turkish = try #require(emulator.apns.acceptedNotifications.first { $0.payload.count > 0 && String(decoding: $0.payload, as: UTF8.self).contains("Merhaba") })
                let payload = try #require(try JSONSerialization.jsonObject(with: Data(turkish.payload)) as? [String: Any])
                let aps = try #require(payload["aps"] as? [String: Any])
                let alert = try #require(aps["alert"] as? [String: Any])
                #expect(alert["title"] as? String == "Merhaba Ayşe")
                #expect(alert["body"] as? String == "Siparişin yola çıktı")
                #expect(aps["sound"] as? String == "chime.caf")
                #expect(aps["thread-id"] as? String == "orders")
                #expect(aps["mutable-content"] as? Int == 1)
                let on = try #require(payload["on"] as? [String: Any])
                let msgID = try #require(on["msgId"] as? String)
                let signingKey = try await onThread {
                    try PostgresConnection(connectionString: url).query("SELECT signing_key FROM apps")[0].decode([UInt8].self, "signing_key")
                }
                let decoded = try #require(MessageIDCodec.verify(msgID, key: signingKey))
                #expect(decoded.subscriptionID == good)
                #expect(decoded.notificationID == notification)
            }
        }
    }

    @Test func twoWorkersSendEachDeliveryExactlyOnce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let total = 400
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token, language)
                        SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('x' || n), 1, 30), 'en'
                        FROM generate_series(1, $2) n
                        """, [seed.appID, total])
                    let ids = try seed.connection.query("SELECT id FROM subscriptions ORDER BY id").map { $0["id"] ?? "" }
                    for chunk in stride(from: 0, to: ids.count, by: 100) {
                        let slice = ids[chunk..<min(chunk + 100, ids.count)].map { "\"\($0)\"" }.joined(separator: ",")
                        try seed.notification(target: #"{"include_subscription_ids": [\#(slice)]}"#)
                    }
                }
                let first = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, workerID: "A", extra: ["PUSHIZO_CLAIM_BATCH": "25", "PUSHIZO_CONCURRENCY": "50"]),
                    logger: quietLogger)
                let second = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, workerID: "B", extra: ["PUSHIZO_CLAIM_BATCH": "25", "PUSHIZO_CONCURRENCY": "50"]),
                    logger: quietLogger)
                async let a: Void = runUntilDrained(first)
                async let b: Void = runUntilDrained(second)
                _ = try await (a, b)

                let accepted = emulator.apns.acceptedNotifications
                #expect(accepted.count == total)
                #expect(Set(accepted.map(\.apnsID)).count == total)
                let sentCount = try await onThread {
                    try PostgresConnection(connectionString: url).query(
                        "SELECT count(*) AS n, count(DISTINCT subscription_id) AS d FROM delivery_events WHERE event = 'sent'")[0]
                }
                #expect(sentCount["n"] == "\(total)")
                #expect(sentCount["d"] == "\(total)")
                let byWorker = try await onThread {
                    try PostgresConnection(connectionString: url).query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event <> 'sent'")[0]
                }
                #expect(byWorker["n"] == "0")
            }
        }
    }

    @Test func badRowsFailAloneAndTheWorkerGoesOn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let good = try seed.subscription(token: Seed.token(prefix: "a0a0"))
                    let android = try seed.subscription(platform: "android", token: "fcm-token")
                    let weird = try seed.subscription(platform: "smartfridge", token: "x")
                    let target = #"{"include_subscription_ids": ["\#(good)", "\#(android)", "\#(weird)"]}"#
                    let bad = try seed.notification(message: #"{"contents": {"en": "x"}, "ios_interruption_level": "loud"}"#, target: target)
                    let fine = try seed.notification(message: #"{"contents": {"en": "fine"}}"#, target: target)
                    let badTarget = try seed.notification(target: #"{"filters": [{"field": "tag", "key": "a"}]}"#)
                    return (good, android, weird, bad, fine, badTarget)
                }
                let (good, android, weird, bad, fine, badTarget) = ids
                try await runUntilDrained(
                    try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger))
                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    func outcome(_ notification: UUID, _ subscription: UUID) throws -> String {
                        try connection.query(
                            """
                            SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events
                            WHERE notification_id = $1 AND subscription_id = $2 ORDER BY id DESC LIMIT 1
                            """, [notification, subscription]
                        ).first?["e"] ?? "none"
                    }
                    #expect(try outcome(bad, good) == "failed/invalid_message")
                    #expect(try outcome(fine, good) == "sent")
                    #expect(try outcome(fine, android) == "skipped/no_channel")
                    #expect(try outcome(fine, weird) == "failed/unknown_platform")
                    let detail = try connection.query(
                        "SELECT detail->>'field' AS field FROM delivery_events WHERE notification_id = $1 AND subscription_id = $2",
                        [bad, good])[0]
                    #expect(detail["field"] == "ios_interruption_level")
                    let failed = try connection.query("SELECT status, status_reason FROM notifications WHERE id = $1", [badTarget])[0]
                    #expect(failed["status"] == "failed")
                    #expect(failed["status_reason"] == "invalid_target: filters[0].relation must be a string")
                }
            }
        }
    }
}
