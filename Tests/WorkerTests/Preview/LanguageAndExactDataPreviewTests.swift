import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// Language matching and exact `data` numbers through `preview`, in process and through the executable.
@Suite("preview: language matching and exact data")
struct LanguageAndExactDataPreviewTests {
    static let chinese: JSONValue = ["en": "Hello", "zh-Hans": "简体", "zh-Hant": "繁體"]

    static func document(platform: String, token: String, channels: JSONValue, language: String, message: JSONValue) -> JSONValue {
        var document = PreviewTests.set(PreviewTests.base, ["subscription", "platform"], .string(platform))
        document = PreviewTests.set(document, ["subscription", "token"], .string(token))
        document = PreviewTests.set(document, ["subscription", "language"], .string(language))
        document = PreviewTests.set(document, ["app", "channels"], channels)
        return PreviewTests.set(document, ["notification", "message"], message)
    }

    static func ios(language: String, message: JSONValue) -> JSONValue {
        document(platform: "ios", token: String(repeating: "a0", count: 32), channels: ["apns": ["topic": "com.example.app"]],
                 language: language, message: message)
    }

    @Test(arguments: [("zh-Hant-TW", "繁體"), ("zh-TW", "繁體"), ("zh_HK", "繁體"), ("zh-CN", "简体"), ("zh", "简体"), ("ja", "Hello")])
    func chineseByScript(language: String, expected: String) throws {
        let output = try Preview.run(Self.ios(language: language, message: ["contents": Self.chinese]))
        #expect(output["request"]?["body"]?["aps"]?["alert"]?["body"] == .string(expected))
    }

    @Test func deprecatedCodeAndAppDefault() throws {
        var document = Self.ios(language: "iw-IL", message: ["contents": ["en": "Hi", "he": "שלום"]])
        #expect(try Preview.run(document)["request"]?["body"]?["aps"]?["alert"]?["body"] == "שלום")
        document = Self.ios(language: "ko", message: ["contents": ["en": "Hi", "pt-BR": "Oi"]])
        document = PreviewTests.set(document, ["app", "default_language"], "pt_br")
        #expect(try Preview.run(document)["request"]?["body"]?["aps"]?["alert"]?["body"] == "Oi")
    }

    static let exactMessage = #"{"contents": {"zh-Hant": "繁體", "en": "Hi"}, "data": {"order_id": 12345678901234567890, "price": 19.90}}"#

    /// The reported input through the real `pushizo-worker preview`: every provider's body carries the
    /// literal, and preview prints it unchanged.
    @Test func exactNumbersThroughTheExecutable() async throws {
        let message = try JSONValue(parsing: Self.exactMessage)
        let documents = [
            Self.ios(language: "zh-TW", message: message),
            Self.document(platform: "android", token: "fcm-token-1", channels: ["fcm": ["project_id": "demo"]],
                          language: "zh-TW", message: message),
            Self.document(platform: "web", token: "https://push.example.net/wpush/v2/abc", channels: ["webpush": [:]],
                          language: "zh-TW", message: message),
        ]
        for document in documents {
            let result = try await onThread { try RenderingBoundsProcessTests.preview(document) }
            #expect(result.status == 0)
            let request = try #require(result.output?["request"])
            let text = try #require(request["body_text"]?.stringValue)
            #expect(!text.contains("e+19") && text.contains("12345678901234567890") && text.contains("19.90"), "\(text)")
            #expect(text.contains("繁體"), "\(text)")
        }
        let apns = try #require(try await onThread { try RenderingBoundsProcessTests.preview(documents[0]) }.output)
        #expect(apns["request"]?["body"]?["on"]?["data"]?["order_id"] == .number("12345678901234567890"))
        let fcm = try #require(try await onThread { try RenderingBoundsProcessTests.preview(documents[1]) }.output)
        #expect(fcm["request"]?["body"]?["message"]?["data"]?["on.d.order_id"] == "12345678901234567890")
        #expect(fcm["request"]?["body"]?["message"]?["data"]?["on.d.price"] == "19.90")
    }
}
