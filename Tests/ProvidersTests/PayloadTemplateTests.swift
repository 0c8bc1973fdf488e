import DeliveryCore
import Foundation
import PushCrypto
import Testing
@testable import Providers

/// A payload rendered once and filled per device with its msgId is byte for byte the payload rendered for
/// that device, including when texts are shortened to fit and when the message itself holds the stand-in.
@Suite("Payload templates: rendered once, filled per device")
struct PayloadTemplateTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// Real signed msgIds of a few devices.
    static let msgIDs: [String] = (0..<4).map { _ in
        MessageIDCodec.sign(notificationID: UUID(), subscriptionID: UUID(), key: Array("key".utf8))
    }

    func apns(_ message: JSONValue, msgID: String = "x") throws -> APNsDelivery {
        APNsDelivery(
            deviceToken: String(repeating: "a", count: 64), topic: "dev.pushizo.test", apnsID: UUID(),
            message: try NotificationMessage(json: message), subscriberLanguage: "tr", appDefaultLanguage: "en",
            msgID: msgID, campaignID: "spring", now: Self.now)
    }

    static let messages: [JSONValue] = [
        ["headings": ["en": "Hello", "tr": "Merhaba"], "contents": ["en": "Your order shipped", "tr": "Siparişin yolda"]],
        // Long enough that the body is shortened to fit 4096 bytes.
        ["contents": ["tr": .string(String(repeating: "ğ", count: 3000))], "headings": ["tr": .string(String(repeating: "\"", count: 900))]],
        // The stand-ins themselves, where a hostile producer could put them: in data, under the key msgId.
        ["contents": ["en": "x"], "data": ["msgId": .string(String(repeating: "A", count: 64)), "b": .string(String(repeating: "B", count: 64))]],
        ["content_available": true, "data": ["k": "v"]],
    ]

    @Test(arguments: messages)
    func anAPNsTemplateFilledIsTheBodyRenderedForTheDevice(message: JSONValue) throws {
        let template = try #require(try APNsRequestFactory.payloadTemplate(for: apns(message)))
        for msgID in Self.msgIDs {
            let rendered = try APNsRequestFactory.payload(for: apns(message, msgID: msgID))
            #expect(template.filled(msgID: msgID) == rendered)
        }
    }

    @Test(arguments: messages.prefix(3))
    func aWebPushTemplateFilledIsThePlaintextRenderedForTheDevice(message: JSONValue) throws {
        func web(_ msgID: String) throws -> WebPushDelivery {
            WebPushDelivery(
                endpoint: "https://push.example/x", message: try NotificationMessage(json: message), subscriberLanguage: "tr",
                appDefaultLanguage: "en", msgID: msgID, campaignID: "spring", now: Self.now)
        }
        let template = try #require(try WebPushRequestFactory.plaintextTemplate(for: web("x")))
        for msgID in Self.msgIDs {
            #expect(template.filled(msgID: msgID) == (try WebPushRequestFactory.plaintext(for: web(msgID))))
        }
    }

    /// The declarative form (Apple's push service, a message with a `url`) carries the msgId in
    /// `notification.data`, and is spliced like the flat one.
    @Test(arguments: messages.prefix(3))
    func aDeclarativeWebPushTemplateFilledIsThePlaintextRenderedForTheDevice(message: JSONValue) throws {
        var members = message.objectValue ?? [:]
        members["url"] = "https://shop.example/orders/1"
        func web(_ msgID: String) throws -> WebPushDelivery {
            WebPushDelivery(
                endpoint: "https://web.push.apple.com/x", message: try NotificationMessage(json: .object(members)),
                subscriberLanguage: "tr", appDefaultLanguage: "en", msgID: msgID, campaignID: "spring", now: Self.now)
        }
        let template = try #require(try WebPushRequestFactory.plaintextTemplate(for: web("x")))
        for msgID in Self.msgIDs {
            let rendered = try WebPushRequestFactory.plaintext(for: web(msgID))
            #expect(template.filled(msgID: msgID) == rendered)
            #expect(String(decoding: rendered, as: UTF8.self).contains(#""web_push":8030"#) == (members["headings"] != nil))
        }
    }

    @Test(arguments: messages)
    func sharedFCMDataWithTheDevicesMsgIDIsTheDataRenderedForTheDevice(message: JSONValue) throws {
        func fcm(_ msgID: String) throws -> FCMDelivery {
            FCMDelivery(
                registrationToken: "t", projectID: "p", message: try NotificationMessage(json: message), subscriberLanguage: "tr",
                appDefaultLanguage: "en", msgID: msgID, campaignID: "spring", now: Self.now)
        }
        let shared = try FCMRequestFactory.data(for: fcm(Self.msgIDs[0]))
        for msgID in Self.msgIDs {
            #expect(FCMRequestFactory.data(shared, msgID: msgID) == (try FCMRequestFactory.data(for: fcm(msgID))))
        }
        // Only a msgId of the signed length can take another's place.
        #expect(FCMRequestFactory.data(shared, msgID: "short") == nil)
        #expect(FCMRequestFactory.data(try FCMRequestFactory.data(for: fcm("short")), msgID: Self.msgIDs[0]) == nil)
    }

    @Test func aMsgIDOfAnotherLengthOrAlphabetIsNotSpliced() throws {
        let template = try #require(try APNsRequestFactory.payloadTemplate(for: apns(Self.messages[0])))
        #expect(template.filled(msgID: "short") == nil)
        #expect(template.filled(msgID: String(repeating: "\"", count: 64)) == nil)
    }

    @Test func aRendererWhoseOutputDependsOnTheMsgIDOtherwiseHasNoTemplate() {
        // Twice the msgId, or its length changing the rest: not one 64-byte window, so rendered per device.
        #expect(PayloadTemplate.make { msgID in Array((msgID + msgID).utf8) } == nil)
        #expect(PayloadTemplate.make { msgID in Array((msgID.hasPrefix("A") ? "1" : "22").utf8) } == nil)
        #expect(PayloadTemplate.make { _ in Array("same".utf8) } == nil)
        #expect(PayloadTemplate.make { msgID in Array("{\"m\":\"\(msgID)\"}".utf8) }?.msgIDOffset == 6)
    }

    @Test func aRenderingErrorIsTheTemplatesError() throws {
        // Over 4 KB even with every text shortened: the same error for every device.
        let message: JSONValue = ["contents": ["en": "x"], "data": ["k": .string(String(repeating: "d", count: 5000))]]
        #expect(throws: APNsRequestError.self) { try APNsRequestFactory.payloadTemplate(for: apns(message)) }
    }
}
