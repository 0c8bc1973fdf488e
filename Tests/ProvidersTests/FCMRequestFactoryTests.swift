import Foundation
import Testing
import DeliveryCore
@testable import Providers

@Suite struct FCMRequestFactoryTests {
    static let token = "fcm-token:APA91b_x"
    static let now = Date(timeIntervalSince1970: 1_700_000_000.5)

    func delivery(_ message: JSONValue, language: String? = "tr-TR", tags: [String: JSONValue] = [:]) throws -> FCMDelivery {
        FCMDelivery(registrationToken: Self.token, projectID: "pushizo-test", message: try NotificationMessage(json: message),
                    subscriberLanguage: language, appDefaultLanguage: "en",
                    placeholderValues: PlaceholderValues(tags: tags, language: language, country: "TR"),
                    msgID: "MSGID", campaignID: "spring", now: Self.now)
    }

    func text(_ request: PushRequest) -> String { String(decoding: request.body, as: UTF8.self) }

    /// The `data` map as a device receives it, parsed back from the request body.
    func sentData(_ request: PushRequest) throws -> [String: String] {
        let json = try JSONValue(parsing: request.body)
        let data = try #require(json["message"]?["data"]?.objectValue)
        return try data.mapValues { try #require($0.stringValue, "every FCM data value is a string") }
    }

    @Test func visibleMessageGolden() throws {
        let request = try FCMRequestFactory.makeRequest(delivery([
            "headings": ["en": "Hello {{ name }}", "tr": "Merhaba {{ name | default: \"dostum\" }}"],
            "contents": ["en": "Your order shipped", "tr": "Siparişin yolda, {{ city }}"],
            "subtitle": ["tr": "Kargo"],
            "ios_sound": "default",
            "url": "app://orders/1",
            "image": "https://cdn.example.com/a.png",
            "buttons": [["id": "track", "text": "Takip", "url": "app://track"], ["id": "later", "text": "Sonra"]],
            "data": ["order": 1, "ok": true],
            "ttl": 3600,
            "collapse_id": "order-1",
            "android_channel_id": "orders",
            "android_sound": "ding",
        ], tags: ["name": "Işıl", "city": "İzmir"]), accessToken: "ya29.TOKEN")
        #expect(request.method == "POST")
        #expect(request.path == "/v1/projects/pushizo-test/messages:send")
        #expect(request.headers == [
            PushHeader("authorization", "Bearer ya29.TOKEN"),
            PushHeader("content-type", "application/json; charset=UTF-8"),
        ])
        #expect(text(request) == #"{"message":{"android":{"collapse_key":"order-1","priority":"HIGH","ttl":"3600s"},"data":{"on.actions":"[{\"id\":\"track\",\"title\":\"Takip\",\"url\":\"app://track\"},{\"id\":\"later\",\"title\":\"Sonra\"}]","on.androidChannelId":"orders","on.androidSound":"ding","on.body":"Siparişin yolda, İzmir","on.campaignId":"spring","on.d.ok":"true","on.d.order":"1","on.image":"https://cdn.example.com/a.png","on.msgId":"MSGID","on.subtitle":"Kargo","on.title":"Merhaba Işıl","on.url":"app://orders/1"},"token":"fcm-token:APA91b_x"}}"#)
        #expect(!text(request).contains(#""notification""#), "data-only: the SDK draws every notification")
    }

    /// `fcm_analytics_label` -> `message.fcm_options.analytics_label` (FCM HTTP v1 `FcmOptions`, pattern
    /// `^[a-zA-Z0-9-_.~%]{1,50}$`), `android_direct_boot_ok` -> `message.android.direct_boot_ok`
    /// (`AndroidConfig`), `collapse_id` -> `message.android.collapse_key`.
    @Test func passThroughOptionsGolden() throws {
        let request = try FCMRequestFactory.makeRequest(delivery([
            "contents": "hi", "collapse_id": "scores", "fcm_analytics_label": "spring-sale_2026.v1~%20",
            "android_direct_boot_ok": true,
        ]), accessToken: "T")
        #expect(text(request) == #"{"message":{"android":{"collapse_key":"scores","direct_boot_ok":true,"priority":"HIGH"},"data":{"on.body":"hi","on.campaignId":"spring","on.msgId":"MSGID"},"fcm_options":{"analytics_label":"spring-sale_2026.v1~%20"},"token":"fcm-token:APA91b_x"}}"#)
        let off = try FCMRequestFactory.makeRequest(delivery(["contents": "hi", "android_direct_boot_ok": false]), accessToken: "T")
        #expect(text(off).contains(#""android":{"direct_boot_ok":false,"priority":"HIGH"}"#))
        #expect(!text(off).contains("fcm_options"))
    }

    /// A label off Firebase's pattern fails the message (the notification) naming the field; one set in code
    /// past the parser fails the delivery as `invalid_message`, before any request.
    @Test func badAnalyticsLabelsAreRefused() throws {
        for label: JSONValue in ["", .string(String(repeating: "a", count: 51)), "has space", "ünï", "a/b", "a+b", 5] {
            #expect(throws: MessageError.self, "\(label)") { try delivery(["contents": "hi", "fcm_analytics_label": label]) }
        }
        #expect(try delivery(["contents": "hi", "fcm_analytics_label": .string(String(repeating: "a", count: 50))]).message.fcmAnalyticsLabel?.count == 50)
        #expect(throws: MessageError.self) { try delivery(["contents": "hi", "android_direct_boot_ok": "yes"]) }
        var coded = try delivery(["contents": "hi"])
        coded.message.fcmAnalyticsLabel = "no spaces"
        #expect(throws: FCMRequestError(reason: .invalidMessage, detail: "`fcm_analytics_label`: must match Firebase's pattern ^[a-zA-Z0-9-_.~%]{1,50}$")) {
            try FCMRequestFactory.makeRequest(coded, accessToken: "T")
        }
    }

    @Test func silentPushGolden() throws {
        let request = try FCMRequestFactory.makeRequest(delivery([
            "content_available": true, "android_sound": "ding", "android_channel_id": "orders",
            "headings": ["en": "ignored"], "data": ["sync": "inbox"],
        ]), accessToken: "T")
        #expect(text(request) == #"{"message":{"android":{"priority":"NORMAL"},"data":{"on.campaignId":"spring","on.d.sync":"inbox","on.msgId":"MSGID","on.silent":"true"},"token":"fcm-token:APA91b_x"}}"#)
        // A producer that insists on high priority for a silent push gets it.
        let high = try FCMRequestFactory.makeRequest(delivery(["content_available": true, "priority": "high"]), accessToken: "T")
        #expect(text(high).contains(#""priority":"HIGH""#))
    }

    @Test func contentAvailableFalseLeavesTheSilentFlagOut() throws {
        let request = try FCMRequestFactory.makeRequest(delivery(["contents": ["en": "x"], "content_available": false]), accessToken: "T")
        let data = try sentData(request)
        #expect(data[FCMDataLayout.silent] == nil)
        #expect(!text(request).contains("silent"))
        #expect(data[FCMDataLayout.body] == "x")
    }

    @Test func appDataBecomesStrings() throws {
        let request = try FCMRequestFactory.makeRequest(delivery([
            "contents": ["en": "x"],
            "data": ["count": 1, "ok": true, "nested": ["a": [1]], "ratio": 0.5, "name": "Ayşe", "gone": nil, "path": "a/b"],
        ]), accessToken: "T")
        let data = try sentData(request)
        #expect(data["on.d.count"] == "1")
        #expect(data["on.d.ok"] == "true")
        #expect(data["on.d.nested"] == #"{"a":[1]}"#)
        #expect(data["on.d.ratio"] == "0.5")
        #expect(data["on.d.name"] == "Ayşe")
        #expect(data["on.d.path"] == "a/b")
        #expect(data["on.d.gone"] == nil, "null has no string form: the key is left out")
    }

    @Test func appKeysNeverCollideWithNormalizedOrReservedKeys() throws {
        let hostileKeys = ["title", "body", "msgId", "on.title", "on.msgId", "d.x", "on.d.x", "from", "google.x",
                           "google", "gcm.n.e", "gcm", "collapse_key", "message_type", "notification", ""]
        var appData: [String: JSONValue] = [:]
        for key in hostileKeys { appData[key] = .string("app:\(key)") }
        let request = try FCMRequestFactory.makeRequest(delivery([
            "headings": ["en": "Real title"], "contents": ["en": "Real body"], "data": .object(appData),
        ], language: "en"), accessToken: "T")
        let data = try sentData(request)
        #expect(data[FCMDataLayout.title] == "Real title")
        #expect(data[FCMDataLayout.body] == "Real body")
        #expect(data[FCMDataLayout.msgID] == "MSGID")
        for key in hostileKeys { #expect(data[FCMDataLayout.appKey(key)] == "app:\(key)", "app key \(key)") }
        #expect(data.count == hostileKeys.count + 4)  // + msgId, campaignId, title, body
        let reserved: Set = ["from", "collapse_key", "message_type", "notification"]
        for key in data.keys {
            #expect(key.hasPrefix("on."))
            #expect(!reserved.contains(key) && !key.hasPrefix("google") && !key.hasPrefix("gcm"), "reserved key \(key)")
        }
    }

    @Test func turkishLanguageTagsAndPlaceholders() throws {
        let message: JSONValue = [
            "headings": ["en": "Hi {{ name }}", "tr": "Selam {{ name }}", "tİ": "wrong"],
            "contents": ["TR_tr": "{{ şehir | default: \"İstanbul\" }} için indirim, {{ İsim }}"],
        ]
        let request = try FCMRequestFactory.makeRequest(delivery(message, language: "TR-tr", tags: ["name": "ılgın İNCİ"]), accessToken: "T")
        let data = try sentData(request)
        #expect(data[FCMDataLayout.title] == "Selam ılgın İNCİ")
        // Names may hold non-ASCII letters (tag keys are any text); missing ones take their default.
        #expect(data[FCMDataLayout.body] == "İstanbul için indirim, ")
        // `tİ` is not `ti`: a subscriber asking for `ti` gets the app default (en).
        let other = try sentData(FCMRequestFactory.makeRequest(delivery(message, language: "ti"), accessToken: "T"))
        #expect(other[FCMDataLayout.title] == "Hi ")
        #expect(!text(try FCMRequestFactory.makeRequest(delivery(message), accessToken: "T")).contains("\\u"))
    }

    @Test func priorityAndTTL() throws {
        var d = try delivery(["contents": ["en": "x"]])
        var request = try FCMRequestFactory.makeRequest(d, accessToken: "T")
        #expect(text(request).contains(#""android":{"priority":"HIGH"}"#), "no ttl when neither ttl nor expiration is set")
        d.message.priority = .normal
        d.message.ttl = 0
        request = try FCMRequestFactory.makeRequest(d, accessToken: "T")
        #expect(text(request).contains(#""android":{"priority":"NORMAL","ttl":"0s"}"#))
        d.message.ttl = 600
        d.expiration = Self.now.addingTimeInterval(120.9)
        #expect(text(try FCMRequestFactory.makeRequest(d, accessToken: "T")).contains(#""ttl":"120s""#))
        d.expiration = Self.now.addingTimeInterval(-5)
        #expect(text(try FCMRequestFactory.makeRequest(d, accessToken: "T")).contains(#""ttl":"0s""#))
        d.expiration = nil
        for ttl in [Int.max, 2_419_201] {
            d.message.ttl = ttl
            #expect(text(try FCMRequestFactory.makeRequest(d, accessToken: "T")).contains(#""ttl":"2419200s""#))
        }
        d.message.ttl = Int.min
        #expect(text(try FCMRequestFactory.makeRequest(d, accessToken: "T")).contains(#""ttl":"0s""#))
        d.message.ttl = 60
        d.expiration = Date(timeIntervalSince1970: .nan)
        #expect(text(try FCMRequestFactory.makeRequest(d, accessToken: "T")).contains(#""ttl":"0s""#))
    }

    @Test func refusesBadTokensProjectIDsAndAccessTokens() throws {
        var d = try delivery(["contents": ["en": "x"]])
        for token in ["", "has space", "tab\there", "ünicode", String(repeating: "a", count: 4097)] {
            d.registrationToken = token
            let error = try #require(throws: FCMRequestError.self) { try FCMRequestFactory.makeRequest(d, accessToken: "T") }
            #expect(error.reason == DeliveryReason.badDeviceTokenFormat)
        }
        d.registrationToken = Self.token
        d.projectID = ""
        #expect(throws: FCMRequestError(reason: .missingProjectID, detail: "the FCM channel has no project_id")) {
            try FCMRequestFactory.makeRequest(d, accessToken: "T")
        }
        for project in ["a/b", "a?b", "a b", "a%2F", "proj\r\n"] {
            d.projectID = project
            let error = try #require(throws: FCMRequestError.self) { try FCMRequestFactory.makeRequest(d, accessToken: "T") }
            #expect(error.reason == DeliveryReason.invalidProjectID)
        }
        d.projectID = "example.com:legacy-project_1"
        #expect(try FCMRequestFactory.makeRequest(d, accessToken: "T").path == "/v1/projects/example.com:legacy-project_1/messages:send")
        for secret in ["", "ya29.secret\r\nx-evil: 1", "ya29 secret"] {
            let error = try #require(throws: FCMRequestError.self) { try FCMRequestFactory.makeRequest(d, accessToken: secret) }
            #expect(error.reason == DeliveryReason.invalidAccessToken)
            #expect(!error.description.contains("secret"))
        }
    }

    // MARK: Size rules (docs/wire-formats.md)

    func shortened(_ body: String, title: String = "T", subtitle: String? = nil, data: JSONValue? = nil) throws -> [String: String] {
        var message: [String: JSONValue] = ["contents": ["en": .string(body)], "headings": ["en": .string(title)]]
        if let subtitle { message["subtitle"] = .string(subtitle) }
        if let data { message["data"] = data }
        let request = try FCMRequestFactory.makeRequest(delivery(.object(message), language: "en"), accessToken: "T")
        let sent = try sentData(request)
        #expect(sent == (try FCMRequestFactory.data(for: delivery(.object(message), language: "en"))))
        #expect(FCMRequestFactory.payloadSize(of: sent) <= FCMRequestFactory.maximumPayloadSize)
        let wire = text(request)
        #expect(!wire.contains("\\u") && !wire.contains("\\/"))
        return sent
    }

    /// `kept` (without its `…`) is a prefix of `original` and one more character would not have fitted.
    func expectMaximal(_ data: [String: String], key: String, original: String) {
        guard let value = data[key], value.hasSuffix("…") else {
            Issue.record("\(key) was not shortened")
            return
        }
        let kept = value.dropLast()
        #expect(original.hasPrefix(String(kept)))
        let next = original[original.index(original.startIndex, offsetBy: kept.count)]
        var longer = data
        longer[key] = String(kept) + String(next) + "…"
        #expect(FCMRequestFactory.payloadSize(of: longer) > FCMRequestFactory.maximumPayloadSize, "as much text as fits is kept")
    }

    @Test func cjkBodyIsShortenedToFit() throws {
        let body = String(repeating: "漢字", count: 750)  // 1,500 CJK characters = 4,500 bytes
        let data = try shortened(body)
        expectMaximal(data, key: FCMDataLayout.body, original: body)
        #expect(data[FCMDataLayout.title] == "T")
    }

    @Test func emojiAndZWJSequencesAreCutOnGraphemeBoundaries() throws {
        let emoji = String(repeating: "😀", count: 1_000)
        let data = try shortened(emoji)
        expectMaximal(data, key: FCMDataLayout.body, original: emoji)
        let family = "👨‍👩‍👧‍👦"  // 25 bytes, one grapheme
        let families = String(repeating: family, count: 200)
        let cut = try shortened(families)
        #expect(cut[FCMDataLayout.body]?.dropLast().allSatisfy { $0 == Character(family) } == true)
        expectMaximal(cut, key: FCMDataLayout.body, original: families)
    }

    @Test func combiningAccentAtTheCutStaysWithItsLetter() throws {
        let body = String(repeating: "e\u{301}", count: 2_000)
        let data = try shortened(body)
        let kept = try #require(data[FCMDataLayout.body]?.dropLast())
        #expect(kept.allSatisfy { $0 == "e\u{301}" })
        #expect(kept.unicodeScalars.count % 2 == 0, "no accent separated from its letter")
        expectMaximal(data, key: FCMDataLayout.body, original: body)
    }

    @Test func quotesBackslashesAndNewlinesNearTheLimit() throws {
        // FCM measures the strings, not their JSON escapes: 1,350 x 3 = 4,050 bytes does not fit...
        let body = String(repeating: "\"\\\n", count: 1_350)
        let data = try shortened(body)
        expectMaximal(data, key: FCMDataLayout.body, original: body)
        // ...while a body that fits unescaped is sent whole, escapes and all, and parses back exactly.
        let base = try shortened("a", title: "T")
        let room = FCMRequestFactory.maximumPayloadSize - FCMRequestFactory.payloadSize(of: base) + 1
        let exact = String(repeating: "\"\\\n", count: room / 3) + String(repeating: "\"", count: room % 3)
        let whole = try shortened(exact)
        #expect(whole[FCMDataLayout.body] == exact)
        #expect(FCMRequestFactory.payloadSize(of: whole) == FCMRequestFactory.maximumPayloadSize)
    }

    @Test func longestFirst() throws {
        // A 5,000-character title beside a short subtitle and body: only the title is cut.
        let huge = String(repeating: "a", count: 5_000)
        let row = try shortened("Short body", title: huge, subtitle: "Sub")
        #expect(row[FCMDataLayout.body] == "Short body")
        #expect(row[FCMDataLayout.subtitle] == "Sub")
        expectMaximal(row, key: FCMDataLayout.title, original: huge)
        // Three long texts are cut to the same line.
        let big = String(repeating: "a", count: 3_000)
        let first = try shortened(big, title: big, subtitle: big)
        let lengths = [FCMDataLayout.title, FCMDataLayout.subtitle, FCMDataLayout.body].map { first[$0]?.count ?? 0 }
        #expect(Set(lengths).count == 1 && first[FCMDataLayout.body]?.hasSuffix("a…") == true, "\(lengths)")
        #expect(FCMRequestFactory.payloadSize(of: first) > FCMRequestFactory.maximumPayloadSize - 3)
        // A text under the line keeps every character while the two longer ones share the rest.
        let medium = String(repeating: "m", count: 600)
        let second = try shortened(medium, title: huge, subtitle: big)
        #expect(second[FCMDataLayout.body] == medium)
        #expect(second[FCMDataLayout.title]?.count == second[FCMDataLayout.subtitle]?.count)
        #expect(second[FCMDataLayout.title]?.hasSuffix("a…") == true)
    }

    @Test func dataThatCannotShrinkIsTooLarge() throws {
        let blob: JSONValue = ["blob": .string(String(repeating: "z", count: 4_100))]
        let visible = try delivery(["contents": ["en": "x"], "data": blob])
        let error = try #require(throws: FCMRequestError.self) { try FCMRequestFactory.makeRequest(visible, accessToken: "T") }
        #expect(error.reason == DeliveryReason.payloadTooLarge)
        #expect(error.outcome == .failed(reason: .payloadTooLarge, detail: ["message": .string(error.detail)]))
        let silent = try delivery(["content_available": true, "data": blob])
        #expect(throws: FCMRequestError.self) { try FCMRequestFactory.makeRequest(silent, accessToken: "T") }
    }

    @Test func sizeCountsKeysValuesAndOverheads() {
        #expect(FCMRequestFactory.payloadSize(of: [:]) == 64)
        #expect(FCMRequestFactory.payloadSize(of: ["on.msgId": "M", "ş": "漢"]) == 64 + (8 + 1 + 6) + (2 + 3 + 6))
    }
}
