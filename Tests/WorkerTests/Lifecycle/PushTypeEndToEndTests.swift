import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// VoIP and Live Activity pushes through the real `pushizo-worker run` process, PostgreSQL and the emulator:
/// each message reaches only the subscriptions of its kind (`subscriptions.kind`, migration 0013), by both
/// expansion paths (id lists in bulk, and the chunked path of `{"all": true}`), with Apple's push type and
/// topic, which the emulator checks as APNs does; FCM fails them with `push_type_unsupported`.
@Suite("APNs push types end to end", .serialized)
struct PushTypeEndToEndTests {
    @Test func eachPushTypeReachesOnlyItsOwnTokens() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let messages = [
                    "alert": #"{"contents": {"en": "Your order shipped"}}"#,
                    "voip": #"{"apns_push_type": "voip", "ttl": 600, "data": {"caller": "Ann"}}"#,
                    "liveactivity": #"""
                        {"apns_push_type": "liveactivity", "contents": {"en": "Driver is 2 minutes away"},
                         "live_activity": {"event": "update", "timestamp": 1685952000, "content_state": {"eta": 2}}}
                        """#,
                    // Lists only the user's ordinary iPhone token: a VoIP push must not reach it.
                    "voip-to-device": #"{"apns_push_type": "voip", "data": {"caller": "Bob"}}"#,
                    // Refused at expansion, before any delivery exists.
                    "unknown-type": #"{"apns_push_type": "pushkit", "contents": {"en": "x"}}"#,
                ]
                let seeded = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    let user = try seed.user("ann")
                    func subscription(_ platform: String, _ kind: String, _ token: String) throws -> UUID {
                        try seed.connection.query(
                            """
                            INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language, kind)
                            VALUES ($1, $2, $3, $4, 'production', 'en', $5) RETURNING id
                            """, [seed.appID, user, platform, token, kind])[0].decode(UUID.self, "id")
                    }
                    let tokens = ["device": Seed.token(), "voip": Seed.token(), "liveactivity": Seed.token()]
                    var subscriptions: [UUID: String] = [:]
                    for (kind, token) in tokens { subscriptions[try subscription("ios", kind, token)] = "ios/\(kind)" }
                    subscriptions[try subscription("android", "device", "fcm-okay-1")] = "android/device"
                    // Bad data: a VoIP token on an Android subscription.
                    subscriptions[try subscription("android", "voip", "fcm-okay-2")] = "android/voip"
                    var notifications: [UUID: String] = [:]
                    let deviceID = subscriptions.first { $0.value == "ios/device" }!.key
                    for (name, message) in messages {
                        let target = switch name {
                        case "liveactivity": #"{"all": true}"#
                        case "voip-to-device": #"{"include_subscription_ids": ["\#(deviceID)"]}"#
                        default: #"{"include_external_ids": ["ann"]}"#
                        }
                        notifications[try seed.notification(message: message, target: target)] = name
                    }
                    // The kind is checked by the table itself.
                    #expect(throws: PostgresError.self) { try subscription("ios", "pushkit", Seed.token()) }
                    // ... and fixed for a row's life (queued deliveries were chosen by it); setting the same kind is fine.
                    let deviceRow = subscriptions.first { $0.value == "ios/device" }!.key
                    #expect(throws: PostgresError.self) {
                        try seed.connection.query("UPDATE subscriptions SET kind = 'voip' WHERE id = $1", [deviceRow])
                    }
                    _ = try seed.connection.query("UPDATE subscriptions SET kind = 'device', language = 'en' WHERE id = $1", [deviceRow])
                    return (tokens, subscriptions, notifications)
                }
                let (tokens, subscriptions, notifications) = seeded

                let process = try await emulator.runWorkerUntilDrained(databaseURL: url)
                #expect(process.terminationStatus == 0)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)

                let rows = try await database.query(
                    """
                    SELECT notification_id, subscription_id, event, reason FROM delivery_events
                    WHERE event IN ('sent', 'failed', 'skipped') ORDER BY notification_id, subscription_id
                    """)
                let statuses = try await database.query("SELECT id, status, status_reason, targeted_count FROM notifications")
                await database.shutdown()
                var events: [String] = []
                for row in rows {
                    let notification = notifications[try row.decode(UUID.self, "notification_id")] ?? "?"
                    let subscription = subscriptions[try row.decode(UUID.self, "subscription_id")] ?? "?"
                    events.append("\(notification) -> \(subscription): \(row["event"] ?? "")/\(row["reason"] ?? "-")")
                }
                #expect(events.sorted() == [
                    "alert -> android/device: sent/-",
                    "alert -> ios/device: sent/-",
                    "liveactivity -> ios/liveactivity: sent/-",
                    "voip -> android/voip: failed/push_type_unsupported",
                    "voip -> ios/voip: sent/-",
                ])
                for row in statuses {
                    let name = notifications[try row.decode(UUID.self, "id")] ?? "?"
                    if name == "unknown-type" {
                        #expect(row["status"] == "failed")
                        #expect(row["status_reason"]?.hasPrefix("invalid_message: apns_push_type must be one of voip, liveactivity, location") == true)
                        continue
                    }
                    #expect(row["status"] == "expanded", "\(name)")
                    if name == "voip-to-device" { #expect(row["targeted_count"] == "0") }
                }

                // What APNs got: each push type with its topic, on its own token only.
                // A set: on a loaded machine a push whose answer came too late is sent again (at least once).
                let accepted = Set(emulator.apns.acceptedNotifications.map { "\($0.pushType) \($0.topic) \($0.priority ?? "-") \($0.deviceToken)" })
                #expect(accepted.sorted() == [
                    "alert dev.pushizo.test 10 \(tokens["device"]!)",
                    "liveactivity dev.pushizo.test.push-type.liveactivity 10 \(tokens["liveactivity"]!)",
                    "voip dev.pushizo.test.voip 10 \(tokens["voip"]!)",
                ].sorted())
                let live = try #require(emulator.apns.acceptedNotifications.first { $0.pushType == "liveactivity" })
                #expect(String(decoding: live.payload, as: UTF8.self)
                    == #"{"aps":{"alert":{"body":"Driver is 2 minutes away"},"content-state":{"eta":2},"event":"update","timestamp":1685952000}}"#)
                let voip = try #require(emulator.apns.acceptedNotifications.first { $0.pushType == "voip" })
                #expect(voip.expiration != nil)
            }
        }
    }

    /// Live Activity dates in milliseconds (JavaScript's `Date.now()`, as some SDK examples send) fail their own
    /// delivery with `invalid_message` naming the member, through the real worker: sent as they were, a
    /// millisecond `timestamp` would read as a time thousands of years ahead and ActivityKit would ignore
    /// every correct update of that activity after it. The same push in seconds goes out.
    @Test func millisecondDatesFailNamingTheirFieldAndSecondsAreSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let messages = [
                    "live_activity.timestamp": #"{"event": "update", "timestamp": 1764590400000, "content_state": {"eta": 2}}"#,
                    "live_activity.stale_date":
                        #"{"event": "update", "timestamp": 1764590400, "stale_date": 1764594000000, "content_state": {"eta": 2}}"#,
                    "live_activity.dismissal_date": #"{"event": "end", "timestamp": 1764590400, "dismissal_date": 1764594000000}"#,
                    "seconds": #"{"event": "update", "timestamp": 1764590400, "stale_date": 1764594000, "content_state": {"eta": 3}}"#,
                ]
                let (token, notifications) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let token = Seed.token()
                    let subscription = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token, apns_environment, language, kind)
                        VALUES ($1, 'ios', $2, 'production', 'en', 'liveactivity') RETURNING id
                        """, [seed.appID, token])[0].decode(UUID.self, "id")
                    var notifications: [UUID: String] = [:]
                    for (name, activity) in messages {
                        let message = #"{"apns_push_type": "liveactivity", "live_activity": \#(activity)}"#
                        notifications[try seed.notification(message: message, target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)] = name
                    }
                    return (token, notifications)
                }

                let process = try await emulator.runWorkerUntilDrained(databaseURL: url)
                #expect(process.terminationStatus == 0)

                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let rows = try await database.query(
                    """
                    SELECT notification_id, event, reason, detail->>'field' AS field, detail->>'message' AS message
                    FROM delivery_events WHERE event IN ('sent', 'failed')
                    """)
                await database.shutdown()
                var outcomes: [String] = []
                for row in rows {
                    let name = notifications[try row.decode(UUID.self, "notification_id")] ?? "?"
                    outcomes.append("\(name): \(row["event"] ?? "")/\(row["reason"] ?? "-") \(row["field"] ?? "-")")
                    if row["event"] == "failed" {
                        #expect(row["message"]?.contains("reads as milliseconds") == true, "\(row["message"] ?? "")")
                    }
                }
                #expect(outcomes.sorted() == [
                    "live_activity.dismissal_date: failed/invalid_message live_activity.dismissal_date",
                    "live_activity.stale_date: failed/invalid_message live_activity.stale_date",
                    "live_activity.timestamp: failed/invalid_message live_activity.timestamp",
                    "seconds: sent/- -",
                ])
                // APNs got the push in seconds, and nothing else.
                let payloads = Set(emulator.apns.acceptedNotifications.map { "\($0.deviceToken) \(String(decoding: $0.payload, as: UTF8.self))" })
                #expect(payloads == [
                    #"\#(token) {"aps":{"content-state":{"eta":3},"event":"update","stale-date":1764594000,"timestamp":1764590400}}"#
                ])
            }
        }
    }

    /// The other types of Apple's `apns-push-type` table through the real worker and the emulator over HTTP/2
    /// and TLS: each reaches only its own kind of token with its topic suffix, priority and payload, which the
    /// emulator checks as APNs does; an MDM push on this token-based channel fails alone as
    /// `push_type_unsupported` (only an MDM push certificate sends those; `APNsCertificateEndToEndTests` sends
    /// one). The FCM options pass through to the FCM emulator, which checks their types and the label's pattern.
    @Test func everyOtherPushTypeAndTheFCMOptionsGoThroughTheEmulator() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let messages = [
                    "location": #"{"apns_push_type": "location", "priority": "normal", "data": {"query": 7}}"#,
                    "pushtotalk": #"{"apns_push_type": "pushtotalk", "ttl": 600, "data": {"speaker": "Ann"}}"#,
                    "complication": #"{"apns_push_type": "complication"}"#,
                    "fileprovider": #"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "NSFileProviderWorkingSetContainerItemIdentifier"}}"#,
                    "widgets": #"{"apns_push_type": "widgets"}"#,
                    "mdm": #"{"apns_push_type": "mdm", "mdm_push_magic": "magic"}"#,
                    "fcm-options": #"{"contents": "Score 2-1", "collapse_id": "match-9", "fcm_analytics_label": "match_9.goal", "android_direct_boot_ok": true}"#,
                ]
                let kinds = ["location", "pushtotalk", "complication", "fileprovider", "widgets", "mdm"]
                let (tokens, notifications) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    let user = try seed.user("ann")
                    var tokens: [String: String] = [:]
                    for kind in kinds + ["device"] {
                        let token = Seed.token()
                        tokens[kind] = token
                        _ = try seed.connection.query(
                            """
                            INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language, kind)
                            VALUES ($1, $2, 'ios', $3, 'production', 'en', $4)
                            """, [seed.appID, user, token, kind])
                    }
                    _ = try seed.connection.query(
                        "INSERT INTO subscriptions (app_id, user_id, platform, token, language) VALUES ($1, $2, 'android', 'fcm-okay-options', 'en')",
                        [seed.appID, user])
                    var notifications: [UUID: String] = [:]
                    for (name, message) in messages {
                        notifications[try seed.notification(message: message, target: #"{"include_external_ids": ["ann"]}"#)] = name
                    }
                    return (tokens, notifications)
                }

                let process = try await emulator.runWorkerUntilDrained(databaseURL: url)
                #expect(process.terminationStatus == 0)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let rows = try await database.query(
                    """
                    SELECT e.notification_id, s.platform, s.kind, e.event, e.reason FROM delivery_events e
                    JOIN subscriptions s ON s.id = e.subscription_id
                    WHERE e.event IN ('sent', 'failed', 'skipped')
                    """)
                await database.shutdown()
                var events: Set<String> = []
                for row in rows {
                    let name = notifications[try row.decode(UUID.self, "notification_id")] ?? "?"
                    events.insert("\(name) -> \(row["platform"] ?? "")/\(row["kind"] ?? ""): \(row["event"] ?? "")/\(row["reason"] ?? "-")")
                }
                #expect(events.sorted() == [
                    "complication -> ios/complication: sent/-",
                    "fcm-options -> android/device: sent/-",
                    "fcm-options -> ios/device: sent/-",
                    "fileprovider -> ios/fileprovider: sent/-",
                    "location -> ios/location: sent/-",
                    "mdm -> ios/mdm: failed/push_type_unsupported",
                    "pushtotalk -> ios/pushtotalk: sent/-",
                    "widgets -> ios/widgets: sent/-",
                ])

                // What APNs got, type by type: topic, priority, expiration, payload, on its own token only.
                let msgID = try Regex(#""msgId":"[^"]*""#)
                let accepted = Set(emulator.apns.acceptedNotifications.filter { $0.pushType != "alert" }.map {
                    let payload = String(decoding: $0.payload, as: UTF8.self).replacing(msgID, with: #""msgId":"…""#)
                    return "\($0.pushType) \($0.topic) \($0.priority ?? "-") \($0.expiration ?? "-") \($0.deviceToken == tokens[$0.pushType]) \(payload)"
                })
                #expect(accepted.sorted() == [
                    #"complication dev.pushizo.test.complication 10 - true {"aps":{},"on":{"msgId":"…"}}"#,
                    #"fileprovider dev.pushizo.test.pushkit.fileprovider 10 - true {"container-identifier":"NSFileProviderWorkingSetContainerItemIdentifier"}"#,
                    #"location dev.pushizo.test.location-query 5 - true {"aps":{},"on":{"data":{"query":7},"msgId":"…"}}"#,
                    #"pushtotalk dev.pushizo.test.voip-ptt 10 0 true {"aps":{},"on":{"data":{"speaker":"Ann"},"msgId":"…"}}"#,
                    #"widgets dev.pushizo.test.push-type.widgets 10 - true {"aps":{"content-changed":true}}"#,
                ])
                let fcm = try #require(emulator.fcm.acceptedMessages.first { $0.token == "fcm-okay-options" })
                #expect(fcm.androidJSON == #"{"collapse_key":"match-9","direct_boot_ok":true,"priority":"HIGH"}"#)
                #expect(fcm.analyticsLabel == "match_9.goal")
            }
        }
    }
}
