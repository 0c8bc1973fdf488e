import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

extension Seed {
    /// The app's `huawei` channel, sending to `endpoint` (the emulator) when given.
    func huaweiChannel(settings: String, endpoint: String?) throws {
        _ = try connection.query(
            "INSERT INTO app_channels (app_id, provider, settings, endpoint) VALUES ($1, 'huawei', $2::jsonb, $3)",
            [appID, settings, endpoint])
    }
}

/// Rows in, events out, through the real `pushizo-worker run`: PostgreSQL -> worker -> Huawei's OAuth 2.0 client
/// credentials grant + Push Kit's v1 `messages:send` over HTTP/2 TLS -> the Huawei emulator, which checks the
/// client secret and every access token it is sent.
@Suite("End to end through the Huawei Push Kit emulator", .serialized)
struct HuaweiEndToEndTests {
    static let message = #"""
        {"headings": {"en": "Hello", "tr": "Merhaba {{ first_name | default: \"dostum\" }}"},
         "contents": {"en": "Your order shipped", "tr": "Siparişin yola çıktı"},
         "url": "https://shop.example/orders/42", "data": {"order": 42}}
        """#

    /// Fast retries, few attempts: a retry's wait is the emulator's `retry-after` (1 s) or at most 1 s.
    static let fastRetries = ["PUSHIZO_RETRY_BASE": "0.05", "PUSHIZO_RETRY_MAX": "1", "PUSHIZO_MAX_ATTEMPTS": "3"]

    /// `event/reason` of each of `subscription`'s events, oldest first.
    static func events(_ database: PostgresClient, _ subscription: UUID) async throws -> [String] {
        try await database.query(
            "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1 ORDER BY id",
            [subscription]
        ).map { $0["e"] ?? "" }
    }

    /// Waits (hang guard 60 s) until each of `subscriptions` has a final event (`sent` or `failed`).
    static func waitForFinalEvents(_ database: PostgresClient, _ subscriptions: [UUID]) async throws {
        try await waitUntil("\(subscriptions.count) final events") {
            let rows = try await database.query(
                "SELECT count(DISTINCT subscription_id) AS n FROM delivery_events WHERE event IN ('sent', 'failed') AND subscription_id = ANY($1::uuid[])",
                ["{\(subscriptions.map(\.uuidString).joined(separator: ","))}"])
            return try rows[0].decode(Int.self, "n") == subscriptions.count
        }
    }

    @Test func aPushIsDeliveredAsPreviewShowsItAndARefusedTokenInvalidatesItsSubscription() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let tokens = ["okay": "IQAAAACy0kYk-okay", "busy": "hms-busy-1", "invalid": "hms-invalid-1"]
                let seeded = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.huaweiChannel(settings: emulator.huaweiChannelSettings(), endpoint: emulator.endpoint)
                    let ayse = try seed.user("ayse")
                    _ = try seed.connection.query(#"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [ayse])
                    var subscriptions: [String: UUID] = [:]
                    for (name, token) in tokens {
                        subscriptions[name] = try seed.subscription(
                            user: name == "invalid" ? nil : ayse, platform: "huawei", token: token,
                            language: name == "okay" ? "tr-TR" : "en")
                    }
                    let notification = try seed.notification(message: Self.message, target: #"{"include_external_ids": ["ayse"]}"#)
                    let signingKey = try seed.connection.query(
                        "SELECT encode(signing_key, 'base64') AS k FROM apps WHERE id = $1", [seed.appID])[0]["k"] ?? ""
                    return (seed.appID, subscriptions, notification, signingKey)
                }
                let (app, subscriptions, notification, signingKey) = seeded
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await emulator.withWorkerBinary(databaseURL: url, extra: Self.fastRetries) {
                    try await Self.waitForFinalEvents(database, [subscriptions["okay"]!, subscriptions["busy"]!])
                    // Push Kit gives 80300007 for a malformed token and for another app's alike: it invalidates the
                    // subscription only once this channel's sends were accepted, as they were just now.
                    try await onThread {
                        let seed = try Seed(url, appID: app)
                        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscriptions["invalid"]!)"]}"#)
                    }
                    try await Self.waitForFinalEvents(database, [subscriptions["invalid"]!])
                }
                #expect(try await Self.events(database, subscriptions["okay"]!) == ["sent"])
                #expect(try await Self.events(database, subscriptions["busy"]!) == ["retrying/http_503", "sent"])
                #expect(try await Self.events(database, subscriptions["invalid"]!) == ["failed/invalid_token"])
                let statuses = try await database.query("SELECT id, status FROM subscriptions")
                for row in statuses {
                    let id = try row.decode(UUID.self, "id")
                    #expect(row["status"] == (id == subscriptions["invalid"]! ? "invalid" : "active"))
                }
                // `sent` carries the requestId Push Kit answered with.
                let sent = try await database.query(
                    "SELECT detail::text AS d FROM delivery_events WHERE subscription_id = $1 AND event = 'sent'",
                    [subscriptions["okay"]!])
                let accepted = emulator.huawei.acceptedMessages
                let turkish = try #require(accepted.first { $0.token == tokens["okay"] })
                #expect(sent.first?["d"]?.contains(turkish.requestID) == true)
                #expect(turkish.appID == EmulatorHarness.huaweiAppID)
                await database.shutdown()

                // The Turkish subscriber's device got exactly the message `preview` shows for her.
                let preview = try Preview.run([
                    "at": "2026-12-07T21:30:00Z",
                    "app": [
                        "default_language": "en", "signing_key": .string(signingKey),
                        "channels": ["huawei": ["app_id": .string(EmulatorHarness.huaweiAppID)]],
                    ],
                    "user": ["tags": ["first_name": "Ayşe"]],
                    "subscription": [
                        "id": .string(subscriptions["okay"]!.uuidString), "platform": "huawei", "language": "tr-TR",
                        "token": .string(tokens["okay"]!),
                    ],
                    "notification": ["id": .string(notification.uuidString), "message": try JSONValue(parsing: Self.message)],
                ])
                #expect(preview["decision"]?["action"] == "send" && preview["decision"]?["provider"] == "huawei")
                let request = try #require(preview["request"])
                #expect(request["path"]?.stringValue == "/v1/\(EmulatorHarness.huaweiAppID)/messages:send")
                #expect(request["origin"]?.stringValue == "https://push-api.cloud.huawei.com")
                let body = try JSONValue(parsing: try #require(request["body_text"]?.stringValue))
                #expect(body["message"]?["data"]?.stringValue == turkish.data)
                #expect(body["message"]?["android"]?.jsonText == turkish.androidJSON)
                #expect(turkish.androidJSON.contains(#""title":"Merhaba Ayşe""#))
                #expect(turkish.data.contains(#""on.d.order":"42""#))

                // One access token for every send, the secret never in the preview.
                #expect(emulator.huawei.tokensIssued(to: EmulatorHarness.huaweiAppID) == 1)
                #expect(!preview.jsonText.contains(EmulatorHarness.huaweiClientSecret))
                let authorization = request["headers"]?.arrayValue?.first { $0["name"] == "authorization" }
                #expect(authorization?["value"]?.stringValue == "Bearer \(Preview.providerTokenPlaceholder)")
            }
        }
    }

    @Test func badCredentialsPauseTheChannelAndTransientAnswersAreRetried() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let seeded = try await onThread {
                    var pushes: [String: (subscription: UUID, app: UUID)] = [:]
                    func app(_ name: String, settings: String, token: String) throws {
                        let seed = try Seed(url)
                        try seed.app()
                        try seed.huaweiChannel(settings: settings, endpoint: emulator.endpoint)
                        let subscription = try seed.subscription(platform: "huawei", token: token)
                        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                        pushes[name] = (subscription, seed.appID)
                    }
                    // A secret the token endpoint refuses (400, error 1101, sub_error 12304).
                    try app("refused", settings: emulator.huaweiChannelSettings(secret: "not-the-secret"), token: "IQAAAACy-refused")
                    // Settings without a client secret: refused when the channel is parsed.
                    try app("broken", settings: #"{"app_id": "\#(EmulatorHarness.huaweiAppID)"}"#, token: "IQAAAACy-broken")
                    // Push Kit answers 500 every time: retried until the attempts run out.
                    try app("internal", settings: emulator.huaweiChannelSettings(), token: "hms-internal-1")
                    // The fleet keeps sending for everyone else.
                    try app("okay", settings: emulator.huaweiChannelSettings(), token: "IQAAAACy-okay")
                    return pushes
                }
                // `check` reads the same settings as the sender: the good channels name their app and client, the
                // one without a secret is reported (the secret never printed).
                let (checkStatus, checkOutput) = try await EgressEndToEndTests.runCheck(
                    databaseURL: url, extra: ["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true"])
                #expect(checkStatus == 1, "\(checkOutput)")
                #expect(checkOutput.contains("huawei endpoint=\(emulator.endpoint): ok (app \(EmulatorHarness.huaweiAppID), client \(EmulatorHarness.huaweiAppID))"), "\(checkOutput)")
                #expect(checkOutput.contains("INVALID SETTINGS: app channel settings `client_secret`: is missing"), "\(checkOutput)")
                #expect(!checkOutput.contains(EmulatorHarness.huaweiClientSecret) && !checkOutput.contains("not-the-secret"))

                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await emulator.withWorkerBinary(databaseURL: url, extra: Self.fastRetries) {
                    try await waitUntil("the channels are paused and the other pushes ended") {
                        let paused = try await database.query(
                            "SELECT count(*) AS n FROM app_channels WHERE paused_until > now()")
                        guard try paused[0].decode(Int.self, "n") == 2 else { return false }
                        let finals = try await database.query(
                            "SELECT count(*) AS n FROM delivery_events WHERE event IN ('sent', 'failed')")
                        return try finals[0].decode(Int.self, "n") == 2
                    }
                }
                for (name, reason) in [("refused", "access_token_failed"), ("broken", "invalid_channel_settings")] {
                    let push = seeded[name]!
                    let events = try await Self.events(database, push.subscription)
                    #expect(events.first == "retrying/\(reason)", "\(name): \(events)")
                    let channel = try await database.query(
                        "SELECT paused_until > now() AS paused, paused_reason FROM app_channels WHERE app_id = $1", [push.app])
                    #expect(channel[0]["paused"] == "t")
                    #expect(channel[0]["paused_reason"]?.contains(reason) == true, "\(name): \(channel[0]["paused_reason"] ?? "")")
                    // The subscription is not at fault, and no delivery was lost: it waits for the channel.
                    let rows = try await database.query(
                        """
                        SELECT s.status, (SELECT count(*) FROM deliveries d WHERE d.subscription_id = s.id) AS queued
                        FROM subscriptions s WHERE s.id = $1
                        """, [push.subscription])
                    #expect(rows[0]["status"] == "active" && rows[0]["queued"] == "1", "\(name)")
                }
                let detail = try await database.query(
                    "SELECT detail::text AS d FROM delivery_events WHERE subscription_id = $1 ORDER BY id LIMIT 1",
                    [seeded["refused"]!.subscription])
                #expect(detail[0]["d"]?.contains("12304") == true, "\(detail[0]["d"] ?? "")")
                #expect(detail[0]["d"]?.contains("not-the-secret") == false)
                let serverErrors = try await Self.events(database, seeded["internal"]!.subscription)
                #expect(serverErrors.first == "retrying/http_500")
                #expect(serverErrors.last == "failed/max_attempts", "\(serverErrors)")
                #expect(try await Self.events(database, seeded["okay"]!.subscription) == ["sent"])
                await database.shutdown()
            }
        }
    }
}
