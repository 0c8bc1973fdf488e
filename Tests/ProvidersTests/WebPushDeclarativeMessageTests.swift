import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// The Declarative Web Push form (WebKit, "Meet Declarative Web Push"): which subscriptions get it, its members,
/// and the messages that cannot make one.
@Suite struct WebPushDeclarativeMessageTests {
    static let apple = "https://web.push.apple.com/QGuQyavXutnMH-xhUsQxt0vS2uGXSTrwF0Vw-u0pC0g"
    static let mozilla = "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk"
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let message: JSONValue = [
        "headings": ["en": "Hello", "tr": "Merhaba {{ name }}", "ar": "مرحبا"],
        "contents": ["en": "Your order shipped", "tr": "Siparişin yolda", "ar": "تم شحن طلبك"],
        "url": "https://shop.example.com/orders/1",
        "image": "https://cdn.example.com/a.png",
        "data": ["order": 1],
        "ios_badge_type": "SetTo", "ios_badge_count": 3,
        "web_silent": true,
    ]

    func delivery(
        _ message: JSONValue = message, endpoint: String = apple, language: String? = "tr-TR",
        policy: WebPushDeclarativePolicy = .applePushService
    ) throws -> WebPushDelivery {
        WebPushDelivery(
            endpoint: endpoint, message: try NotificationMessage(json: message), subscriberLanguage: language,
            appDefaultLanguage: "en", placeholderValues: PlaceholderValues(tags: ["name": "Işıl"], language: language, country: "TR"),
            msgID: "MSGID", campaignID: "spring", now: Self.now, declarative: policy)
    }

    func body(_ delivery: WebPushDelivery) throws -> String {
        String(decoding: try WebPushRequestFactory.plaintext(for: delivery), as: UTF8.self)
    }

    @Test func appleEndpointGetsTheDeclarativeFormByDefault() throws {
        #expect(try body(delivery()) == #"{"notification":{"app_badge":3,"body":"Siparişin yolda","data":{"campaignId":"spring","data":{"order":"1"},"image":"https://cdn.example.com/a.png","msgId":"MSGID","url":"https://shop.example.com/orders/1"},"lang":"tr","mutable":true,"navigate":"https://shop.example.com/orders/1","silent":true,"title":"Merhaba Işıl"},"web_push":8030}"#)
    }

    @Test func otherPushServicesKeepTheFlatMessageUnlessTheChannelAsks() throws {
        let flat = try body(delivery(endpoint: Self.mozilla))
        #expect(flat.hasPrefix(#"{"body":"Siparişin yolda","campaignId":"spring""#))
        #expect(!flat.contains("web_push"))
        #expect(try body(delivery(endpoint: Self.mozilla, policy: .always)).contains(#""web_push":8030"#))
        #expect(!(try body(delivery(policy: .never))).contains("web_push"))
    }

    @Test func langIsTheLanguageReadAndDirFollowsItsScript() throws {
        let arabic = try JSONValue(parsing: try WebPushRequestFactory.plaintext(for: delivery(language: "ar-EG")))
        #expect(arabic["notification"]?["lang"] == "ar")
        #expect(arabic["notification"]?["dir"] == "rtl")
        #expect(arabic["notification"]?["title"] == "مرحبا")
        // A subscriber whose language the message lacks reads the app's default, and `lang` says so.
        let german = try JSONValue(parsing: try WebPushRequestFactory.plaintext(for: delivery(language: "de")))
        #expect(german["notification"]?["lang"] == "en")
        #expect(german["notification"]?["dir"] == nil)
        // The map's key is sent in its canonical BCP 47 form.
        let brazilian = try JSONValue(parsing: try WebPushRequestFactory.plaintext(for: delivery(
            ["headings": ["pt_BR": "Olá"], "contents": ["pt_BR": "Tudo bem"], "url": "https://a.example/"], language: "pt-BR")))
        #expect(brazilian["notification"]?["lang"] == "pt-BR")
        // A plain-string text has no language (`und`): no `lang`.
        let plain = try JSONValue(parsing: try WebPushRequestFactory.plaintext(for: delivery([
            "headings": "Hi", "contents": "Body", "url": "https://a.example/",
        ])))
        #expect(plain["notification"]?["lang"] == nil)
        #expect(plain["notification"]?["app_badge"] == nil && plain["notification"]?["silent"] == nil)
    }

    @Test func aMessageThatCannotBeDeclarativeFallsBackUnderTheAppleDefault() throws {
        for message: JSONValue in [
            ["headings": ["en": "Hi"], "contents": ["en": "No url"]],
            ["headings": ["en": "Hi"], "contents": ["en": "Relative"], "url": "/orders/1"],
            ["headings": ["en": "Hi"], "contents": ["en": "App scheme"], "url": "app://orders/1"],
            ["contents": ["en": "No title"], "url": "https://a.example/"],
        ] {
            let text = try body(delivery(message))
            #expect(!text.contains("web_push"), "\(message)")
            #expect(text.contains(#""msgId":"MSGID""#))
        }
    }

    @Test func aMessageThatCannotBeDeclarativeFailsWhenTheChannelDemandsTheForm() throws {
        let cases: [(JSONValue, String)] = [
            (["headings": ["en": "Hi"], "contents": ["en": "No url"]], "needs `url`"),
            (["headings": ["en": "Hi"], "contents": ["en": "x"], "url": "/orders/1"], "absolute http or https URL"),
            (["headings": ["en": "Hi"], "contents": ["en": "x"], "url": "javascript:alert(1)"], "absolute http or https URL"),
            (["contents": ["en": "No title"], "url": "https://a.example/"], "needs a title"),
        ]
        for (message, words) in cases {
            let error = try #require(throws: WebPushRequestError.self) {
                try WebPushRequestFactory.plaintext(for: delivery(message, endpoint: Self.mozilla, policy: .always))
            }
            #expect(error.reason == .invalidMessage && !error.skips)
            #expect(error.detail.contains(words), "\(error.detail)")
        }
        // A silent push is still a skip, not a declarative failure.
        let silent = try #require(throws: WebPushRequestError.self) {
            try WebPushRequestFactory.plaintext(for: delivery(["content_available": true], policy: .always))
        }
        #expect(silent.skips)
    }

    @Test func longTextsAreShortenedToFitTheEncryptedLimit() throws {
        let long = String(repeating: "ş", count: 2500)
        let bytes = try WebPushRequestFactory.plaintext(for: delivery([
            "headings": ["tr": .string(long)], "contents": ["tr": .string(long)], "url": "https://a.example/",
        ]))
        #expect(bytes.count <= WebPushRequestFactory.maximumPlaintextSize)
        let parsed = try JSONValue(parsing: bytes)
        let title = try #require(parsed["notification"]?["title"]?.stringValue)
        #expect(title.hasSuffix("…") && title.count > 500)
        #expect(parsed["web_push"] == 8030)
    }

    @Test func policyIsReadFromTheChannelSettings() throws {
        #expect(try WebPushDeclarativePolicy(settings: [:]) == .applePushService)
        #expect(try WebPushDeclarativePolicy(settings: ["declarative": "always"]) == .always)
        #expect(try WebPushDeclarativePolicy(settings: ["declarative": "never"]) == .never)
        #expect(throws: WebPushDeclarativePolicyError.self) { try WebPushDeclarativePolicy(settings: ["declarative": true]) }
        #expect(throws: WebPushDeclarativePolicyError.self) { try WebPushDeclarativePolicy(settings: ["declarative": "safari"]) }
        #expect(WebPushDeclarativePolicy.applePushService.requestsDeclarativeForm(endpoint: "https://WEB.push.apple.com/x"))
        #expect(!WebPushDeclarativePolicy.applePushService.requestsDeclarativeForm(endpoint: "https://apple.com.evil.example/x"))
    }
}
