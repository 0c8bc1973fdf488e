import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// A message of thousands of placeholders filled from a long tag, for every provider: the payload is
/// built from a bounded text and cut to exactly the longest prefix that fits.
@Suite struct ProviderRenderingBoundsTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    /// The reported message: 2,000 `{{a}}` in `contents` (and `headings`), and a 20 KB tag `a`.
    static func message(tagCharacter: String = "x", title: Bool = false) -> (NotificationMessage, PlaceholderValues) {
        var message = NotificationMessage()
        if title { message.headings = ["en": "Hi {{a}}"] }
        message.contents = ["en": String(repeating: "{{a}}", count: 2000)]
        return (message, PlaceholderValues(tags: ["a": .string(String(repeating: tagCharacter, count: 20_000))]))
    }

    @Test func apnsFillsThePayloadToTheByteAndNoFurther() throws {
        let (message, values) = Self.message()
        let delivery = APNsDelivery(deviceToken: String(repeating: "a0", count: 32), topic: "com.example.app", apnsID: UUID(),
                                    message: message, placeholderValues: values, msgID: "MSGID", now: Self.now)
        let body = try APNsRequestFactory.payload(for: delivery)
        // Each x is one byte, so the longest prefix that fits fills exactly 4096.
        #expect(body.count == APNsRequestFactory.maximumPayloadSize)
        #expect(try JSONValue(parsing: body)["aps"]?["alert"]?["body"]?.stringValue?.hasSuffix("xx…") == true)

        // With the same in the title too: both are 4 KB, so both are cut to the same line (longest first).
        let (titled, _) = Self.message(title: true)
        var both = delivery
        both.message = titled
        let bothBody = try APNsRequestFactory.payload(for: both)
        // Two texts cut to one line: full to within one byte (the room is shared in whole bytes).
        #expect(bothBody.count >= APNsRequestFactory.maximumPayloadSize - 1)
        let alert = try #require(try JSONValue(parsing: bothBody)["aps"]?["alert"])
        let title = try #require(alert["title"]?.stringValue), alertBody = try #require(alert["body"]?.stringValue)
        #expect(title.hasPrefix("Hi xx") && title.hasSuffix("xx…") && alertBody.hasSuffix("xx…"))
        #expect(title.utf8.count == alertBody.utf8.count)
    }

    @Test func apnsCutsBetweenEscapesAndMultiByteCharactersExactly() throws {
        // Each tag character costs 2 bytes in JSON (`\"`), 2 (`ş`) or 6 (`\u0001`): the cut keeps the most
        // that fits, so one more character would not.
        for character in ["\"", "ş", "\u{1}", "👩‍👩‍👧"] {
            let (message, values) = Self.message(tagCharacter: character)
            let delivery = APNsDelivery(deviceToken: String(repeating: "a0", count: 32), topic: "com.example.app",
                                        apnsID: UUID(), message: message, placeholderValues: values, msgID: "M", now: Self.now)
            let body = try APNsRequestFactory.payload(for: delivery)
            let cost = JSONValue.string(character).serialized().count - 2
            #expect(body.count <= 4096 && body.count > 4096 - cost, "\(character.unicodeScalars.map(\.value))")
            let text = try #require(try JSONValue(parsing: body)["aps"]?["alert"]?["body"]?.stringValue)
            #expect(text.dropLast().allSatisfy { String($0) == character } && text.hasSuffix("…"))
        }
    }

    @Test func fcmCountsStringsAndStopsAtItsLimit() throws {
        let (message, values) = Self.message(tagCharacter: "ş")
        let delivery = FCMDelivery(registrationToken: "token", projectID: "p", message: message, placeholderValues: values,
                                   msgID: "MSGID", now: Self.now)
        let data = try FCMRequestFactory.data(for: delivery)
        let size = FCMRequestFactory.payloadSize(of: data)
        #expect(size <= 4096 && size > 4096 - 2)
        #expect(data[FCMDataLayout.body]?.hasSuffix("ş…") == true)
    }

    @Test func webPushStopsAtItsPlaintextLimit() throws {
        let (message, values) = Self.message(tagCharacter: "\\")
        let delivery = WebPushDelivery(endpoint: "https://push.example.com/p/1", message: message, placeholderValues: values,
                                       msgID: "MSGID", now: Self.now)
        let body = try WebPushRequestFactory.plaintext(for: delivery)
        #expect(body.count <= WebPushRequestFactory.maximumPlaintextSize && body.count > WebPushRequestFactory.maximumPlaintextSize - 2)
    }

    @Test func tooLargeReportsTheSizeWithEveryTextCut() throws {
        var (message, values) = Self.message(title: true)
        message.data = ["blob": .string(String(repeating: "d", count: 5000))]
        func failure(_ message: NotificationMessage) -> APNsRequestError? {
            let delivery = APNsDelivery(deviceToken: String(repeating: "a0", count: 32), topic: "com.example.app",
                                        apnsID: UUID(), message: message, placeholderValues: values, msgID: "M", now: Self.now)
            do {
                _ = try APNsRequestFactory.payload(for: delivery)
                return nil
            } catch {
                return error
            }
        }
        let error = try #require(failure(message))
        #expect(error.reason == DeliveryReason.payloadTooLarge)
        // The size named is that of the payload with both texts "…", as rendering that payload gives it.
        var cut = message
        cut.headings = ["en": "…"]
        cut.contents = ["en": "…"]
        #expect(error == failure(cut))
        #expect(error.detail.contains("5104 bytes"))
    }
}
