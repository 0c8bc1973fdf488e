import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// `preview` of a notification on a Live Activity broadcast channel: the one broadcast request the worker sends
/// (docs/live-activity-channels.md), or the failure it records instead.
@Suite("preview of Live Activity broadcasts")
struct BroadcastPreviewTests {
    static let message: JSONValue = [
        "apns_push_type": "liveactivity", "ttl": 600,
        "live_activity": ["event": "update", "timestamp": 1_764_590_400, "content_state": ["home": 1]],
    ]

    func input(message: JSONValue = message, row: JSONValue? = ["apple_channel_id": "Y2hhbm5lbA==", "environment": "sandbox"])
        -> JSONValue
    {
        var document: [String: JSONValue] = [
            "at": "2026-12-07T20:00:00Z",
            "app": ["default_language": "en", "channels": ["apns": ["topic": "com.example.app"]]],
            "notification": [
                "id": "0b7c1b2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "created_at": "2026-12-07T20:00:00Z", "message": message,
                "target": ["live_activity_channel": "match-7"],
            ],
        ]
        if let row { document["live_activity_channel"] = row }
        return .object(document)
    }

    func header(_ output: JSONValue, _ name: String) -> String? {
        output["request"]?["headers"]?.arrayValue?.first { $0["name"]?.stringValue == name }?["value"]?.stringValue
    }

    @Test func showsTheBroadcastRequest() throws {
        let output = try Preview.run(input())
        #expect(output["decision"]?["action"] == "send")
        #expect(output["request"]?["origin"]?.stringValue == "https://api.sandbox.push.apple.com")
        #expect(output["request"]?["path"] == "/4/broadcasts/apps/com.example.app")
        #expect(header(output, "apns-channel-id") == "Y2hhbm5lbA==")
        #expect(header(output, "apns-request-id") == "0b7c1b2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b")
        #expect(header(output, "apns-push-type") == "liveactivity")
        #expect(header(output, "authorization") == "bearer \(Preview.providerTokenPlaceholder)")
        // The ttl counts from created_at, as the worker counts it.
        #expect(header(output, "apns-expiration") == "\(1_796_673_600 + 600)")
        #expect(output["request"]?["body_text"]?.stringValue
            == #"{"aps":{"content-state":{"home":1},"event":"update","timestamp":1764590400}}"#)
    }

    @Test func showsWhatTheWorkerRecordsInstead() throws {
        #expect(try Preview.run(input(row: nil))["decision"]?["reason"] == "unknown_channel")
        #expect(try Preview.run(input(row: ["apple_channel_id": "Y2g=", "state": "deleted"]))["decision"]?["reason"] == "channel_deleted")
        #expect(try Preview.run(input(row: ["state": "pending"]))["decision"]?["action"] == "defer")
        let alert = try Preview.run(input(message: ["contents": ["en": "hi"]]))
        #expect(alert["decision"]?["action"] == "fail" && alert["decision"]?["reason"] == "invalid_message")
        var beside = input()
        beside = .object((beside.objectValue ?? [:]).merging(
            ["notification": ["message": Self.message, "target": ["live_activity_channel": "m", "all": true]]]) { _, new in new })
        #expect(throws: PreviewError.self) { try Preview.run(beside) }
    }
}
