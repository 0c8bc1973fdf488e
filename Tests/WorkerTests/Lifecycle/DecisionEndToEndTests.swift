import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// Badge-only pushes and silent pushes in quiet hours, through the worker (PostgreSQL -> worker -> the
/// emulators) and through `preview`, which must decide the same.
@Suite("One decision path end to end", .serialized)
struct DecisionEndToEndTests {
    @Test func badgeOnlyAndSilentPushesInQuietHours() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                // The app's night is now: a window from an hour ago to an hour ahead, in UTC.
                let now = Date()
                let window = (QuietHoursEndToEndTests.utcTime(now.addingTimeInterval(-3600)), QuietHoursEndToEndTests.utcTime(now.addingTimeInterval(3600)))
                let messages = [
                    "badge": #"{"ios_badge_type": "SetTo", "ios_badge_count": 0, "quiet_hours_exempt": true}"#,
                    "silent": #"{"content_available": true, "ttl": 600, "data": {"sync": "inbox"}}"#,
                    "visible": #"{"contents": {"en": "good night"}, "ttl": 600}"#,
                ]
                let seeded = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        "UPDATE apps SET quiet_hours_start = $2::time, quiet_hours_end = $3::time WHERE id = $1",
                        [seed.appID, window.0, window.1])
                    let iPhone = try seed.subscription(token: Seed.token(prefix: "a0a0"))
                    let android = try seed.subscription(platform: "android", token: "fcm-okay-1")
                    var notifications: [String: UUID] = [:]
                    for (name, message) in messages {
                        notifications[name] = try seed.notification(
                            message: message, target: #"{"include_subscription_ids": ["\#(iPhone)", "\#(android)"]}"#)
                    }
                    return (iPhone, android, notifications)
                }
                let (iPhone, android, notifications) = seeded
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_QUIET_HOURS_SPREAD": "0"]),
                    logger: quietLogger)
                try await runUntil(runtime, "all six deliveries have an event") {
                    let rows = try await database.query(
                        "SELECT count(DISTINCT (notification_id, subscription_id)) AS n FROM delivery_events")
                    return rows[0]["n"] == "6"
                }
                let rows = try await database.query(
                    "SELECT notification_id, subscription_id, event, reason, n.message::text AS message FROM delivery_events e JOIN notifications n ON n.id = e.notification_id")
                let key = try await database.query("SELECT encode(signing_key, 'base64') AS key FROM apps")[0]["key"] ?? ""
                await database.shutdown()
                var events: [String: String] = [:]
                var stored: [UUID: String] = [:]
                for row in rows {
                    let notification = try row.decode(UUID.self, "notification_id")
                    let subscription = try row.decode(UUID.self, "subscription_id")
                    let name = notifications.first { $0.value == notification }?.key ?? "?"
                    let device = subscription == iPhone ? "ios" : "android"
                    events["\(name)/\(device)"] = "\(row["event"] ?? "")/\(row["reason"] ?? "-")"
                    stored[notification] = row["message"]
                }
                #expect(events == [
                    // Row 3: APNs shows the badge; FCM has nothing to show.
                    "badge/ios": "sent/-", "badge/android": "skipped/nothing_to_show",
                    // Row 12: the silent sync is not held by the night; the visible push is held and would
                    // outlive its ttl, so it is skipped.
                    "silent/ios": "sent/-", "silent/android": "sent/-",
                    "visible/ios": "skipped/expired", "visible/android": "skipped/expired",
                ])
                let accepted = emulator.apns.acceptedNotifications
                let badge = try #require(accepted.first { !String(decoding: $0.payload, as: UTF8.self).contains("content-available") })
                #expect(badge.pushType == "alert")
                let payload = try JSONValue(parsing: badge.payload)
                #expect(payload["aps"] == ["badge": 0])
                #expect(accepted.contains { $0.pushType == "background" })

                // preview decides the same for each, and shows the very payload the emulator got.
                for (name, id) in notifications {
                    for (device, subscription) in [("ios", iPhone), ("android", android)] {
                        let input: JSONValue = [
                            "at": .string(Date().formatted(.iso8601)),
                            "app": [
                                "default_language": "en", "signing_key": .string(key.replacingOccurrences(of: "\n", with: "")),
                                "quiet_hours_start": .string(window.0), "quiet_hours_end": .string(window.1),
                                "channels": [
                                    "apns": ["topic": "dev.pushizo.test", "endpoint": .string(emulator.endpoint)],
                                    "fcm": ["project_id": .string(EmulatorHarness.fcmProjectID)],
                                ],
                            ],
                            "subscription": [
                                "id": .string(subscription.uuidString), "platform": .string(device == "ios" ? "ios" : "android"),
                                "token": .string(device == "ios" ? badge.deviceToken : "fcm-okay-1"), "apns_environment": "production",
                            ],
                            "notification": ["id": .string(id.uuidString), "message": try JSONValue(parsing: stored[id] ?? "{}")],
                            "quiet_hours_spread": 0,
                        ]
                        let output = try Preview.run(input)
                        let decision = output["decision"]
                        let expected = events["\(name)/\(device)"] ?? ""
                        let action = expected.hasPrefix("sent") ? "send" : "skip"
                        #expect(decision?["action"]?.stringValue == action, "\(name)/\(device)")
                        if action == "skip" {
                            #expect("skipped/" + (decision?["reason"]?.stringValue ?? "") == expected, "\(name)/\(device)")
                        }
                        if name == "badge", device == "ios" {
                            #expect(output["request"]?["body_text"]?.stringValue == String(decoding: badge.payload, as: UTF8.self))
                        }
                        if name == "silent" {
                            let notes = output["notes"]?.arrayValue?.compactMap(\.stringValue) ?? []
                            #expect(notes.contains { $0.contains("quiet hours do not hold it") }, "\(notes)")
                        }
                    }
                }
            }
        }
    }
}
