import DeliveryCore
import Emulator
import Foundation
import Postgres
import PushCrypto
import Testing
@testable import Worker

extension Seed {
    /// The app's `fcm` channel, sending to `endpoint` (the emulator) when given.
    func fcmChannel(settings: String, endpoint: String?) throws {
        _ = try connection.query(
            "INSERT INTO app_channels (app_id, provider, settings, endpoint) VALUES ($1, 'fcm', $2::jsonb, $3)",
            [appID, settings, endpoint])
    }
}

/// Rows in, events out: PostgreSQL -> worker -> OAuth2 JWT-bearer grant + FCM HTTP v1 over HTTP/2 TLS ->
/// the FCM emulator, which verifies the assertion and checks every bearer token it is sent.
@Suite("End to end through the FCM emulator", .serialized)
struct FCMEndToEndTests {
    static let message = #"""
        {"headings": {"en": "Hello", "tr": "Merhaba {{ first_name | default: \"dostum\" }}"},
         "contents": {"en": "Your order shipped", "tr": "Siparişin yola çıktı"},
         "url": "https://shop.example/orders/42", "collapse_id": "order 42", "data": {"order": 42}}
        """#

    static func events(_ connection: PostgresConnection, _ subscription: UUID) throws -> [String] {
        try connection.query(
            "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
            [subscription]
        ).map { $0["e"] ?? "" }
    }

    @Test func deliversInvalidatesAndRetries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let tokens = [
                    "okay": "fcm-okay-1", "unregistered": "fcm-unregistered-1", "mismatch": "fcm-sender-mismatch-1",
                    "invalid": "fcm-invalid-1", "quota": "fcm-quota-1", "unavailable": "fcm-unavailable-1",
                ]
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    let ayse = try seed.user("ayse")
                    _ = try seed.connection.query(
                        #"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [ayse])
                    var subscriptions: [String: UUID] = [:]
                    for (name, token) in tokens {
                        subscriptions[name] = try seed.subscription(
                            user: ayse, platform: "android", token: token, language: name == "okay" ? "tr-TR" : "en")
                    }
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
                    func events(_ name: String) throws -> [String] { try Self.events(connection, subscriptions[name]!) }
                    #expect(try events("okay") == ["sent"])
                    #expect(try events("unregistered") == ["failed/unregistered"])
                    #expect(try events("mismatch") == ["failed/sender_id_mismatch"])
                    #expect(try events("invalid") == ["failed/invalid_registration_token"])
                    #expect(try events("quota") == ["retrying/quota_exceeded", "sent"])
                    #expect(try events("unavailable") == ["retrying/unavailable", "sent"])
                    #expect(try connection.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")

                    let gone: Set<UUID> = [subscriptions["unregistered"]!, subscriptions["invalid"]!]
                    for row in try connection.query("SELECT id, status FROM subscriptions") {
                        let id = try row.decode(UUID.self, "id")
                        // SENDER_ID_MISMATCH invalidates only once a send of this batch proved the account
                        // (ChannelFaultEvidenceTests); the order of concurrent sends is not fixed here.
                        if id == subscriptions["mismatch"]! { continue }
                        #expect(row["status"] == (gone.contains(id) ? "invalid" : "active"))
                    }
                    // The quota retry waited for the emulator's `retry-after` (1 s), not the 0.05 s test backoff.
                    let retry = try connection.query(
                        "SELECT max(at) - min(at) >= interval '0.5 second' AS honoured FROM delivery_events WHERE subscription_id = $1",
                        [subscriptions["quota"]!])
                    #expect(retry.first?["honoured"] == "t")
                    // `sent` carries the message name FCM answered with.
                    let sent = try connection.query(
                        "SELECT detail::text AS d FROM delivery_events WHERE subscription_id = $1 AND event = 'sent'",
                        [subscriptions["okay"]!])
                    let names = Set(emulator.fcm.acceptedMessages.map(\.name))
                    #expect(names.contains { sent.first?["d"]?.contains($0) == true })
                }

                // The Turkish subscriber's device got exactly the data message `preview` shows for her.
                let accepted = emulator.fcm.acceptedMessages
                #expect(accepted.count == 3)
                let turkish = try #require(accepted.first { $0.token == tokens["okay"] })
                #expect(turkish.projectID == EmulatorHarness.fcmProjectID)
                let preview = try Preview.run([
                    "at": "2026-11-29T21:30:00Z",
                    "app": [
                        "default_language": "en", "signing_key": .string(signingKey),
                        "channels": ["fcm": ["project_id": .string(EmulatorHarness.fcmProjectID)]],
                    ],
                    "user": ["tags": ["first_name": "Ayşe"]],
                    "subscription": [
                        "id": .string(subscriptions["okay"]!.uuidString), "platform": "android", "language": "tr-TR",
                        "token": .string(tokens["okay"]!),
                    ],
                    "notification": ["id": .string(notification.uuidString), "message": try JSONValue(parsing: Self.message)],
                ])
                let previewBody = try #require(preview["request"]?["body_text"]?.stringValue)
                let previewData = try #require(try JSONValue(parsing: previewBody)["message"]?["data"]?.objectValue)
                #expect(previewData.mapValues { $0.stringValue ?? "" } == turkish.data)
                #expect(turkish.data["on.title"] == "Merhaba Ayşe")
                #expect(turkish.data["on.body"] == "Siparişin yola çıktı")
                #expect(turkish.androidJSON.contains(#""collapse_key":"order 42""#))

                // One access token for every send: the cache shared it across the concurrent deliveries.
                #expect(emulator.fcm.tokensIssued == 1)
                #expect(emulator.fcm.errorCounts["UNAUTHENTICATED"] == nil)
            }
        }
    }

    @Test func manyConcurrentSendsFetchOneAccessToken() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0.05) { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    let user = try seed.user("many")
                    for index in 0..<40 {
                        try seed.subscription(user: user, platform: "android", token: "fcm-many-\(index)")
                    }
                    try seed.notification(target: #"{"include_external_ids": ["many"]}"#)
                }
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                #expect(emulator.fcm.acceptedCount == 40)
                #expect(emulator.fcm.tokensIssued == 1)
            }
        }
    }

    /// One worker sends a push to a fresh app of the emulator's account, `between` runs, then it sends a
    /// second push (another app with the same service account, so the same token cache).
    static func twoRounds(
        _ emulator: EmulatorHarness, _ url: String, between: @Sendable () async throws -> Void
    ) async throws -> [String] {
        @Sendable func seedOne(_ token: String) throws {
            let seed = try Seed(url)
            try seed.app()
            try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
            let subscription = try seed.subscription(platform: "android", token: token)
            try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
        }
        try await onThread { try seedOne("fcm-first") }
        let runtime = try WorkerRuntime(
            configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
            logger: quietLogger)
        let database = PostgresClient(connectionString: url, maximumConnections: 1)
        let run = Task { await runtime.run() }
        func waitForOutcomes(_ count: String) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                let rows = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event <> 'retrying'")
                if rows[0]["n"] == count { return }
                try await Task.sleep(for: .milliseconds(50))
            }
            Issue.record("timed out waiting for \(count) final events")
        }
        try await waitForOutcomes("1")
        #expect(emulator.fcm.tokensIssued == 1)
        try await between()
        try await onThread { try seedOne("fcm-second") }
        try await waitForOutcomes("2")
        runtime.requestStop()
        await run.value
        let events = try await database.query("SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events ORDER BY id")
        await database.shutdown()
        return events.map { $0["e"] ?? "" }
    }

    @Test func aRevokedTokenIsRefreshedOnceAndTheSendRetriedOnce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let events = try await Self.twoRounds(emulator, url) { emulator.fcm.revokeAllTokens() }
                // The 401 cost one refresh and one retry, and no event: the retry went through.
                #expect(events == ["sent", "sent"])
                #expect(emulator.fcm.errorCounts["UNAUTHENTICATED"] == 1)
                #expect(emulator.fcm.tokensIssued == 2)
            }
        }
    }

    @Test func anExpiredTokenIsReplacedBeforeItIsSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            // One-second tokens: after 1.5 s the cached one has expired; the cache must notice by itself
            // (no 401 from the emulator) and fetch a new one.
            try await EmulatorHarness.with(fcmTokenLifetime: 1) { emulator in
                let events = try await Self.twoRounds(emulator, url) { try await Task.sleep(for: .milliseconds(1500)) }
                #expect(events == ["sent", "sent"])
                #expect(emulator.fcm.errorCounts["UNAUTHENTICATED"] == nil)
                #expect(emulator.fcm.tokensIssued == 2)
            }
        }
    }

    @Test func channelErrorsPauseTheChannelNotTheSubscription() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    var result: [(subscription: UUID, app: UUID)] = []
                    // A key the token endpoint does not trust: access_token_failed.
                    let stranger = try Seed(url)
                    try stranger.app()
                    let other = try RSAPrivateKey.generate()
                    let settings = emulator.fcmChannelSettings.replacingOccurrences(
                        of: Self.jsonEscaped(emulator.fcmKey.pkcs8PEM), with: Self.jsonEscaped(other.pkcs8PEM))
                    try stranger.fcmChannel(settings: settings, endpoint: emulator.endpoint)
                    let b = try stranger.subscription(platform: "android", token: "fcm-okay-stranger")
                    try stranger.notification(target: #"{"include_subscription_ids": ["\#(b)"]}"#)
                    result.append((b, stranger.appID))
                    // Settings that are no service account (fields at the top level, private_key missing).
                    let broken = try Seed(url)
                    try broken.app()
                    try broken.fcmChannel(
                        settings: #"{"project_id": "p", "client_email": "a@b.example", "token_uri": "https://localhost/token"}"#,
                        endpoint: emulator.endpoint)
                    let c = try broken.subscription(platform: "android", token: "fcm-okay-broken")
                    try broken.notification(target: #"{"include_subscription_ids": ["\#(c)"]}"#)
                    result.append((c, broken.appID))
                    return result
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                try await runUntil(runtime, "two deliveries have an outcome") {
                    let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "2"
                }
                let expected = ["access_token_failed", "invalid_channel_settings"]
                for (index, pair) in ids.enumerated() {
                    let events = try await database.query(
                        "SELECT event, reason, detail::text AS d FROM delivery_events WHERE subscription_id = $1", [pair.subscription])
                    #expect(events.map { "\($0["event"] ?? "")/\($0["reason"] ?? "")" } == ["retrying/\(expected[index])"])
                    #expect(events.allSatisfy { $0["d"]?.contains("PRIVATE KEY") == false })
                    let channel = try await database.query(
                        "SELECT paused_until IS NOT NULL AS paused FROM app_channels WHERE app_id = $1", [pair.app])
                    #expect(channel.first?["paused"] == "t")
                    let subscription = try await database.query("SELECT status FROM subscriptions WHERE id = $1", [pair.subscription])
                    #expect(subscription.first?["status"] == "active")
                }
                #expect(emulator.fcm.acceptedCount == 0)
                await database.shutdown()
            }
        }
    }

    /// A tenant's iOS app registered through Firebase whose APNs credential in Firebase is wrong: FCM answers
    /// its token 401 `THIRD_PARTY_AUTH_ERROR`. Through the worker binary, that subscription alone is held (a
    /// second push to it waits without a request, the subscription kept, its attempts not spent), and the
    /// Android pushes of the same channel sent after the refusal go out at once: the channel is never paused.
    @Test func thirdPartyAuthErrorHoldsOnlyThePushesItsCredentialCarries() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (app, ios, androids, started) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    // An iOS device registered through Firebase has an FCM registration token like an Android
                    // one; its row is `android` / `device`, as is every row an `fcm` channel serves.
                    let ios = try seed.subscription(platform: "android", token: "fcm-third-party-auth-ios")
                    let androids = try (1...5).map { try seed.subscription(platform: "android", token: "fcm-okay-android-\($0)") }
                    try seed.notification(target: #"{"include_subscription_ids": ["\#(ios)"]}"#)
                    let started = try seed.connection.query("SELECT now() AS t")[0].decode(Date.self, "t")
                    return (seed.appID, ios, androids, started)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                func events(_ subscription: UUID) async throws -> [String] {
                    try await database.query(
                        "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
                        [subscription]
                    ).map { $0["e"] ?? "" }
                }
                try await emulator.withWorkerBinary(databaseURL: url) {
                    try await waitUntil("FCM refused the iOS token") { try await events(ios).count == 1 }
                    // After the refusal, a push to all six: the five Android ones are sent, the iOS one is held.
                    let everyone = ([ios] + androids).map { "\"\($0)\"" }.joined(separator: ", ")
                    _ = try await database.query(
                        #"INSERT INTO notifications (app_id, message, target) VALUES ($1, '{"contents": {"en": "hi"}}', $2::jsonb)"#,
                        [app, #"{"include_subscription_ids": [\#(everyone)]}"#])
                    try await waitUntil("the Android pushes are sent and the iOS one is held") {
                        let sent = try await database.query(
                            "SELECT count(*) AS n FROM delivery_events WHERE subscription_id = ANY($1::uuid[]) AND event = 'sent'", [androids])
                        let held = try await events(ios).count
                        return sent[0]["n"] == "5" && held == 2
                    }
                }

                for android in androids { #expect(try await events(android) == ["sent"]) }
                #expect(try await events(ios) == ["retrying/third_party_auth_error", "retrying/third_party_auth_error"])
                let details = try await database.query(
                    "SELECT detail->>'fcm_error' AS code, detail ? 'held_until' AS held FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
                    [ios])
                #expect(details.map { $0["code"] ?? "-" } == ["THIRD_PARTY_AUTH_ERROR", "-"], "the second push was never sent")
                #expect(details.allSatisfy { $0["held"] == "t" })
                #expect(emulator.fcm.errorCounts["THIRD_PARTY_AUTH_ERROR"] == 1)
                #expect(emulator.fcm.acceptedCount == 5)

                // Nothing of the channel paused, the subscription kept, and both iOS pushes waiting for the hold
                // (5 minutes from a refusal that came after `started`) without spending an attempt.
                let channel = try await database.query("SELECT paused_until IS NULL AS running FROM app_channels WHERE app_id = $1", [app])
                #expect(channel.first?["running"] == "t")
                let subscription = try await database.query("SELECT status FROM subscriptions WHERE id = $1", [ios])
                #expect(subscription.first?["status"] == "active")
                let waiting = try await database.query(
                    """
                    SELECT run_at >= $2::timestamptz + interval '300 seconds' AS held, attempt, uncounted_retries
                    FROM deliveries WHERE subscription_id = $1
                    """, [ios, started])
                #expect(waiting.count == 2)
                for row in waiting {
                    #expect(row["held"] == "t")
                    #expect(row["attempt"] == "0")
                    #expect(row["uncounted_retries"] == "1")
                }
                await database.shutdown()
            }
        }
    }

    static func jsonEscaped(_ text: String) -> String {
        let data = try! JSONSerialization.data(withJSONObject: [text], options: [.withoutEscapingSlashes])
        return String(String(decoding: data, as: UTF8.self).dropFirst(2).dropLast(2))
    }
}
