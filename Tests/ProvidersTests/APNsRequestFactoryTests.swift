import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

@Suite struct APNsRequestFactoryTests {
    static let token = "0f" + String(repeating: "a1", count: 31)
    static let apnsID = UUID(uuidString: "6B1C2C4E-7A61-4F0C-9C2D-0E3D5B8F9A10")!
    static let now = Date(timeIntervalSince1970: 1_700_000_000.5)

    func delivery(_ message: JSONValue, language: String? = "tr-TR", tags: [String: JSONValue] = [:]) throws -> APNsDelivery {
        APNsDelivery(deviceToken: Self.token, environment: "sandbox", topic: "com.example.app", apnsID: Self.apnsID,
                     message: try NotificationMessage(json: message), subscriberLanguage: language, appDefaultLanguage: "en",
                     placeholderValues: PlaceholderValues(tags: tags, language: language, country: "TR"),
                     msgID: "MSGID", campaignID: "spring", now: Self.now)
    }

    func text(_ request: PushRequest) -> String { String(decoding: request.body, as: UTF8.self) }

    @Test func visibleAlertGolden() throws {
        let request = try APNsRequestFactory.makeRequest(delivery([
            "headings": ["en": "Hello {{ name }}", "tr": "Merhaba {{ name | default: \"dostum\" }}"],
            "contents": ["en": "Your order shipped", "tr": "Siparişin yolda, {{ city }}"],
            "subtitle": ["tr": "Kargo"],
            "ios_sound": "default",
            "ios_interruption_level": "time-sensitive",
            "thread_id": "orders",
            "ios_category": "ORDER",
            "ios_relevance_score": 0.5,
            "ios_badge_type": "SetTo", "ios_badge_count": 3,
            "url": "app://orders/1",
            "image": "https://cdn.example.com/a.png",
            "buttons": [["id": "track", "text": "Takip", "url": "app://track"], ["id": "later", "text": "Sonra"]],
            "data": ["order": 1, "ok": true],
            "ttl": 3600,
            "collapse_id": "order-1",
        ], tags: ["name": "Işıl", "city": "İzmir"]), bearerToken: "JWT")
        #expect(request.method == "POST")
        #expect(request.path == "/3/device/\(Self.token)")
        #expect(request.headers == [
            PushHeader("authorization", "bearer JWT"),
            PushHeader("apns-id", "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10"),
            PushHeader("apns-push-type", "alert"),
            PushHeader("apns-priority", "10"),
            PushHeader("apns-topic", "com.example.app"),
            PushHeader("apns-expiration", "1700003600"),
            PushHeader("apns-collapse-id", "order-1"),
        ])
        #expect(text(request) == #"{"aps":{"alert":{"body":"Siparişin yolda, İzmir","subtitle":"Kargo","title":"Merhaba Işıl"},"badge":3,"category":"ORDER","interruption-level":"time-sensitive","mutable-content":1,"relevance-score":0.5,"sound":"default","thread-id":"orders"},"on":{"actions":[{"id":"track","title":"Takip","url":"app://track"},{"id":"later","title":"Sonra"}],"campaignId":"spring","data":{"ok":true,"order":1},"image":"https://cdn.example.com/a.png","msgId":"MSGID","url":"app://orders/1"}}"#)
    }

    @Test func languageFallbackToAppDefault() throws {
        let request = try APNsRequestFactory.makeRequest(delivery(["contents": ["en": "Hi", "de": "Hallo"]], language: "ja"), bearerToken: "JWT")
        #expect(text(request) == #"{"aps":{"alert":{"body":"Hi"},"mutable-content":1},"on":{"campaignId":"spring","msgId":"MSGID"}}"#)
    }

    @Test func silentPushGolden() throws {
        let request = try APNsRequestFactory.makeRequest(delivery([
            "content_available": true, "ios_sound": "ding.caf", "ios_badge_type": "SetTo", "ios_badge_count": 1,
            "data": ["sync": "inbox"], "priority": "high",
        ]), bearerToken: "JWT")
        #expect(request.header("apns-push-type") == "background")
        #expect(request.header("apns-priority") == "5")
        #expect(request.header("apns-expiration") == nil)
        #expect(text(request) == #"{"aps":{"content-available":1},"on":{"campaignId":"spring","data":{"sync":"inbox"},"msgId":"MSGID"}}"#)
    }

    /// A badge-only push is an alert push without `alert` and without `mutable-content` (no extension runs).
    @Test func badgeOnlyAndSoundOnlyGolden() throws {
        let badge = try APNsRequestFactory.makeRequest(delivery(["ios_badge_type": "SetTo", "ios_badge_count": 0]), bearerToken: "JWT")
        #expect(badge.header("apns-push-type") == "alert")
        #expect(badge.header("apns-priority") == "10")
        #expect(text(badge) == #"{"aps":{"badge":0},"on":{"campaignId":"spring","msgId":"MSGID"}}"#)
        let sound = try APNsRequestFactory.makeRequest(delivery(["ios_sound": "chime.caf", "thread_id": "t"]), bearerToken: "JWT")
        #expect(sound.header("apns-push-type") == "alert")
        #expect(text(sound) == #"{"aps":{"sound":"chime.caf","thread-id":"t"},"on":{"campaignId":"spring","msgId":"MSGID"}}"#)
    }

    @Test func criticalSoundOnlyForCriticalLevel() throws {
        let critical = try APNsRequestFactory.makeRequest(delivery([
            "contents": ["en": "Smoke detected"], "ios_interruption_level": "critical",
            "ios_sound": "alarm.caf", "ios_critical_sound": ["name": "siren.caf", "volume": 0.8],
        ]), bearerToken: "JWT")
        #expect(text(critical) == #"{"aps":{"alert":{"body":"Smoke detected"},"interruption-level":"critical","mutable-content":1,"sound":{"critical":1,"name":"siren.caf","volume":0.8}},"on":{"campaignId":"spring","msgId":"MSGID"}}"#)
        // The same sound settings at another level: ios_sound as a string, the critical dictionary ignored.
        let active = try APNsRequestFactory.makeRequest(delivery([
            "contents": ["en": "x"], "ios_interruption_level": "active",
            "ios_sound": "default", "ios_critical_sound": ["name": "siren.caf", "volume": 0.8],
        ]), bearerToken: "JWT")
        #expect(text(active).contains(#""sound":"default""#))
        // Critical level without a critical sound: ios_sound stays a string.
        let plain = try APNsRequestFactory.makeRequest(delivery(["contents": ["en": "x"], "ios_interruption_level": "critical", "ios_sound": "default"]), bearerToken: "JWT")
        #expect(text(plain).contains(#""sound":"default""#))
    }

    @Test func headersForNormalPriorityTtlZeroAndExpiration() throws {
        var normal = try delivery(["contents": ["en": "x"], "priority": "normal", "ttl": 0])
        var request = try APNsRequestFactory.makeRequest(normal, bearerToken: "JWT")
        #expect(request.header("apns-priority") == "5")
        #expect(request.header("apns-expiration") == "0")
        normal.message.ttl = 600
        normal.expiration = Self.now.addingTimeInterval(120)   // earlier than now + ttl: wins
        request = try APNsRequestFactory.makeRequest(normal, bearerToken: "JWT")
        #expect(request.header("apns-expiration") == "1700000120")
        normal.expiration = Self.now.addingTimeInterval(-5)
        request = try APNsRequestFactory.makeRequest(normal, bearerToken: "JWT")
        #expect(request.header("apns-expiration") == "0")
    }

    @Test func increaseBadgeGoesToTheExtension() throws {
        let request = try APNsRequestFactory.makeRequest(delivery(["contents": ["en": "x"], "ios_badge_type": "Increase", "ios_badge_count": 2]), bearerToken: "JWT")
        #expect(!text(request).contains(#""badge""#))
        #expect(text(request).contains(#""badgeIncrement":2"#))
    }

    @Test func rejectsBadTokensAndCollapseIDs() throws {
        var bad = try delivery(["contents": ["en": "x"]])
        for token in ["", "xyz", String(repeating: "g", count: 64), String(repeating: "a", count: 63), String(repeating: "a", count: 202)] {
            bad.deviceToken = token
            let error = try #require(throws: APNsRequestError.self) { try APNsRequestFactory.makeRequest(bad, bearerToken: "JWT") }
            #expect(error.reason == DeliveryReason.badDeviceTokenFormat)
        }
        // The message model refuses it first (naming the field); the factory still guards values set directly.
        #expect(throws: MessageError.self) {
            try NotificationMessage(json: ["contents": ["en": "x"], "collapse_id": .string(String(repeating: "ç", count: 33))])
        }
        var long = try delivery(["contents": ["en": "x"]])
        long.message.collapseID = String(repeating: "ç", count: 33)
        let error = try #require(throws: APNsRequestError.self) { try APNsRequestFactory.makeRequest(long, bearerToken: "JWT") }
        #expect(error.reason == DeliveryReason.invalidMessage)
        #expect(error.detail.contains("collapse_id"))
        let exactly64 = try delivery(["contents": ["en": "x"], "collapse_id": .string(String(repeating: "ç", count: 32))])
        #expect(try APNsRequestFactory.makeRequest(exactly64, bearerToken: "JWT").header("apns-collapse-id")?.utf8.count == 64)
    }

    // MARK: Size rules (docs/wire-formats.md)

    func shortened(_ body: String, title: String = "T", subtitle: String? = nil) throws -> (payload: [UInt8], body: String, title: String, subtitle: String?) {
        var message: [String: JSONValue] = ["contents": ["en": .string(body)], "headings": ["en": .string(title)]]
        if let subtitle { message["subtitle"] = .string(subtitle) }
        let payload = try APNsRequestFactory.payload(for: delivery(.object(message), language: "en"))
        #expect(payload.count <= 4096)
        let json = try JSONValue(parsing: payload)
        let alert = try #require(json["aps"]?["alert"])
        return (payload, alert["body"]?.stringValue ?? "", alert["title"]?.stringValue ?? "", alert["subtitle"]?.stringValue)
    }

    @Test func cjkBodyIsShortenedToFit() throws {
        let body = String(repeating: "漢字", count: 750)  // 1,500 CJK characters = 4,500 bytes
        let result = try shortened(body)
        #expect(result.body.hasSuffix("…"))
        #expect(body.hasPrefix(String(result.body.dropLast())))
        #expect(result.payload.count > 4096 - 3, "as much text as fits is kept")
        #expect(!String(decoding: result.payload, as: UTF8.self).contains("\\u"))
    }

    @Test func emojiAndZWJSequencesAreCutOnGraphemeBoundaries() throws {
        let family = "👨‍👩‍👧‍👦"  // 25 bytes, one grapheme
        let body = String(repeating: family, count: 200)
        let result = try shortened(body)
        let kept = result.body.dropLast()
        #expect(kept.allSatisfy { $0 == Character(family) })
        #expect(result.body.last == "…")
        let emoji = String(repeating: "😀", count: 1_000)
        let emojiResult = try shortened(emoji)
        #expect(emojiResult.body.dropLast().allSatisfy { $0 == "😀" })
    }

    @Test func combiningAccentAtTheCutStaysWithItsLetter() throws {
        let body = String(repeating: "e\u{301}", count: 3_000)  // é as e + combining acute, 3 bytes each
        let result = try shortened(body)
        #expect(result.body.dropLast().allSatisfy { $0 == "e\u{301}" })
        #expect(result.body.dropLast().unicodeScalars.count % 2 == 0)
    }

    @Test func escapesAreCountedInTheSerializedSize() throws {
        let body = String(repeating: "\"\\\n", count: 1_400)  // each becomes 6 bytes when escaped
        let result = try shortened(body)
        #expect(result.payload.count <= 4096)
        #expect(result.body.hasSuffix("…"))
        #expect(body.hasPrefix(String(result.body.dropLast())))
    }

    @Test func longestFirst() throws {
        // The reported message: a 5,000-character title with a short subtitle and body. Only the title is
        // cut, to exactly what fits.
        let huge = String(repeating: "a", count: 5_000)
        let row = try shortened("Short body", title: huge, subtitle: "Sub")
        #expect(row.body == "Short body" && row.subtitle == "Sub")
        #expect(row.title.hasSuffix("a…") && row.payload.count == 4096)
        // Three long texts are cut to the same line, and the payload is as full as that line allows.
        let big = String(repeating: "a", count: 3_000)
        let first = try shortened(big, title: big, subtitle: big)
        #expect(first.body.hasSuffix("a…") && first.body == first.title && first.title == first.subtitle)
        #expect(first.payload.count > 4096 - 3)
    }

    @Test func payloadThatCannotShrinkIsTooLarge() throws {
        let huge = try delivery(["contents": ["en": "x"], "data": ["blob": .string(String(repeating: "z", count: 5_000))]])
        let error = try #require(throws: APNsRequestError.self) { try APNsRequestFactory.makeRequest(huge, bearerToken: "JWT") }
        #expect(error.reason == DeliveryReason.payloadTooLarge)
        let silent = try delivery(["content_available": true, "data": ["blob": .string(String(repeating: "z", count: 5_000))]])
        #expect(throws: APNsRequestError.self) { try APNsRequestFactory.makeRequest(silent, bearerToken: "JWT") }
    }

    @Test func exactlyAtTheLimitIsNotShortened() throws {
        let base = try APNsRequestFactory.payload(for: delivery(["contents": ["en": "a"], "headings": ["en": "T"]], language: "en"))
        let room = 4096 - base.count + 1
        let body = String(repeating: "b", count: room)
        let result = try shortened(body)
        #expect(result.payload.count == 4096)
        #expect(result.body == body)
    }
}

