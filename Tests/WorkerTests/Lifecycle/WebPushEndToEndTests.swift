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

    /// Issue row 3: one subscription whose push service answers 400, 401 or 403 used to pause the app's
    /// whole channel (healthy subscriptions waited as `channel_paused`, the bad one paused it again every
    /// 5 minutes until its ttl). Now each bad delivery fails alone, once, and the rest are sent at once.
    @Test func oneRefusedSubscriptionFailsAloneAndTheRestAreSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    let user = try seed.user("u")
                    var subscriptions: [String: UUID] = [:]
                    for id in ["e403a", "e400a", "e401a", "okay1", "okay2", "okay3"] {
                        subscriptions[id] = try seed.webSubscription(try emulator.webSubscription(id), origin: origin, user: user)
                    }
                    try seed.notification(target: #"{"include_external_ids": ["u"]}"#)
                    // A channel whose key is not a key names its own settings: paused at once.
                    let broken = try Seed(url)
                    try broken.app()
                    try broken.webPushChannel(settings: #"{"vapid_private_key": "not a key", "subject": "mailto:a@b.example"}"#)
                    subscriptions["broken"] = try broken.webSubscription(try emulator.webSubscription("okay9"), origin: origin)
                    try broken.notification(target: #"{"include_subscription_ids": ["\#(subscriptions["broken"]!)"]}"#)
                    return (subscriptions, seed.appID, broken.appID)
                }
                let (subscriptions, app, brokenApp) = ids
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                try await runUntil(runtime, "seven deliveries have an outcome") {
                    let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "7"
                }
                let expected = [
                    "e403a": "failed/vapid_forbidden", "e400a": "failed/bad_request", "e401a": "failed/vapid_unauthorized",
                    "okay1": "sent", "okay2": "sent", "okay3": "sent", "broken": "retrying/invalid_channel_settings",
                ]
                for (name, event) in expected {
                    let events = try await database.query(
                        "SELECT event || coalesce('/' || reason, '') AS e, detail::text AS d FROM delivery_events WHERE subscription_id = $1",
                        [subscriptions[name]!])
                    #expect(events.map { $0["e"] ?? "" } == [event], "\(name)")
                    #expect(events.allSatisfy { $0["d"]?.contains("PRIVATE KEY") == false && $0["d"]?.contains("/wpush/") == false })
                }
                // Nothing of the healthy app waits: no queue rows, no pause, every subscription still active.
                let left = try await database.query("SELECT count(*) AS n FROM deliveries WHERE app_id = $1", [app])
                #expect(left.first?["n"] == "0")
                let channels = try await database.query(
                    "SELECT app_id, paused_until IS NOT NULL AS paused FROM app_channels WHERE provider = 'webpush'")
                for row in channels {
                    #expect(row["paused"] == (try row.decode(UUID.self, "app_id") == brokenApp ? "t" : "f"))
                }
                let statuses = try await database.query("SELECT DISTINCT status FROM subscriptions")
                #expect(statuses.map { $0["status"] ?? "" } == ["active"])
                #expect(emulator.webPush.acceptedMessages.count == 3)
                await database.shutdown()
            }
        }
    }

    /// The evidence that does pause a channel: distinct subscriptions at distinct push-service origins
    /// refused within the window, none accepted. After the pause a healthy subscription of the app waits as
    /// `channel_paused`, and the documented resume procedure sends it.
    @Test func refusalsAtSeveralOriginsPauseTheChannel() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                // Two origins of the one emulator (its certificate names both).
                let origins = [emulator.endpoint, "https://127.0.0.1:\(emulator.port)", emulator.endpoint]
                let (subscriptions, app) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    var subscriptions: [UUID] = []
                    for (index, id) in ["e403b", "e403c", "e401d"].enumerated() {
                        let subscription = try seed.webSubscription(try emulator.webSubscription(id), origin: origins[index])
                        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                        subscriptions.append(subscription)
                    }
                    return (subscriptions, seed.appID)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let configuration = try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"])
                try await runUntil(try WorkerRuntime(configuration: configuration, logger: quietLogger), "the channel is paused") {
                    let rows = try await database.query(
                        "SELECT count(*) AS n FROM app_channels WHERE app_id = $1 AND paused_until > now()", [app])
                    let events = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "1" && events[0]["n"] == "3"
                }
                let events = try await database.query(
                    "SELECT event, reason, detail->>'refused_origins' AS origins FROM delivery_events WHERE subscription_id = ANY($1::uuid[])",
                    [subscriptions])
                // Two refusals were one subscription's own; the third completed the evidence and paused.
                #expect(events.filter { $0["event"] == "failed" }.count == 2)
                let pausing = events.filter { $0["event"] == "retrying" }
                #expect(pausing.count == 1)
                #expect(pausing.first?["origins"] == "2")
                #expect(["vapid_forbidden", "vapid_unauthorized"].contains(pausing.first?["reason"] ?? ""))
                let channel = try await database.query("SELECT paused_reason FROM app_channels WHERE app_id = $1", [app])
                #expect(channel.first?["paused_reason"] == pausing.first?["reason"])

                // A healthy subscription of the paused app waits as channel_paused...
                let healthy = try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    let subscription = try connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth, language)
                        VALUES ($1, 'web', $2, $3, $4, 'en') RETURNING id
                        """,
                        [app, try emulator.webSubscription("okay5").endpoint(origin: emulator.endpoint),
                         try emulator.webSubscription("okay5").p256dh, try emulator.webSubscription("okay5").auth]
                    )[0].decode(UUID.self, "id")
                    _ = try connection.query(
                        "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{\"contents\": {\"en\": \"hi\"}}', $2::jsonb)",
                        [app, #"{"include_subscription_ids": ["\#(subscription)"]}"#])
                    return subscription
                }
                try await runUntil(try WorkerRuntime(configuration: configuration, logger: quietLogger), "the healthy delivery waits") {
                    let rows = try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE subscription_id = $1 AND reason = 'channel_paused'", [healthy])
                    return rows[0]["n"] == "1"
                }
                // ...and the documented resume (README) sends it at once.
                _ = try await database.query("UPDATE app_channels SET paused_until = NULL WHERE app_id = $1", [app])
                _ = try await database.query("UPDATE deliveries SET run_at = now() WHERE app_id = $1 AND leased_by IS NULL", [app])
                try await runUntil(try WorkerRuntime(configuration: configuration, logger: quietLogger), "the healthy delivery is sent") {
                    let rows = try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE subscription_id = $1 AND event = 'sent'", [healthy])
                    return rows[0]["n"] == "1"
                }
                await database.shutdown()
            }
        }
    }

    /// Issue rows 4, 5 and 6 through the worker: keys stored in standard base64 (`+`, `/`, `=`) are used,
    /// `collapse_id: "promo"` (1 mod 4, which Apple and the emulator refuse) goes out as a derived valid
    /// topic, and a silent push to a browser is skipped with a reason, the subscription kept.
    @Test func standardBase64KeysDerivedTopicAndSkippedSilentPush() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let (standard, urlSafe, signingKey) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    let user = try seed.user("u")
                    let browser = try emulator.webSubscription("okay1")
                    func standardBase64(_ text: String) -> String { Data(Base64URL.decode(text) ?? []).base64EncodedString() }
                    let p256dh = standardBase64(browser.p256dh)
                    let auth = standardBase64(browser.auth)
                    #expect(p256dh.hasSuffix("=") && auth.hasSuffix("="), "the row really is padded standard base64")
                    let standard = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, user_id, platform, token, web_p256dh, web_auth, language)
                        VALUES ($1, $2, 'web', $3, $4, $5, 'en') RETURNING id
                        """,
                        [seed.appID, user, browser.endpoint(origin: origin), p256dh, auth])[0].decode(UUID.self, "id")
                    let urlSafe = try seed.webSubscription(try emulator.webSubscription("okay2"), origin: origin, user: user)
                    try seed.notification(
                        message: #"{"contents": {"en": "Sale"}, "collapse_id": "promo", "priority": "high", "ttl": 600}"#,
                        target: #"{"include_external_ids": ["u"]}"#)
                    try seed.notification(
                        message: #"{"content_available": true, "data": {"sync": "inbox"}}"#,
                        target: #"{"include_subscription_ids": ["\#(urlSafe)"]}"#)
                    let signingKey = try seed.connection.query(
                        "SELECT encode(signing_key, 'base64') AS k FROM apps WHERE id = $1", [seed.appID])[0]["k"] ?? ""
                    return (standard, urlSafe, signingKey)
                }
                let runtime = try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    func events(_ id: UUID) throws -> [String] {
                        try connection.query(
                            "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1",
                            [id]
                        ).map { $0["e"] ?? "" }.sorted()
                    }
                    #expect(try events(standard) == ["sent"])
                    #expect(try events(urlSafe) == ["sent", "skipped/silent_push_unsupported"])
                    let statuses = try connection.query("SELECT DISTINCT status FROM subscriptions")
                    #expect(statuses.map { $0["status"] ?? "" } == ["active"])
                }
                let accepted = emulator.webPush.acceptedMessages
                #expect(Set(accepted.map(\.subscriptionID)) == ["okay1", "okay2"])
                for message in accepted {
                    // base64url(SHA-256("promo"))[..<32], from Python's hashlib.
                    #expect(message.topic == "vO8RtqPt7XudSoF_0G-I_DAotWDbWJPi")
                    #expect(message.urgency == "high")
                    #expect((590...600).contains(message.ttl), "600 s less the time spent queued")
                    let payload = try #require(try JSONSerialization.jsonObject(with: Data(message.plaintext)) as? [String: Any])
                    #expect(payload["body"] as? String == "Sale")
                }
                #expect(emulator.webPush.statusCounts == [201: 2], "the silent push never reached the push service")
                // `preview` says the same for the silent push.
                let preview = try Preview.run([
                    "at": "2026-11-29T21:30:00Z",
                    "app": ["default_language": "en", "signing_key": .string(signingKey), "channels": ["webpush": [:]]],
                    "subscription": [
                        "id": .string(urlSafe.uuidString), "platform": "web", "language": "en",
                        "token": .string(try emulator.webSubscription("okay2").endpoint(origin: origin)),
                    ],
                    "notification": ["id": .string(UUID().uuidString), "message": ["content_available": true, "data": ["sync": "inbox"]]],
                ])
                #expect(preview["decision"]?["action"]?.stringValue == "skip")
                #expect(preview["decision"]?["reason"]?.stringValue == "silent_push_unsupported")
            }
        }
    }

    /// Microsoft's push service throttles with 406 Not Acceptable and `Retry-After: 900`. Through the worker
    /// binary: the delivery is retried, not before 900 s after the answer (measured from before the worker
    /// started, so whatever the machine's load), its attempt counted, the subscription and channel untouched.
    @Test func aThrottling406IsRetriedNoEarlierThanRetryAfter() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let (app, throttled, okay, started) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    let throttled = try seed.webSubscription(try emulator.webSubscription("e406a"), origin: origin)
                    let okay = try seed.webSubscription(try emulator.webSubscription("okay1"), origin: origin)
                    try seed.notification(target: #"{"include_subscription_ids": ["\#(throttled)", "\#(okay)"]}"#)
                    let started = try seed.connection.query("SELECT now() AS t")[0].decode(Date.self, "t")
                    return (seed.appID, throttled, okay, started)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await emulator.withWorkerBinary(databaseURL: url) {
                    try await waitUntil("both deliveries have an outcome") {
                        let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                        return rows[0]["n"] == "2"
                    }
                }

                let events = try await database.query(
                    """
                    SELECT event || coalesce('/' || reason, '') AS e, detail->>'status' AS status,
                           -- The detail's instant is written in whole seconds.
                           (detail->>'next_attempt_at')::timestamptz >= date_trunc('second', $2::timestamptz) + interval '900 seconds' AS floor
                    FROM delivery_events WHERE subscription_id = $1
                    """, [throttled, started])
                #expect(events.map { $0["e"] ?? "" } == ["retrying/rate_limited"])
                #expect(events.first?["status"] == "406")
                #expect(events.first?["floor"] == "t")
                let queued = try await database.query(
                    "SELECT run_at >= $2::timestamptz + interval '900 seconds' AS floor, attempt FROM deliveries WHERE subscription_id = $1",
                    [throttled, started])
                #expect(queued.first?["floor"] == "t")
                #expect(queued.first?["attempt"] == "1", "a throttled try still counts")
                let sent = try await database.query("SELECT event FROM delivery_events WHERE subscription_id = $1", [okay])
                #expect(sent.map { $0["event"] ?? "" } == ["sent"])
                let statuses = try await database.query("SELECT DISTINCT status FROM subscriptions")
                #expect(statuses.map { $0["status"] ?? "" } == ["active"])
                let channel = try await database.query("SELECT paused_until IS NULL AS running FROM app_channels WHERE app_id = $1", [app])
                #expect(channel.first?["running"] == "t")
                #expect(emulator.webPush.statusCounts[406] == 1, "not retried before Retry-After")
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
