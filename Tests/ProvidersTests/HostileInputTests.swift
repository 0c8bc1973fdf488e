import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

/// Inputs a hostile tester fed the APNs pieces: none may trap, none may put CR/LF or control characters
/// into a header, and every refusal says which field or key is at fault.
@Suite struct APNsHostileRequestTests {
    static let token = "0f" + String(repeating: "a1", count: 31)

    func delivery(_ message: NotificationMessage, topic: String = "com.example.app", expiration: Date? = nil,
                  now: Date = Date(timeIntervalSince1970: 1_700_000_000)) -> APNsDelivery
    {
        APNsDelivery(deviceToken: Self.token, topic: topic, apnsID: UUID(), message: message, msgID: "M",
                     expiration: expiration, now: now)
    }

    func message(_ configure: (inout NotificationMessage) -> Void) -> NotificationMessage {
        var message = NotificationMessage()
        message.contents = ["en": "x"]
        configure(&message)
        return message
    }

    /// The message type's fields are public, so the factory cannot rely on `init(json:)` having run.
    @Test func hugeTTLSetDirectlyIsClampedNotTrapped() throws {
        for ttl in [Int.max, Int.max - 1, 2_419_201, Int(Int32.max)] {
            let request = try APNsRequestFactory.makeRequest(delivery(message { $0.ttl = ttl }), bearerToken: "JWT")
            // At most now + 28 days: APNs keeps a push about 30 days anyway.
            #expect(request.header("apns-expiration") == String(1_700_000_000 + 2_419_200))
        }
        let negative = try APNsRequestFactory.makeRequest(delivery(message { $0.ttl = Int.min }), bearerToken: "JWT")
        #expect(negative.header("apns-expiration") == "0")
    }

    @Test func absurdDatesNeverTrap() throws {
        let absurd: [Date] = [.distantFuture, Date(timeIntervalSince1970: 1e300), Date(timeIntervalSince1970: -1e300),
                              Date(timeIntervalSince1970: .infinity), Date(timeIntervalSince1970: .nan)]
        for expiration in absurd {
            let request = try APNsRequestFactory.makeRequest(delivery(message { $0.ttl = 60 }, expiration: expiration), bearerToken: "JWT")
            let value = try #require(request.header("apns-expiration"))
            #expect(Int64(value) != nil, "apns-expiration must be whole seconds, got \(value)")
        }
        for now in absurd {
            let request = try APNsRequestFactory.makeRequest(delivery(message { $0.ttl = 60 }, expiration: .distantFuture, now: now),
                                                             bearerToken: "JWT")
            let value = try #require(request.header("apns-expiration"))
            #expect(Int64(value) != nil, "apns-expiration must be whole seconds, got \(value)")
        }
    }

    @Test func hugeBadgeAndScoreSetDirectlyDoNotTrap() throws {
        let request = try APNsRequestFactory.makeRequest(delivery(message {
            $0.iosBadgeType = .increase
            $0.iosBadgeCount = Int.min
            $0.iosRelevanceScore = .nan
            $0.iosCriticalSound = .init(name: "s", volume: .infinity)
            $0.iosInterruptionLevel = .critical
        }), bearerToken: "JWT")
        let body = try JSONValue(parsing: request.body)
        // Non-finite numbers cannot be JSON: they are dropped or clamped, never serialized as garbage.
        #expect(body["aps"]?["relevance-score"] == nil)
        #expect(body["aps"]?["sound"]?["volume"]?.doubleValue == 1.0)
        #expect(body["on"]?["badgeIncrement"] == .int(-2_147_483_647))
    }

    @Test func collapseIDWithControlCharactersIsRefused() {
        for bad in ["a\r\nb: c", "a\nb", "a\u{0}", " lead", "trail\t", "x\u{7F}"] {
            let error = #expect(throws: APNsRequestError.self) {
                try APNsRequestFactory.makeRequest(delivery(message { $0.collapseID = bad }), bearerToken: "JWT")
            }
            #expect(error?.reason == DeliveryReason.invalidMessage)
            #expect(error?.detail.contains("collapse_id") == true)
        }
    }

    @Test func topicThatIsNotAHeaderTokenIsRefused() {
        for bad in ["com.example.app\r\nx-evil: 1", "com.example app", "com.exämple", "com.example\u{0}"] {
            let error = #expect(throws: APNsRequestError.self) {
                try APNsRequestFactory.makeRequest(delivery(message { _ in }, topic: bad), bearerToken: "JWT")
            }
            #expect(error?.reason == DeliveryReason.invalidTopic)
        }
    }

    @Test func bearerTokenThatIsNotAHeaderTokenIsRefused() {
        for bad in ["a\r\nb", "a b", ""] {
            let error = #expect(throws: APNsRequestError.self) {
                try APNsRequestFactory.makeRequest(delivery(message { _ in }), bearerToken: bad)
            }
            #expect(error?.reason == DeliveryReason.invalidProviderToken)
            #expect(error.map { !$0.detail.contains(bad) || bad.isEmpty } == true)
        }
    }

    /// Checked once per provider token: a bad one makes no field, and each request built with it is refused at the
    /// same point as with the token itself (after the device token and topic checks); a good one's field is one
    /// string that every request shares.
    @Test func anAuthorizationBuiltOnceIsJudgedLikeItsToken() throws {
        let bad = APNsProviderAuthorization(bearerToken: "a\r\nb")
        #expect(bad.fieldValue == nil)
        let refused = #expect(throws: APNsRequestError.self) {
            try APNsRequestFactory.makeRequest(delivery(message { _ in }), authorization: bad) { [] }
        }
        #expect(refused?.reason == DeliveryReason.invalidProviderToken)
        let badToken = #expect(throws: APNsRequestError.self) {
            var badDevice = delivery(message { _ in })
            badDevice.deviceToken = "xyz"
            return try APNsRequestFactory.makeRequest(badDevice, authorization: bad) { [] }
        }
        #expect(badToken?.reason == DeliveryReason.badDeviceTokenFormat)

        let good = APNsProviderAuthorization(bearerToken: "h.p.s")
        #expect(good.fieldValue == "bearer h.p.s")
        let request = try APNsRequestFactory.makeRequest(delivery(message { _ in }), authorization: good) { [] }
        #expect(request.headers.first { $0.name == "authorization" }?.value == "bearer h.p.s")
    }

    @Test func everyHeaderOfAValidRequestIsAClean() throws {
        let request = try APNsRequestFactory.makeRequest(delivery(message {
            $0.ttl = 2_419_200
            $0.collapseID = "order-1 (çok)"
        }), bearerToken: "eyJ.eyJ.sig")
        for header in request.headers {
            #expect(HTTPFieldValue.isValid(header.value), "\(header.name)")
            #expect(HTTPFieldValue.isVisibleASCII(header.name), "\(header.name)")
        }
    }
}

@Suite struct APNsCredentialsHostileTests {
    @Test func identifiersAndTopicMustBeVisibleASCII() throws {
        let pem = try P256PrivateKey.generate().pkcs8PEM
        let base: [String: JSONValue] = ["team_id": "T1", "key_id": "K1", "private_key": .string(pem), "topic": "com.example.app"]
        let cases: [(String, String)] = [
            ("topic", "com.example.app\r\nx-evil: 1"), ("topic", "com.example app"), ("topic", "com.ex\u{0}ample"),
            ("topic", "com.exämple"), ("topic", "com.example\u{7F}"),
            ("team_id", "T1\r\nx"), ("key_id", "K 1"), ("key_id", "K1\u{0}"),
        ]
        for (key, value) in cases {
            var settings = base
            settings[key] = .string(value)
            let error = try #require(throws: ProviderConfigurationError.self) { try APNsCredentials(settings: .object(settings)) }
            #expect(error.key == key)
            #expect(error.code == .invalidValue)
        }
        // Surrounding whitespace is a copy-paste accident: trimmed, not refused.
        var padded = base
        padded["topic"] = " com.example.app.voip\n"
        #expect(try APNsCredentials(settings: .object(padded)).topic == "com.example.app.voip")
    }
}

@Suite struct APNsHostileResponseTests {
    func response(_ status: Int, _ body: [UInt8], headers: [PushHeader] = []) -> PushResponse {
        PushResponse(status: status, headers: headers, body: body)
    }

    func response(_ status: Int, _ body: String, headers: [PushHeader] = []) -> PushResponse {
        response(status, Array(body.utf8), headers: headers)
    }

    func invalidates(_ outcome: DeliveryOutcome) -> Bool? {
        if case .failed(_, _, let invalidate) = outcome { return invalidate }
        return nil
    }

    @Test func absurdTimestampsAreIgnored() {
        let updated = Date(timeIntervalSince1970: 1_700_000_000)
        for timestamp in ["1e30", "-1", "0", "-9223372036854775808", "9223372036854775807", "1e400", "\"soon\"", "1.5"] {
            let outcome = APNsResponseClassifier.classify(
                response(410, #"{"reason":"Unregistered","timestamp":\#(timestamp)}"#), subscriptionTokenUpdatedAt: updated)
            // An implausible timestamp proves nothing about re-registration: the token is gone.
            #expect(invalidates(outcome) == true, "timestamp \(timestamp)")
            if case .failed(_, let detail, _) = outcome { #expect(detail["timestamp"] == nil, "timestamp \(timestamp)") }
        }
    }

    @Test func hugeOrOddRetryAfterIsClamped() {
        let now = Date(timeIntervalSince1970: 1_000)
        let cases: [(String, Date?)] = [
            ("9223372036854775807", now.addingTimeInterval(APNsResponseClassifier.maximumRetryAfter)),
            ("99999999999999999999999999", now.addingTimeInterval(APNsResponseClassifier.maximumRetryAfter)),
            ("-5", nil), ("1e9", nil), ("nan", nil), ("+5", nil), ("", nil), ("30", now.addingTimeInterval(30)),
        ]
        for (value, expected) in cases {
            let outcome = APNsResponseClassifier.classify(response(429, "", headers: [PushHeader("retry-after", value)]),
                                                          subscriptionTokenUpdatedAt: nil, now: now)
            guard case .retry(_, _, let notBefore) = outcome else {
                Issue.record("429 must retry")
                continue
            }
            #expect(notBefore == expected, "Retry-After: \(value)")
        }
    }

    @Test func nonUTF8AndDeepAndHugeBodiesClassifyByStatus() {
        let bodies: [[UInt8]] = [
            [0xFF, 0xFE, 0x7B, 0x22],
            Array(#"{"reason":"Bad"#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8),
            Array(String(repeating: "[", count: 100_000).utf8),
            Array((String(repeating: "[", count: 5_000) + String(repeating: "]", count: 5_000)).utf8),
            Array((#"{"reason":"BadTopic","pad":""# + String(repeating: "x", count: 2_000_000) + #""}"#).utf8),
        ]
        for body in bodies {
            let outcome = APNsResponseClassifier.classify(response(400, body), subscriptionTokenUpdatedAt: nil)
            #expect(outcome == .failed(reason: DeliveryReason.http(status: 400), detail: ["status": 400]))
            #expect(!APNsResponseClassifier.requiresNewProviderToken(response(403, body)))
        }
    }

    @Test func hostileReasonIsSanitized() throws {
        let long = String(repeating: "A", count: 10_000)
        let outcome = APNsResponseClassifier.classify(response(400, #"{"reason":"\#(long)"}"#), subscriptionTokenUpdatedAt: nil)
        guard case .failed(let reason, let detail, _) = outcome else { Issue.record("must fail"); return }
        #expect(reason.rawValue.count <= 64)
        #expect((detail["apns_reason"]?.stringValue?.count ?? 0) <= 64)

        let control = APNsResponseClassifier.classify(response(400, #"{"reason":"Bad\u0000Thing\r\n"}"#), subscriptionTokenUpdatedAt: nil)
        guard case .failed(let reason2, let detail2, _) = control else { Issue.record("must fail"); return }
        #expect(reason2 == DeliveryReason(rawValue: "bad_thing"))
        let kept = try #require(detail2["apns_reason"]?.stringValue)
        #expect(HTTPFieldValue.isVisibleASCII(kept))

        let empty = APNsResponseClassifier.classify(response(400, #"{"reason":"!!!"}"#), subscriptionTokenUpdatedAt: nil)
        guard case .failed(let reason3, _, _) = empty else { Issue.record("must fail"); return }
        #expect(reason3 == DeliveryReason.http(status: 400))
    }

    @Test func absurdStatusesDoNotTrap() {
        for status in [Int.min, -1, 0, 99, 1_000, Int.max] {
            let outcome = APNsResponseClassifier.classify(response(status, ""), subscriptionTokenUpdatedAt: nil)
            #expect(outcome == .failed(reason: DeliveryReason.http(status: status), detail: ["status": .int(Int64(status))]))
        }
    }
}

@Suite struct APNsTokenManagerBrokenClockTests {
    @Test func absurdClocksDoNotTrap() throws {
        let key = try P256PrivateKey.generate()
        for seconds in [1e300, -1e300, Double.infinity, -Double.infinity, Double.nan, 9.3e18] {
            let manager = APNsTokenManager(teamID: "T1", keyID: "K1", privateKey: key,
                                           now: { Date(timeIntervalSince1970: seconds) })
            let token = try manager.bearerToken()
            let claims = try JSONWebToken.decode(token).claims
            let iat = try #require(try JSONValue(parsing: claims)["iat"]?.int64Value)
            #expect(iat == APNsTokenManager.wholeSeconds(seconds))
        }
        #expect(APNsTokenManager.wholeSeconds(.nan) == 0)
        #expect(APNsTokenManager.wholeSeconds(1e300) == .max)
        #expect(APNsTokenManager.wholeSeconds(-1e300) == .min)
        #expect(APNsTokenManager.wholeSeconds(1_700_000_000.9) == 1_700_000_000)
    }
}

@Suite struct APNsHostileSentTests {
    @Test func oddAPNsIDIsDropped() {
        for bad in ["a\u{0}b", String(repeating: "f", count: 65), "has space", ""] {
            let outcome = APNsResponseClassifier.classify(PushResponse(status: 200, headers: [PushHeader("apns-id", bad)]),
                                                          subscriptionTokenUpdatedAt: nil)
            #expect(outcome == .sent(providerMessageID: nil))
        }
        let good = "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10"
        #expect(APNsResponseClassifier.classify(PushResponse(status: 200, headers: [PushHeader("apns-id", good)]),
                                                subscriptionTokenUpdatedAt: nil) == .sent(providerMessageID: good))
    }
}
