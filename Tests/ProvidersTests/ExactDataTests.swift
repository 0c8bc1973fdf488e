import Foundation
import Testing
import DeliveryCore
@testable import Providers

/// `data` numbers reach every provider as the exact JSON text `jsonb` held (RFC 8259 §6): big integers,
/// decimals with trailing zeros and exponents are never rounded through `Double`.
@Suite struct ExactDataTests {
    static let message = #"""
        {"contents": {"en": "Order shipped"},
         "data": {"order_id": 12345678901234567890, "price": 19.90, "tiny": 1e-400, "huge": 1e400, "neg": -0,
                  "small": 7, "nested": {"ids": [98765432109876543210, 0.1]}, "text": "12345678901234567890"}}
        """#
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    func notification() throws -> NotificationMessage { try NotificationMessage(json: try JSONValue(parsing: Self.message)) }

    @Test func fcmDataValuesAreTheLiterals() throws {
        let delivery = FCMDelivery(registrationToken: "fcm-token", projectID: "p", message: try notification(), subscriberLanguage: "en",
                                   appDefaultLanguage: "en", placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
        let body = String(decoding: try FCMRequestFactory.makeRequest(delivery, accessToken: "t").body, as: UTF8.self)
        #expect(body.contains(#""on.d.order_id":"12345678901234567890""#))
        #expect(body.contains(#""on.d.price":"19.90""#))
        #expect(body.contains(#""on.d.tiny":"1e-400""#) && body.contains(#""on.d.huge":"1e400""#) && body.contains(#""on.d.neg":"-0""#))
        #expect(body.contains(#""on.d.small":"7""#))
        #expect(body.contains(#""on.d.nested":"{\"ids\":[98765432109876543210,0.1]}""#))
        #expect(!body.contains("e+19"))
    }

    @Test func apnsPayloadCarriesTheLiterals() throws {
        let delivery = APNsDelivery(deviceToken: String(repeating: "ab", count: 32), environment: "sandbox", topic: "com.example.app",
                                    apnsID: UUID(), message: try notification(), subscriberLanguage: "en", appDefaultLanguage: "en",
                                    placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
        let payload = String(decoding: try APNsRequestFactory.payload(for: delivery), as: UTF8.self)
        #expect(payload.contains(#""order_id":12345678901234567890"#))
        #expect(payload.contains(#""price":19.90"#) && payload.contains(#""tiny":1e-400"#) && payload.contains(#""neg":-0"#))
        #expect(payload.contains(#""ids":[98765432109876543210,0.1]"#))
        #expect(payload.contains(#""text":"12345678901234567890""#))
    }

    @Test func webPushPlaintextCarriesTheLiteralsAsStrings() throws {
        let delivery = WebPushDelivery(endpoint: "https://push.example.net/wpush/a", message: try notification(), subscriberLanguage: "en",
                                       appDefaultLanguage: "en", placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
        let json = try JSONValue(parsing: try WebPushRequestFactory.plaintext(for: delivery))
        #expect(json["data"]?["order_id"] == "12345678901234567890")
        #expect(json["data"]?["price"] == "19.90")
        #expect(json["data"]?["nested"] == #"{"ids":[98765432109876543210,0.1]}"#)
    }
}
