import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

@Suite("preview")
struct PreviewTests {
    static let base: JSONValue = [
        "at": "2026-11-29T21:30:00+03:00",
        "app": [
            "default_language": "en", "signing_key": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "channels": ["apns": ["topic": "com.example.app"]],
        ],
        "user": ["tags": ["first_name": "Ayşe"]],
        "subscription": [
            "id": "6f1c6e0e-5a0b-4d6e-9d5e-6b6a1c2d3e4f", "platform": "ios", "language": "tr",
            "token": "a0a0aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999",
        ],
        "notification": [
            "id": "0b7c1b2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
            "message": ["headings": ["tr": "Merhaba {{ first_name }}"], "contents": ["tr": "Selam"], "ttl": 600],
        ],
    ]

    func with(_ path: [String], _ value: JSONValue) -> JSONValue {
        func set(_ node: JSONValue, _ path: ArraySlice<String>) -> JSONValue {
            guard let key = path.first else { return value }
            var members = node.objectValue ?? [:]
            members[key] = set(members[key] ?? [:], path.dropFirst())
            return .object(members)
        }
        return set(Self.base, path[...])
    }

    func decision(_ input: JSONValue) throws -> JSONValue {
        try #require(try Preview.run(input)["decision"])
    }

    @Test func sendShowsTheRequestAndSignsTheMsgID() throws {
        let output = try Preview.run(Self.base)
        #expect(output["decision"]?["action"] == "send")
        let request = try #require(output["request"])
        #expect(request["path"] == "/3/device/a0a0aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999")
        #expect(request["origin"] == "https://api.push.apple.com")
        #expect(request["body"]?["aps"]?["alert"]?["title"] == "Merhaba Ayşe")
        let headers = request["headers"]?.arrayValue ?? []
        #expect(headers.contains(["name": "authorization", "value": "bearer <provider-token>"]))
        // 21:30 +03:00 plus ttl 600 s.
        #expect(headers.contains(["name": "apns-expiration", "value": "1795977600"]))  // 18:40:00Z
        let msgID = try #require(request["body"]?["on"]?["msgId"]?.stringValue)
        let key = Array(Data(base64Encoded: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")!)
        let ids = try #require(MessageIDCodecProxy.verify(msgID, key: key))
        #expect(ids.subscription == UUID(uuidString: "6f1c6e0e-5a0b-4d6e-9d5e-6b6a1c2d3e4f"))
    }

    @Test func decisionsForEveryStop() throws {
        #expect(try decision(with(["notification", "status"], "canceled")) == ["action": "skip", "reason": "canceled"])
        let expired = try decision(with(["notification", "created_at"], "2026-11-29T10:00:00Z"))
        #expect(expired["action"] == "skip")
        #expect(expired["reason"] == "expired")
        #expect(try decision(with(["subscription", "status"], "invalid"))["reason"] == "subscription_inactive")
        #expect(try decision(with(["subscription", "platform"], "fridge"))["reason"] == "unknown_platform")
        #expect(try decision(with(["app", "channels"], [:]))["reason"] == "no_channel")
        let paused = try decision(with(["app", "channels", "apns", "paused_until"], "2026-11-30T00:00:00Z"))
        #expect(paused["action"] == "defer")
        #expect(paused["reason"] == "channel_paused")
        #expect(paused["until"] == "2026-11-30T00:00:00Z")
        let invalid = try decision(with(["notification", "message", "ios_interruption_level"], "loud"))
        #expect(invalid["action"] == "fail")
        #expect(invalid["reason"] == "invalid_message")
        #expect(invalid["detail"]?["field"] == "ios_interruption_level")
        #expect(try decision(with(["subscription", "token"], "xyz"))["reason"] == "bad_device_token_format")
    }

    @Test(arguments: [
        (["at"], JSONValue.string("yesterday"), "at is not an RFC 3339"),
        (["subscription", "platform"], JSONValue.int(1), "subscription.platform is required"),
        (["notification", "message"], JSONValue.string("hi"), "notification.message must be a JSON object"),
        (["app", "signing_key"], JSONValue.string("%%%"), "app.signing_key must be base64"),
        (["subscription", "id"], JSONValue.string("nope"), "subscription.id is not a UUID"),
    ])
    func malformedInputNamesTheField(path: [String], value: JSONValue, expected: String) {
        #expect {
            try Preview.run(with(path, value))
        } throws: { error in
            (error as? PreviewError)?.message.contains(expected) == true
        }
    }

    /// The worker sends exactly what preview shows: same body bytes, same headers but the provider token.
    @Test func workerSendsWhatPreviewShows() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (subscription, notification) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let user = try seed.user("ayse")
                    _ = try seed.connection.query(#"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [user])
                    let subscription = try seed.subscription(user: user, token: Seed.token(prefix: "a0a0"), language: "tr-TR")
                    let notification = try seed.notification(
                        message: #"{"headings": {"tr": "Merhaba {{ first_name }}", "en": "Hi"}, "contents": {"tr": "Sipariş 🚚 yolda", "en": "x"}, "thread_id": "t", "data": {"n": 1}, "collapse_id": "c1"}"#,
                        target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    return (subscription, notification)
                }
                try await runUntilDrained(
                    try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger))
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let sent = try await database.query(
                    """
                    SELECT encode(a.signing_key, 'base64') AS key, s.token, n.message::text AS message,
                           n.created_at, e.detail->>'apns_id' AS apns_id
                    FROM delivery_events e JOIN apps a ON a.id = e.app_id
                    JOIN subscriptions s ON s.id = e.subscription_id JOIN notifications n ON n.id = e.notification_id
                    WHERE e.event = 'sent'
                    """)
                await database.shutdown()
                // A worker stopped by the drain guard before it sent fails this test, not the whole test process.
                let row = try #require(sent.first)
                let input: JSONValue = [
                    "app": [
                        "default_language": "en", "signing_key": .string((row["key"] ?? "").replacingOccurrences(of: "\n", with: "")),
                        "channels": ["apns": ["topic": "dev.pushizo.test", "endpoint": .string(emulator.endpoint)]],
                    ],
                    "user": ["tags": ["first_name": "Ayşe"]],
                    "subscription": [
                        "id": .string(subscription.uuidString), "platform": "ios", "token": .string(row["token"] ?? ""),
                        "language": "tr-TR", "apns_environment": "production",
                    ],
                    "notification": ["id": .string(notification.uuidString), "message": try JSONValue(parsing: row["message"] ?? "")],
                    "delivery": ["apns_id": .string(row["apns_id"] ?? "")],
                ]
                let preview = try #require(try Preview.run(input)["request"])
                let accepted = try #require(emulator.apns.acceptedNotifications.first)
                #expect(preview["body_text"]?.stringValue == String(decoding: accepted.payload, as: UTF8.self))
                #expect(preview["path"]?.stringValue == "/3/device/\(accepted.deviceToken)")
                let headers = Dictionary(
                    uniqueKeysWithValues: (preview["headers"]?.arrayValue ?? []).map { ($0["name"]?.stringValue ?? "", $0["value"]?.stringValue ?? "") })
                #expect(headers["apns-id"] == accepted.apnsID)
                #expect(headers["apns-topic"] == accepted.topic)
                #expect(headers["apns-push-type"] == accepted.pushType)
                #expect(headers["apns-priority"] == accepted.priority)
                #expect(headers["apns-collapse-id"] == accepted.collapseID)
            }
        }
    }
}

import PushCrypto

enum MessageIDCodecProxy {
    static func verify(_ msgID: String, key: [UInt8]) -> (notification: UUID, subscription: UUID)? {
        MessageIDCodec.verify(msgID, key: key).map { ($0.notificationID, $0.subscriptionID) }
    }
}

@Suite("preview: quiet hours and the other wire formats")
struct PreviewMorePlatformsTests {
    let input = PreviewTests()

    @Test func quietHoursDeferToTheWindowsEndInTheSubscribersZone() throws {
        // 02:30 in Istanbul, window 22:00-08:00: held until 08:00 local = 05:00Z (spread 0).
        var document = input.with(["app", "quiet_hours_start"], "22:00")
        document = PreviewTests.set(document, ["app", "quiet_hours_end"], "08:00")
        document = PreviewTests.set(document, ["subscription", "timezone"], "Europe/Istanbul")
        document = PreviewTests.set(document, ["at"], "2026-11-29T02:30:00+03:00")
        document = PreviewTests.set(document, ["quiet_hours_spread"], 0)
        document = PreviewTests.set(document, ["notification", "message", "ttl"], 86_400)
        let decision = try input.decision(document)
        #expect(decision["action"] == "defer")
        #expect(decision["reason"] == "quiet_hours")
        #expect(decision["until"] == "2026-11-29T05:00:00Z")
        // Exempt messages go now; a ttl that ends before 08:00 is skipped as expired.
        let exempt = PreviewTests.set(document, ["notification", "message", "quiet_hours_exempt"], true)
        #expect(try input.decision(exempt)["action"] == "send")
        let short = PreviewTests.set(document, ["notification", "message", "ttl"], 3600)
        #expect(try input.decision(short)["reason"] == "expired")
        // An unknown zone name falls back to the app's zone and says so.
        var unknown = PreviewTests.set(document, ["subscription", "timezone"], "Americas/Vancouver")
        unknown = PreviewTests.set(unknown, ["app", "default_timezone"], "Europe/Istanbul")
        let output = try Preview.run(unknown)
        #expect(output["decision"]?["until"] == "2026-11-29T05:00:00Z")
        #expect(output["notes"]?.arrayValue?.contains { $0.stringValue?.contains("Americas/Vancouver") == true } == true)
        // A delivery that can never be sent fails or skips now, not after the night.
        #expect(try input.decision(PreviewTests.set(document, ["subscription", "platform"], "blackberry"))["reason"] == "unknown_platform")
        #expect(try input.decision(PreviewTests.set(document, ["app", "channels"], [:]))["reason"] == "no_channel")
        // A malformed window names the column.
        #expect(throws: PreviewError.self) { try Preview.run(PreviewTests.set(document, ["app", "quiet_hours_end"], "8 am")) }
    }

    @Test func fcmIsDataOnlyWithStringValues() throws {
        var document = PreviewTests.set(PreviewTests.base, ["subscription", "platform"], "android")
        document = PreviewTests.set(document, ["subscription", "token"], "fcm-token-1")
        document = PreviewTests.set(document, ["app", "channels"], ["fcm": ["project_id": "demo"]])
        document = PreviewTests.set(document, ["notification", "message", "data"], ["count": 1, "ok": true, "nested": ["a": [1]]])
        let output = try Preview.run(document)
        #expect(output["decision"]?["action"] == "send")
        let request = try #require(output["request"])
        #expect(request["path"] == "/v1/projects/demo/messages:send")
        let data = try #require(request["body"]?["message"]?["data"]?.objectValue)
        #expect(data.values.allSatisfy { $0.stringValue != nil })
        #expect(data["on.title"] == "Merhaba Ayşe")
        #expect(request["body"]?["message"]?["notification"] == nil)
        #expect(data.values.contains("1") && data.values.contains("true") && data.values.contains(#"{"a":[1]}"#))
        // No apns-id on an FCM request, so no note about one.
        #expect(output["notes"]?.arrayValue?.contains { $0.stringValue?.contains("apns_id") == true } != true)
    }

    @Test func webPushShowsThePlaintextAndRFC8030Headers() throws {
        var document = PreviewTests.set(PreviewTests.base, ["subscription", "platform"], "web")
        document = PreviewTests.set(document, ["subscription", "token"], "https://push.example.net/wpush/v2/abc?x=1")
        document = PreviewTests.set(document, ["app", "channels"], ["webpush": [:]])
        document = PreviewTests.set(document, ["notification", "message", "collapse_id"], "order-42")
        let output = try Preview.run(document)
        let request = try #require(output["request"])
        #expect(request["origin"] == "https://push.example.net")
        #expect(request["path"] == "/wpush/v2/abc?x=1")
        let headers = Dictionary(
            uniqueKeysWithValues: (request["headers"]?.arrayValue ?? []).map { ($0["name"]?.stringValue ?? "", $0["value"]?.stringValue ?? "") })
        #expect(headers["ttl"] == "600")
        #expect(headers["topic"] == "order-42")
        #expect(request["body"]?["title"] == "Merhaba Ayşe")
    }

    /// An endpoint on Apple's push service gets the Declarative Web Push form by default, as the worker sends it;
    /// the channel's `declarative` setting changes that, and a message that cannot make the form is shown
    /// falling back, or failing where the channel demands the form.
    @Test func webPushShowsTheDeclarativeFormSafariGets() throws {
        var document = PreviewTests.set(PreviewTests.base, ["subscription", "platform"], "web")
        document = PreviewTests.set(document, ["subscription", "token"], "https://web.push.apple.com/QGuQyavXutnMH-xhUsQxt0vS2uGXSTrwF0Vw")
        document = PreviewTests.set(document, ["app", "channels"], ["webpush": [:]])
        document = PreviewTests.set(document, ["notification", "message", "url"], "https://shop.example/orders/1")
        let output = try Preview.run(document)
        let body = try #require(output["request"]?["body"])
        #expect(body["web_push"] == 8030)
        #expect(body["notification"]?["title"] == "Merhaba Ayşe")
        #expect(body["notification"]?["lang"] == "tr")
        #expect(body["notification"]?["navigate"] == "https://shop.example/orders/1")

        let never = try Preview.run(PreviewTests.set(document, ["app", "channels", "webpush", "declarative"], "never"))
        #expect(never["request"]?["body"]?["web_push"] == nil)
        #expect(never["request"]?["body"]?["title"] == "Merhaba Ayşe")

        let noURL = PreviewTests.set(
            document, ["notification", "message"], ["headings": ["tr": "Merhaba {{ first_name }}"], "contents": ["tr": "Selam"]])
        #expect(try Preview.run(noURL)["request"]?["body"]?["title"] == "Merhaba Ayşe", "falls back to the flat message")
        let demanded = try Preview.run(PreviewTests.set(noURL, ["app", "channels", "webpush", "declarative"], "always"))
        #expect(demanded["decision"]?["action"] == "fail")
        #expect(demanded["decision"]?["reason"] == "invalid_message")

        let badSetting = try Preview.run(PreviewTests.set(document, ["app", "channels", "webpush", "declarative"], "sometimes"))
        #expect(badSetting["decision"]?["reason"] == "invalid_channel_settings")
        // From the database, the channel's `declarative` is read and its key is not.
        let stored: JSONValue = ["vapid_private_key": "-----BEGIN PRIVATE KEY-----", "subject": "mailto:ops@example.com", "declarative": "never"]
        #expect(PreviewStore.publicSettings(stored, provider: "webpush") == ["declarative": "never"])
    }
}

extension PreviewTests {
    static func set(_ node: JSONValue, _ path: [String], _ value: JSONValue) -> JSONValue {
        guard let key = path.first else { return value }
        var members = node.objectValue ?? [:]
        members[key] = set(members[key] ?? [:], Array(path.dropFirst()), value)
        return .object(members)
    }
}

@Suite("preview measures messages as the worker does")
struct PreviewMessageSizeTests {
    @Test func separatorSpacesMatchPostgreSQLsTextForm() async throws {
        let message: JSONValue = [
            "headings": ["en": "Hi", "tr": "Merhaba, dünya: {{ name }}"], "contents": ["en": "a, b: c"],
            "data": ["list": [1, 2, ["x": true, "y": nil]], "empty": [:], "none": []], "ttl": 60,
        ]
        try await TestDatabase.withMigratedDatabase { url in
            let database = PostgresClient(connectionString: url, maximumConnections: 1)
            let rows = try await database.query("SELECT octet_length($1::jsonb::text) AS n", [message.jsonText])
            await database.shutdown()
            #expect(try rows[0].decode(Int.self, "n") == message.jsonText.utf8.count + PreviewInput.postgresSeparatorSpaces(message))
        }
    }
}
