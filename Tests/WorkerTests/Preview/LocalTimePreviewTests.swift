import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// `preview` shows the local-time decision as the expansion would schedule it (docs/local-time-delivery.md).
@Suite("preview: local-time delivery")
struct LocalTimePreviewTests {
    static func document(zone: String?, at: String, ttl: JSONValue = .null) -> JSONValue {
        DecisionParityTests.with([
            (["at"], .string(at)),
            (["app", "default_timezone"], "Europe/Paris"),
            (["subscription", "timezone"], zone.map { .string($0) } ?? .null),
            (["notification", "send_after"], "2026-12-01T06:00:00Z"),
            (["notification", "message"], ["contents": "Good morning", "delivery_time_of_day": "09:00", "ttl": ttl]),
        ])
    }

    @Test func beforeTheLocalTimeItDefersUntilItWithTheZone() throws {
        let decision = try #require(try Preview.run(Self.document(zone: "America/New_York", at: "2026-12-01T06:00:00Z"))["decision"])
        #expect(decision["action"] == "defer")
        #expect(decision["reason"] == "local_time")
        #expect(decision["until"] == "2026-12-01T14:00:00Z")
        #expect(decision["detail"]?["zone"] == "America/New_York")
        #expect(decision["detail"]?["delivery_time_of_day"] == "09:00")
        // The app's default zone for a subscriber without one, with a note for an unknown one.
        let fallback = try Preview.run(Self.document(zone: "Americas/Vancouver", at: "2026-12-01T06:00:00Z"))
        #expect(fallback["decision"]?["until"] == "2026-12-01T08:00:00Z")
        #expect(fallback["decision"]?["detail"]?["zone"] == "Europe/Paris")
        #expect(fallback["notes"]?.arrayValue?.contains { $0.stringValue?.contains("Americas/Vancouver") == true } == true)
    }

    @Test func atTheLocalTimeItSendsAndAfterTheTtlItSkips() throws {
        let due = try #require(try Preview.run(Self.document(zone: "America/New_York", at: "2026-12-01T14:00:00Z"))["decision"])
        #expect(due["action"] == "send")
        let late = try #require(try Preview.run(Self.document(zone: "Asia/Kathmandu", at: "2026-12-01T06:00:00Z", ttl: 50_400))["decision"])
        #expect(late["action"] == "skip")
        #expect(late["reason"] == "expired")
        #expect(late["detail"]?["local_time_due"] == "2026-12-02T03:15:00Z")
    }
}
