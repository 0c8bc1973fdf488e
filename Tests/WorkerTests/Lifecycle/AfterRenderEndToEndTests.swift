import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// After-render rules in the worker: a user for whom the body renders empty gets a `failed` event naming
/// the field; a user with the tag gets the push; the filtered title reaches the provider.
@Suite("After-render rules end to end", .serialized)
struct AfterRenderEndToEndTests {
    @Test func anEmptyBodyFailsThatDeliveryAndNamesTheField() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (withTag, withoutTag) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    let ann = try seed.user("ann")
                    _ = try seed.connection.query(#"UPDATE users SET tags = '{"first_name": "ann"}' WHERE id = $1"#, [ann])
                    let bob = try seed.user("bob")
                    let withTag = try seed.subscription(user: ann, platform: "android", token: "fcm-okay-ann", language: "en")
                    let withoutTag = try seed.subscription(user: bob, platform: "android", token: "fcm-okay-bob", language: "en")
                    _ = try seed.notification(
                        message: #"{"headings": {"en": "Hi {{ first_name | capitalize | default: \"there\" }}"}, "contents": {"en": "{{ first_name }}"}}"#,
                        target: #"{"include_external_ids": ["ann", "bob"]}"#)
                    return (withTag, withoutTag)
                }
                let runtime = try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    #expect(try FCMEndToEndTests.events(connection, withTag) == ["sent"])
                    #expect(try FCMEndToEndTests.events(connection, withoutTag) == ["failed/invalid_message"])
                    let detail = try connection.query(
                        "SELECT detail::text AS d FROM delivery_events WHERE subscription_id = $1", [withoutTag])[0]["d"] ?? ""
                    #expect(detail.contains("`contents`: renders empty"), "\(detail)")
                    #expect(try connection.query("SELECT status FROM subscriptions WHERE id = $1", [withoutTag])[0]["status"] == "active")
                }
                #expect(emulator.fcm.acceptedCount == 1)
                let sent = emulator.fcm.acceptedMessages.first
                #expect(sent?.data["on.title"] == "Hi Ann" && sent?.data["on.body"] == "ann")
            }
        }
    }
}
