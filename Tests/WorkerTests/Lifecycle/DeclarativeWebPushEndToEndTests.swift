import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// Declarative Web Push (WebKit, "Meet Declarative Web Push") end to end: a channel that asks for the form sends
/// it, RFC 8291-encrypted, to the emulator, which checks the form Safari parses; the decrypted JSON is the message
/// in the subscriber's language, the same bytes `preview` shows; a message that cannot make the form fails its
/// own delivery with a reason.
@Suite("Declarative Web Push through the emulator", .serialized)
struct DeclarativeWebPushEndToEndTests {
    static let message = #"""
        {"headings": {"en": "Hello", "ar": "مرحبا {{ first_name | default: \"صديقي\" }}"},
         "contents": {"en": "Your order shipped", "ar": "تم شحن طلبك"},
         "url": "https://shop.example/orders/42", "data": {"order": 42},
         "ios_badge_type": "SetTo", "ios_badge_count": 2, "web_silent": false}
        """#
    static let noURL = #"{"headings": {"en": "Hello"}, "contents": {"en": "No page to open"}}"#

    @Test func sendsTheDeclarativeFormAndFailsWhatCannotMakeIt() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let origin = emulator.endpoint
                let (subscriptions, notification, signingKey) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings(declarative: "always"))
                    let user = try seed.user("layla")
                    var subscriptions: [String: UUID] = [:]
                    subscriptions["okay1"] = try seed.webSubscription(
                        try emulator.webSubscription("okay1"), origin: origin, user: user, language: "ar-EG")
                    subscriptions["okay2"] = try seed.webSubscription(
                        try emulator.webSubscription("okay2"), origin: origin, user: user, language: "fr")
                    let notification = try seed.notification(message: Self.message, target: #"{"include_external_ids": ["layla"]}"#)
                    _ = try seed.notification(message: Self.noURL, target: #"{"include_external_ids": ["layla"]}"#)
                    let signingKey = try seed.connection.query(
                        "SELECT encode(signing_key, 'base64') AS k FROM apps WHERE id = $1", [seed.appID])[0]["k"] ?? ""
                    return (subscriptions, notification, signingKey)
                }
                let runtime = try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)

                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    for id in ["okay1", "okay2"] {
                        let events = try connection.query(
                            """
                            SELECT e.event || coalesce('/' || e.reason, '') AS e, e.detail::text AS d, d.message::text AS m
                            FROM delivery_events e JOIN notifications d ON d.id = e.notification_id
                            WHERE e.subscription_id = $1 ORDER BY e.id
                            """, [subscriptions[id]!])
                        #expect(events.count == 2)
                        for row in events {
                            if row["m"]?.contains("orders/42") == true {
                                #expect(row["e"] == "sent")
                            } else {
                                #expect(row["e"] == "failed/invalid_message")
                                #expect(row["d"]?.contains("needs `url`") == true, "\(row["d"] ?? "")")
                            }
                        }
                    }
                }

                let accepted = emulator.webPush.acceptedMessages
                #expect(accepted.count == 2, "only the message with a url was sent")
                #expect(emulator.webPush.statusCounts[400] == nil, "the emulator found every declarative body well formed")
                let arabic = try #require(accepted.first { $0.subscriptionID == "okay1" })
                let payload = try JSONValue(parsing: arabic.plaintext)
                #expect(payload["web_push"] == 8030)
                let shown = try #require(payload["notification"])
                #expect(shown["title"] == "مرحبا صديقي")
                #expect(shown["body"] == "تم شحن طلبك")
                #expect(shown["lang"] == "ar")
                #expect(shown["dir"] == "rtl")
                #expect(shown["navigate"] == "https://shop.example/orders/42")
                #expect(shown["app_badge"] == 2)
                #expect(shown["silent"] == false)
                #expect(shown["mutable"] == true)
                #expect(shown["data"]?["data"] == ["order": "42"])
                #expect(shown["data"]?["msgId"]?.stringValue?.isEmpty == false)
                let french = try #require(accepted.first { $0.subscriptionID == "okay2" })
                let frenchShown = try #require(try JSONValue(parsing: french.plaintext)["notification"])
                #expect(frenchShown["lang"] == "en" && frenchShown["dir"] == nil && frenchShown["title"] == "Hello")

                // `preview` with the same channel setting shows exactly what the browser decrypted.
                let okay = try emulator.webSubscription("okay1")
                let preview = try Preview.run([
                    "at": "2026-11-29T21:30:00Z",
                    "app": [
                        "default_language": "en", "signing_key": .string(signingKey),
                        "channels": ["webpush": ["declarative": "always"]],
                    ],
                    "subscription": [
                        "id": .string(subscriptions["okay1"]!.uuidString), "platform": "web", "language": "ar-EG",
                        "token": .string(okay.endpoint(origin: origin)),
                    ],
                    "notification": ["id": .string(notification.uuidString), "message": try JSONValue(parsing: Self.message)],
                ])
                #expect(preview["request"]?["body_text"]?.stringValue == String(decoding: arabic.plaintext, as: UTF8.self))
            }
        }
    }
}
