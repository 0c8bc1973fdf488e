import DeliveryCore
import Emulator
import Foundation
import Postgres
import PushCrypto
import Testing
@testable import Worker

extension Seed {
    /// The app's `webpush` channel.
    func webPushChannel(settings: String) throws {
        _ = try connection.query(
            "INSERT INTO app_channels (app_id, provider, settings) VALUES ($1, 'webpush', $2::jsonb)", [appID, settings])
    }

    /// A `web` subscription for an emulated browser subscription (`keys: false` leaves the keys NULL).
    @discardableResult
    func webSubscription(
        _ subscription: WebPushEmulatorSubscription, origin: String, user: UUID? = nil, language: String? = "en",
        keys: Bool = true
    ) throws -> UUID {
        try connection.query(
            """
            INSERT INTO subscriptions (app_id, user_id, platform, token, web_p256dh, web_auth, language)
            VALUES ($1, $2, 'web', $3, $4, $5, $6) RETURNING id
            """,
            [appID, user, subscription.endpoint(origin: origin), keys ? subscription.p256dh : nil,
             keys ? subscription.auth : nil, language]
        )[0].decode(UUID.self, "id")
    }
}

/// Rows in, events out: PostgreSQL -> worker -> RFC 8291 + VAPID over HTTP/2 TLS -> the Web Push emulator,
/// which decrypts every body with the subscription's private key.
@Suite("End to end through the Web Push emulator", .serialized)
struct WebPushEndToEndTests {
    static let message = #"""
        {"headings": {"en": "Hello", "tr": "Merhaba {{ first_name | default: \"dostum\" }}"},
         "contents": {"en": "Your order shipped", "tr": "Siparişin yola çıktı"},
         "url": "https://shop.example/orders/42", "collapse_id": "order 42", "data": {"order": 42}}
        """#

    @Test func deliversInvalidatesAndRetries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    let ayse = try seed.user("ayse")
                    _ = try seed.connection.query(
                        #"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [ayse])
                    var subscriptions: [String: UUID] = [:]
                    for id in ["okay1", "e404a", "e410a", "e413a", "e429a", "e503a"] {
                        subscriptions[id] = try seed.webSubscription(
                            try emulator.webSubscription(id), origin: origin, user: ayse, language: id == "okay1" ? "tr-TR" : "en")
                    }
                    subscriptions["nokeys"] = try seed.webSubscription(
                        try emulator.webSubscription("nokeys"), origin: origin, user: ayse, keys: false)
                    let notification = try seed.notification(message: Self.message, target: #"{"include_external_ids": ["ayse"]}"#)
                    let signingKey = try seed.connection.query(
                        "SELECT encode(signing_key, 'base64') AS k FROM apps WHERE id = $1", [seed.appID])[0]["k"] ?? ""
                    return (subscriptions, notification, signingKey)
                }
                let (subscriptions, notification, signingKey) = ids
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)

                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    func events(_ id: String) throws -> [String] {
                        try connection.query(
                            "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
                            [subscriptions[id]!]
                        ).map { $0["e"] ?? "" }
                    }
                    #expect(try events("okay1") == ["sent"])
                    #expect(try events("e404a") == ["failed/unregistered"])
                    #expect(try events("e410a") == ["failed/unregistered"])
                    #expect(try events("e413a") == ["failed/payload_too_large"])
                    #expect(try events("e429a") == ["retrying/rate_limited", "sent"])
                    #expect(try events("e503a") == ["retrying/http_503", "sent"])
                    #expect(try events("nokeys") == ["failed/invalid_subscription_keys"])
                    #expect(try connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")

                    let statuses = try connection.query("SELECT id, status FROM subscriptions")
                    let gone: Set<UUID> = [subscriptions["e404a"]!, subscriptions["e410a"]!]
                    for row in statuses {
                        let id = try row.decode(UUID.self, "id")
                        #expect(row["status"] == (gone.contains(id) ? "invalid" : "active"))
                    }
                    // The 429's retry waited for the emulator's `retry-after` (1 s), not the 0.05 s test backoff.
                    let retry = try connection.query(
                        "SELECT max(at) - min(at) >= interval '0.5 second' AS honoured FROM delivery_events WHERE subscription_id = $1",
                        [subscriptions["e429a"]!])
                    #expect(retry.first?["honoured"] == "t")
                    // `sent` carries the Location the push service answered with.
                    let sent = try connection.query(
                        "SELECT detail::text AS d FROM delivery_events WHERE subscription_id = $1 AND event = 'sent'",
                        [subscriptions["okay1"]!])
                    let locations = Set(emulator.webPush.acceptedMessages.map(\.location))
                    #expect(locations.contains { sent.first?["d"]?.contains($0) == true })
                }

                // The Turkish subscriber's browser decrypted exactly what `preview` shows for her.
                let accepted = emulator.webPush.acceptedMessages
                #expect(accepted.count == 3)
                let turkish = try #require(accepted.first { $0.subscriptionID == "okay1" })
                #expect(turkish.subject == EmulatorHarness.vapidSubject)
                #expect(turkish.urgency == "normal")
                #expect(turkish.topic == WebPushRequestFactoryTopic.of("order 42"))
                let okay = try emulator.webSubscription("okay1")
                let preview = try Preview.run([
                    "at": "2026-11-29T21:30:00Z",
                    "app": ["default_language": "en", "signing_key": .string(signingKey), "channels": ["webpush": [:]]],
                    "user": ["tags": ["first_name": "Ayşe"]],
                    "subscription": [
                        "id": .string(subscriptions["okay1"]!.uuidString), "platform": "web", "language": "tr-TR",
                        "token": .string(okay.endpoint(origin: origin)),
                    ],
                    "notification": ["id": .string(notification.uuidString), "message": try JSONValue(parsing: Self.message)],
                ])
                let previewBody = try #require(preview["request"]?["body_text"]?.stringValue)
                #expect(String(decoding: turkish.plaintext, as: UTF8.self) == previewBody)
                let payload = try #require(try JSONSerialization.jsonObject(with: Data(turkish.plaintext)) as? [String: Any])
                #expect(payload["title"] as? String == "Merhaba Ayşe")
                #expect(payload["body"] as? String == "Siparişin yola çıktı")

                // One VAPID token served every request to the emulator's origin (RFC 8292 §2: reuse).
                let uses = emulator.webPush.vapidTokenUses
                #expect(uses.count == 1)
                #expect(uses.values.reduce(0, +) == emulator.webPush.statusCounts.values.reduce(0, +))
            }
        }
    }

    @Test func vapidRefusalsPauseTheChannelNotTheSubscription() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let ids = try await onThread {
                    var result: [(subscription: UUID, app: UUID)] = []
                    for id in ["e401a", "e403a", "e400a"] {
                        let seed = try Seed(url)
                        try seed.app()
                        try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                        let subscription = try seed.webSubscription(try emulator.webSubscription(id), origin: origin)
                        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                        result.append((subscription, seed.appID))
                    }
                    // A channel whose key is not a key: paused as invalid_channel_settings.
                    let broken = try Seed(url)
                    try broken.app()
                    try broken.webPushChannel(settings: #"{"vapid_private_key": "not a key", "subject": "mailto:a@b.example"}"#)
                    let subscription = try broken.webSubscription(try emulator.webSubscription("okay2"), origin: origin)
                    try broken.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    result.append((subscription, broken.appID))
                    return result
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                try await runUntil(runtime, "four deliveries have an outcome") {
                    let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "4"
                }
                let expected = ["vapid_unauthorized", "vapid_forbidden", "bad_request", "invalid_channel_settings"]
                for (index, pair) in ids.enumerated() {
                    let events = try await database.query(
                        "SELECT event, reason, detail::text AS d FROM delivery_events WHERE subscription_id = $1", [pair.subscription])
                    #expect(events.map { "\($0["event"] ?? "")/\($0["reason"] ?? "")" } == ["retrying/\(expected[index])"])
                    // The key never leaks into events.
                    #expect(events.allSatisfy { $0["d"]?.contains("PRIVATE KEY") == false })
                    let channel = try await database.query(
                        "SELECT paused_until IS NOT NULL AS paused FROM app_channels WHERE app_id = $1", [pair.app])
                    #expect(channel.first?["paused"] == "t")
                    let subscription = try await database.query("SELECT status FROM subscriptions WHERE id = $1", [pair.subscription])
                    #expect(subscription.first?["status"] == "active")
                }
                await database.shutdown()
            }
        }
    }

    @Test func anUnreachablePushServiceIsRetriedWithoutCountingAttempts() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let subscription = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    // A port nothing listens on: connection refused.
                    let subscription = try seed.webSubscription(try emulator.webSubscription("okay3"), origin: "https://127.0.0.1:9")
                    try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    return subscription
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_MAX_ATTEMPTS": "1"]),
                    logger: quietLogger)
                try await runUntil(runtime, "two retries were recorded") {
                    let rows = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'retrying'")
                    return rows[0]["n"] == "2"
                }
                let events = try await database.query(
                    "SELECT event, reason, detail->>'origin' AS origin FROM delivery_events WHERE subscription_id = $1", [subscription])
                // With one attempt allowed, a counted retry would have ended in failed/max_attempts.
                #expect(events.allSatisfy { $0["event"] == "retrying" && $0["reason"] == "provider_unreachable" })
                #expect(events.first?["origin"] == "https://127.0.0.1:9")
                #expect(emulator.webPush.statusCounts.isEmpty)
                await database.shutdown()
            }
        }
    }
}

/// The `topic` the factory derives from a `collapse_id` (RFC 8030 §5.4).
enum WebPushRequestFactoryTopic {
    static func of(_ collapseID: String) -> String? {
        String(Base64URL.encode(SHA256.hash(Array(collapseID.utf8))).prefix(32))
    }
}
