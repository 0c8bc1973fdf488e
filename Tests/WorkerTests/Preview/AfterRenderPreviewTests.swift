import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// After-render rules through `preview`: what the producer sees before sending.
@Suite("After-render rules in preview")
struct AfterRenderPreviewTests {
    static func document(_ message: JSONValue, tags: JSONValue = [:], platform: String = "ios") -> JSONValue {
        let token: JSONValue = platform == "ios" ? .string(String(repeating: "a0", count: 32)) : "fcm-token"
        return [
            "at": "2026-11-29T21:30:00+03:00",
            "app": ["default_language": "en", "channels": ["apns": ["topic": "com.example.app"], "fcm": ["project_id": "p"]]],
            "user": ["tags": tags],
            "subscription": ["platform": .string(platform), "token": token, "language": "en"],
            "notification": ["message": message],
        ]
    }

    @Test func anEmptyBodyFailsTheMessageThroughTheExecutable() async throws {
        let document = Self.document(["contents": ["en": "{{ first_name }}"]])
        let result = try await onThread { try RenderingBoundsProcessTests.preview(document) }
        #expect(result.status == 0)
        let decision = try #require(result.output?["decision"])
        #expect(decision["action"] == "fail")
        #expect(decision["reason"] == "invalid_message")
        #expect(decision["detail"]?["error"]?.stringValue?.hasPrefix("`contents`: renders empty") == true)
        #expect(result.output?["request"] == nil)
    }

    @Test func filtersRenderAndRawTemplateTextNeverGoesOut() throws {
        for platform in ["ios", "android"] {
            let ok = try Preview.run(Self.document(["headings": ["en": "Hi {{ first_name | upcase }}"], "contents": ["en": "x"]],
                                                   tags: ["first_name": "ayşe"], platform: platform))
            let body = ok["request"]?["body"]
            let title = body?["aps"]?["alert"]?["title"] ?? body?["message"]?["data"]?["on.title"]
            #expect(title == "Hi AYŞE", "\(platform)")

            let bad = try Preview.run(Self.document(["headings": ["en": "Hi {{ first_name | shout }}"], "contents": ["en": "x"]],
                                                    platform: platform))
            #expect(bad["decision"]?["reason"] == "invalid_message", "\(platform)")
            let detail = String(decoding: (bad["decision"]?["detail"] ?? .null).serialized(), as: UTF8.self)
            #expect(detail.contains("`headings.en`"), "\(bad)")
            #expect(bad["request"] == nil)
        }
    }

    @Test func anOversizedTitleLeavesAShortBodyAndSubtitleWhole() throws {
        let output = try Preview.run(Self.document([
            "headings": ["en": .string(String(repeating: "T", count: 5000))],
            "subtitle": ["en": "Your order"], "contents": ["en": "Arrives today"],
        ]))
        let alert = try #require(output["request"]?["body"]?["aps"]?["alert"])
        #expect(alert["body"] == "Arrives today")
        #expect(alert["subtitle"] == "Your order")
        #expect(alert["title"]?.stringValue?.hasSuffix("T…") == true)
        #expect(output["request"]?["body_bytes"] == 4096)
    }
}
