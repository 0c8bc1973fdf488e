import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// `preview` with `app.frequency_caps` (docs/preview.md): reported on a send, decided when the caller lists
/// the user's recent notifications.
@Suite("preview: frequency caps")
struct FrequencyCapsPreviewTests {
    static let caps: JSONValue = [["max": 2, "per_seconds": 3600]]

    static func input(caps: JSONValue = caps, recent: JSONValue? = nil, message: JSONValue? = nil) -> JSONValue {
        var members = PreviewTests.base.objectValue ?? [:]
        var app = members["app"]?.objectValue ?? [:]
        app["frequency_caps"] = caps
        members["app"] = .object(app)
        if let recent { members["recent_notifications"] = recent }
        if let message {
            var notification = members["notification"]?.objectValue ?? [:]
            notification["message"] = message
            members["notification"] = .object(notification)
        }
        return .object(members)
    }

    @Test func aSendReportsTheCapsItIsSubjectTo() throws {
        let output = try Preview.run(Self.input())
        #expect(output["decision"]?["action"] == "send")
        #expect(output["decision"]?["detail"]?["frequency_caps"] == Self.caps)
        #expect(output["decision"]?["detail"]?["frequency_caps_note"] != nil)
        #expect(output["request"] != nil)
        let notes = output["notes"]?.arrayValue ?? []
        #expect(!notes.contains { $0.stringValue?.contains("not applied") == true })
    }

    @Test func recentNotificationsDecide() throws {
        // at is 2026-11-29T18:30:00Z; two grants within the hour fill the rule.
        let full = try Preview.run(Self.input(recent: ["2026-11-29T18:00:00Z", "2026-11-29T17:45:00+00:00"]))
        #expect(full["decision"] == ["action": "skip", "provider": "apns", "reason": "frequency_capped",
                                     "detail": ["max": 2, "per_seconds": 3600, "used": 2,
                                                // The worker's detail: the user, else the subscription.
                                                "cap_key": "6f1c6e0e-5a0b-4d6e-9d5e-6b6a1c2d3e4f"]])
        #expect(full["request"] == nil)
        // One of them is older than the window: room for one more.
        let room = try Preview.run(Self.input(recent: ["2026-11-29T18:00:00Z", "2026-11-29T17:29:59Z"]))
        #expect(room["decision"]?["action"] == "send")
        #expect(room["decision"]?["detail"]?["frequency_caps"] == Self.caps)
        #expect(room["decision"]?["detail"]?["frequency_caps_note"] == nil)
    }

    @Test func exemptAndSilentMessagesAreNotCapped() throws {
        let recent: JSONValue = ["2026-11-29T18:00:00Z", "2026-11-29T18:10:00Z"]
        let exempt = try Preview.run(
            Self.input(recent: recent, message: ["contents": ["tr": "kod 1234"], "frequency_cap_exempt": true]))
        #expect(exempt["decision"] == ["action": "send", "provider": "apns"])
        let silent = try Preview.run(Self.input(recent: recent, message: ["content_available": true]))
        #expect(silent["decision"] == ["action": "send", "provider": "apns"])
    }

    @Test func malformedCapsAreOffWithANoteAndBadRecentListsAreRefused() throws {
        let output = try Preview.run(Self.input(caps: [["max": 2, "per_second": 60]]))
        #expect(output["decision"] == ["action": "send", "provider": "apns"])
        let notes = output["notes"]?.arrayValue ?? []
        #expect(notes.contains { $0.stringValue?.contains("frequency_caps[0].per_second") == true })
        #expect(throws: PreviewError.self) { try Preview.run(Self.input(recent: "yesterday")) }
        #expect(throws: PreviewError.self) { try Preview.run(Self.input(recent: ["not a date"])) }
    }
}
