import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// The Push Kit send request (Huawei, "Sending Messages"), as docs/wire-formats.md's Huawei section shows it.
@Suite struct HuaweiRequestFactoryTests {
    static let token = "IQAAAACy0kYkAABpZ-huawei-token"

    func delivery(_ message: JSONValue, appID: String = "10086123", token: String = Self.token) throws -> HuaweiDelivery {
        HuaweiDelivery(pushToken: token, appID: appID, message: try NotificationMessage(json: message),
                       subscriberLanguage: "tr-TR", appDefaultLanguage: "en",
                       placeholderValues: PlaceholderValues(tags: ["name": "Işıl"], language: "tr-TR", country: "TR"),
                       msgID: "MSGID", campaignID: "spring")
    }

    func text(_ request: PushRequest) -> String { String(decoding: request.body, as: UTF8.self) }

    @Test func visibleMessageGolden() throws {
        let request = try HuaweiRequestFactory.makeRequest(delivery([
            "headings": ["en": "Hello", "tr": "Merhaba {{ name }}"],
            "contents": ["en": "Your order shipped", "tr": "Siparişin yolda"],
            "subtitle": ["tr": "Kargo"],
            "url": "app://orders/1",
            "data": ["order": 1],
            "android_channel_id": "orders",
        ]), accessToken: "CF3Xl2XV6jMKZgqYSZFws9IPlgDvxqOfFSmrlmtkTRupbU2VklvhX9kC9JCnKVSDX2VrDgAPuzvNm3WccUIaDg==")
        #expect(request.method == "POST")
        #expect(request.path == "/v1/10086123/messages:send")
        #expect(request.headers == [
            PushHeader("authorization", "Bearer CF3Xl2XV6jMKZgqYSZFws9IPlgDvxqOfFSmrlmtkTRupbU2VklvhX9kC9JCnKVSDX2VrDgAPuzvNm3WccUIaDg=="),
            PushHeader("content-type", "application/json; charset=UTF-8"),
        ])
        #expect(text(request) == #"{"message":{"android":{"notification":{"body":"Siparişin yolda","click_action":{"type":3},"title":"Merhaba Işıl"}},"data":"{\"on.androidChannelId\":\"orders\",\"on.campaignId\":\"spring\",\"on.d.order\":\"1\",\"on.msgId\":\"MSGID\",\"on.subtitle\":\"Kargo\",\"on.url\":\"app://orders/1\"}","token":["IQAAAACy0kYkAABpZ-huawei-token"]},"validate_only":false}"#)
    }

    @Test func silentPushIsADataMessage() throws {
        let request = try HuaweiRequestFactory.makeRequest(delivery(["content_available": true, "data": ["sync": "inbox"]]),
                                                           accessToken: "T")
        #expect(text(request) == #"{"message":{"data":"{\"on.campaignId\":\"spring\",\"on.d.sync\":\"inbox\",\"on.msgId\":\"MSGID\",\"on.silent\":\"true\"}","token":["IQAAAACy0kYkAABpZ-huawei-token"]},"validate_only":false}"#)
    }

    /// 4096 bytes without the token: a long token does not count, long texts are shortened to fit.
    @Test func bodyWithoutTheTokenFitsPushKitsLimit() throws {
        let longToken = String(repeating: "A", count: 3000)
        let request = try HuaweiRequestFactory.makeRequest(
            delivery(["contents": ["en": .string(String(repeating: "ğ", count: 4000))]], token: longToken), accessToken: "T")
        #expect(request.body.count - longToken.utf8.count <= HuaweiRequestFactory.maximumBodySize)
        #expect(request.body.count - longToken.utf8.count > HuaweiRequestFactory.maximumBodySize - 16, "shortened only as far as needed")
        #expect(text(request).contains("…"))
        #expect(throws: HuaweiRequestError.self) {
            try HuaweiRequestFactory.makeRequest(
                delivery(["contents": ["en": "x"], "data": ["big": .string(String(repeating: "x", count: 5000))]]), accessToken: "T")
        }
    }

    @Test func channelFaultsPauseTheChannelOthersFailTheDelivery() throws {
        let plan = HuaweiRequestPlan(appID: "10086123", usesChannelEndpoint: false)
        func recorded(_ planned: PlannedRequest) -> DeliveryOutcome? {
            if case .record(let outcome) = planned { return outcome }
            return nil
        }
        let message: JSONValue = ["contents": ["en": "x"]]
        #expect(recorded(plan.request(for: try delivery(message, appID: ""), accessToken: "T"))?.event == .retrying)
        #expect(recorded(plan.request(for: try delivery(message, appID: "10086/../x"), accessToken: "T"))?.reason == .invalidAppID)
        #expect(recorded(plan.request(for: try delivery(message), accessToken: "a b"))?.reason == .invalidAccessToken)
        let badToken = recorded(plan.request(for: try delivery(message, token: "has space"), accessToken: "T"))
        #expect(badToken == .failed(reason: .badDeviceTokenFormat,
                                    detail: ["message": "a Push Kit token is 1 to 4096 visible ASCII characters (got 9 bytes)"]))
        guard case .send(_, let destination) = plan.request(for: try delivery(message), accessToken: "T") else {
            Issue.record("a good delivery is sent")
            return
        }
        #expect(destination == .huaweiPushKit)
    }
}
