import Foundation
import Testing
import DeliveryCore
@testable import Providers

@Suite struct WebPushRequestFactoryTests {
    static let endpoint = "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk-Z_9?x=1&y=%2F#frag"
    static let now = Date(timeIntervalSince1970: 1_700_000_000.5)

    func delivery(_ message: JSONValue, language: String? = "tr-TR", tags: [String: JSONValue] = [:],
                  endpoint: String = endpoint) throws -> WebPushDelivery
    {
        WebPushDelivery(endpoint: endpoint, message: try NotificationMessage(json: message), subscriberLanguage: language,
                        appDefaultLanguage: "en", placeholderValues: PlaceholderValues(tags: tags, language: language, country: "TR"),
                        msgID: "MSGID", campaignID: "spring", now: Self.now)
    }

    func text(_ request: PushRequest) -> String { String(decoding: request.body, as: UTF8.self) }

    @Test func visibleMessageGolden() throws {
        let request = try WebPushRequestFactory.makePlaintextRequest(delivery([
            "headings": ["en": "Hello {{ name }}", "tr": "Merhaba {{ name | default: \"dostum\" }}"],
            "contents": ["en": "Your order shipped", "tr": "Siparişin yolda, {{ city }}"],
            "subtitle": ["tr": "Kargo"],
            "url": "https://shop.example.com/orders/1",
            "image": "https://cdn.example.com/a.png",
            "buttons": [["id": "track", "text": "Takip", "url": "app://track"], ["id": "later", "text": "Sonra"]],
            "data": ["order": 1, "ok": true, "nested": ["a": [1]]],
            "ttl": 3600,
            "collapse_id": "order-1",
            "android_sound": "ding",
        ], tags: ["name": "Işıl", "city": "İzmir"]))
        #expect(request.method == "POST")
        #expect(request.path == "/wpush/v2/gAAAAABk-Z_9?x=1&y=%2F")
        #expect(request.headers == [
            PushHeader("ttl", "3600"),
            PushHeader("urgency", "normal"),
            PushHeader("topic", "order-1"),
            PushHeader("content-type", "application/json"),
        ])
        #expect(request.header("authorization") == nil, "VAPID is added by the sender")
        #expect(text(request) == #"{"actions":[{"id":"track","title":"Takip","url":"app://track"},{"id":"later","title":"Sonra"}],"body":"Siparişin yolda, İzmir","campaignId":"spring","data":{"nested":"{\"a\":[1]}","ok":"true","order":"1"},"image":"https://cdn.example.com/a.png","msgId":"MSGID","title":"Merhaba Işıl","url":"https://shop.example.com/orders/1"}"#)
    }

    @Test func silentPushIsSkippedNotSent() throws {
        // Browsers require a visible notification per push; Safari revokes a subscription after silent ones.
        let error = try #require(throws: WebPushRequestError.self) {
            try WebPushRequestFactory.makePlaintextRequest(delivery([
                "content_available": true, "priority": "high", "headings": ["en": "ignored"], "data": ["sync": "inbox"],
            ]))
        }
        #expect(error.reason == DeliveryReason.silentPushUnsupported && error.skips)
        guard case .skipped(.silentPushUnsupported, _) = error.outcome else {
            Issue.record("a silent web push is skipped, not failed: \(error.outcome)")
            return
        }
        #expect(throws: WebPushRequestFactory.silentPushUnsupported) {
            try WebPushRequestFactory.plaintext(for: delivery(["content_available": true, "data": ["sync": "inbox"]]))
        }
    }

    @Test func contentAvailableFalseLeavesTheSilentFlagOut() throws {
        let request = try WebPushRequestFactory.makePlaintextRequest(delivery(["contents": ["en": "x"], "content_available": false]))
        #expect(text(request) == #"{"body":"x","campaignId":"spring","msgId":"MSGID"}"#)
    }

    @Test func ttlAndExpiration() throws {
        var d = try delivery(["contents": ["en": "x"], "ttl": 0])
        #expect(try WebPushRequestFactory.makePlaintextRequest(d).header("ttl") == "0")
        d.message.ttl = 600
        d.expiration = Self.now.addingTimeInterval(120)
        #expect(try WebPushRequestFactory.makePlaintextRequest(d).header("ttl") == "120")
        d.expiration = .distantPast
        #expect(try WebPushRequestFactory.makePlaintextRequest(d).header("ttl") == "0")
        d.expiration = nil
        d.message.ttl = .max
        #expect(try WebPushRequestFactory.makePlaintextRequest(d).header("ttl") == "2419200")
    }

    @Test func topicFromCollapseID() {
        #expect(WebPushRequestFactory.topic(for: "order-1_Ab") == "order-1_Ab")
        #expect(WebPushRequestFactory.topic(for: String(repeating: "a", count: 32)) == String(repeating: "a", count: 32))
        #expect(WebPushRequestFactory.topic(for: "") == nil)
        // Not the base64url alphabet, or too long: base64url(SHA-256)[..<32] (vectors from Python's hashlib).
        #expect(WebPushRequestFactory.topic(for: "order:1") == "yL1ph0KHvexxz8qfcCC9iBxI2oZLnnHh")
        #expect(WebPushRequestFactory.topic(for: "ÇİĞ-ı") == "NjZclHhV9HoG2hIbL-DVpkupdCcioToY")
        #expect(WebPushRequestFactory.topic(for: String(repeating: "a", count: 33)) == "hSeFyAXHfnGiI0ClTp2Vkz7UkSHn0r88")
    }

    @Test func endpoints() throws {
        let parsed = try WebPushEndpoint(parsing: "https://Push.Example.com:8443/p?q=1")
        #expect(parsed.host == "push.example.com")
        #expect(parsed.port == 8443)
        #expect(parsed.path == "/p?q=1")
        #expect(parsed.origin == "https://push.example.com:8443")
        let bare = try WebPushEndpoint(parsing: "https://web.push.apple.com")
        #expect(bare.path == "/")
        #expect(bare.origin == "https://web.push.apple.com")
        for bad in ["http://push.example.com/secret", "https:///secret", "push.example.com/secret", "", "https://user:pw@push.example.com/secret",
                    "ftp://push.example.com/secret"]
        {
            let error = try #require(throws: WebPushRequestError.self) {
                try WebPushRequestFactory.makePlaintextRequest(delivery(["contents": ["en": "x"]], endpoint: bad))
            }
            #expect(error.reason == DeliveryReason.invalidEndpoint, "\(bad)")
            #expect(!error.detail.contains("secret"), "the endpoint is a capability and is never echoed")
        }
        // Foundation may percent-encode a space or control character instead of refusing it; either way
        // nothing but visible ASCII reaches `:path`.
        for odd in ["https://push.example.com/se cret", "https://push.example.com/a\r\nb", "https://push.example.com/ş"] {
            do {
                let path = try WebPushEndpoint(parsing: odd).path
                #expect(HTTPFieldValue.isVisibleASCII(path) && path.hasPrefix("/"), "\(path)")
            } catch {
                #expect(error.reason == DeliveryReason.invalidEndpoint)
            }
        }
    }

    // MARK: Size rules (docs/wire-formats.md)

    func shortened(_ body: String, title: String = "T", data: JSONValue? = nil) throws -> (bytes: [UInt8], title: String?, body: String?) {
        var message: [String: JSONValue] = ["contents": ["en": .string(body)], "headings": ["en": .string(title)],
                                            "subtitle": ["en": "never carried"]]
        if let data { message["data"] = data }
        let bytes = try WebPushRequestFactory.makePlaintextRequest(delivery(.object(message), language: "en")).body
        #expect(bytes.count <= WebPushRequestFactory.maximumPlaintextSize)
        let wire = String(decoding: bytes, as: UTF8.self)
        #expect(!wire.contains("\\u") && !wire.contains("\\/") && !wire.contains("never carried"))
        let json = try JSONValue(parsing: bytes)
        return (bytes, json["title"]?.stringValue, json["body"]?.stringValue)
    }

    /// The shortened text is a prefix plus `…`, and one more character would not have fitted.
    func expectMaximal(_ result: (bytes: [UInt8], title: String?, body: String?), original: String, field: String = "body") throws {
        let value = try #require(field == "body" ? result.body : result.title)
        #expect(value.hasSuffix("…"))
        let kept = value.dropLast()
        #expect(original.hasPrefix(String(kept)))
        let next = original[original.index(original.startIndex, offsetBy: kept.count)]
        var json = try #require(try JSONValue(parsing: result.bytes).objectValue)
        json[field] = .string(String(kept) + String(next) + "…")
        #expect(JSONValue.object(json).serialized().count > WebPushRequestFactory.maximumPlaintextSize, "as much text as fits is kept")
    }

    @Test func plaintextLimitLeavesRoomForAES128GCM() {
        #expect(WebPushRequestFactory.maximumPlaintextSize == 3993)
        #expect(WebPushRequestFactory.maximumPlaintextSize + 21 + 65 + 16 + 1 == 4096)
    }

    @Test func cjkBodyIsShortenedToFit() throws {
        let body = String(repeating: "漢字", count: 750)
        try expectMaximal(shortened(body), original: body)
    }

    @Test func emojiZWJAndCombiningAccentsAtTheCut() throws {
        let emoji = String(repeating: "😀", count: 1_000)
        try expectMaximal(shortened(emoji), original: emoji)
        let family = "👨‍👩‍👧‍👦"
        let families = String(repeating: family, count: 200)
        let cut = try shortened(families)
        #expect(cut.body?.dropLast().allSatisfy { $0 == Character(family) } == true)
        try expectMaximal(cut, original: families)
        let accents = String(repeating: "e\u{301}", count: 2_000)
        let accented = try shortened(accents)
        #expect(accented.body?.dropLast().allSatisfy { $0 == "e\u{301}" } == true)
        try expectMaximal(accented, original: accents)
    }

    @Test func escapesAreCountedInTheSerializedSize() throws {
        let body = String(repeating: "\"\\\n", count: 1_000)  // 3,000 bytes, 6,000 once escaped
        let result = try shortened(body)
        try expectMaximal(result, original: body)
        #expect(result.bytes.count > WebPushRequestFactory.maximumPlaintextSize - 6)
    }

    @Test func longestFirst() throws {
        // An oversized title beside a short body: only the title is cut, as much as fits.
        let huge = String(repeating: "b", count: 5_000)
        let row = try shortened("Short body", title: huge)
        #expect(row.body == "Short body")
        try expectMaximal(row, original: huge, field: "title")
        // Two oversized texts are cut to the same line.
        let both = try shortened(huge, title: huge)
        #expect(both.body?.hasSuffix("b…") == true && both.title?.hasSuffix("b…") == true)
        #expect(abs((both.body?.count ?? 0) - (both.title?.count ?? 0)) <= 1)
        #expect(both.bytes.count > WebPushRequestFactory.maximumPlaintextSize - 2)
    }

    @Test func dataThatCannotShrinkIsTooLarge() throws {
        let blob: JSONValue = ["blob": .string(String(repeating: "z", count: 4_000))]
        let error = try #require(throws: WebPushRequestError.self) {
            try WebPushRequestFactory.makePlaintextRequest(delivery(["contents": ["en": "x"], "data": blob]))
        }
        #expect(error.reason == DeliveryReason.payloadTooLarge)
        // A silent push is skipped before its size matters.
        let silent = try #require(throws: WebPushRequestError.self) {
            try WebPushRequestFactory.makePlaintextRequest(delivery(["content_available": true, "data": blob]))
        }
        #expect(silent.reason == DeliveryReason.silentPushUnsupported)
    }
}
