import DeliveryCore
import Emulator
import Foundation
import HTTP2
import Providers
import PushCrypto
import Testing
@testable import Worker

/// Work done once rather than per delivery: a payload whose texts use no placeholder is rendered once per
/// notification, language and provider and filled per device; one whose texts use a tag is rendered per
/// user; a user's tags are parsed once; every cache stays within its bounds.
@Suite("Rendering once per notification and language")
struct RenderOnceTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    func delivery(
        notification: UUID, language: String?, user: UUID? = nil, tags: String? = nil, endpoint: String = ""
    ) -> ClaimedDelivery {
        var claimed = ClaimedDelivery(
            id: 1, fence: 1, attempt: 1, notificationID: notification, subscriptionID: UUID(), appID: UUID(),
            apnsID: UUID(), messageVersion: "7", campaignID: "c", notificationStatus: "expanded",
            notificationStart: Self.now, platform: "ios", token: String(repeating: "b", count: 64), apnsEnvironment: nil,
            language: language, timezone: nil, country: nil, subscriptionStatus: "active", tokenUpdatedAt: Self.now,
            userTagsJSON: tags, defaultLanguage: "en", defaultTimezone: nil, signingKey: Array("signing".utf8),
            channelProvider: "apns", channelSettingsJSON: nil, channelEndpoint: endpoint, channelPausedUntil: nil)
        claimed.userID = user
        return claimed
    }

    /// The body each delivery would get rendered on its own (the path before this cache existed).
    static func renderedAlone(_ claimed: ClaimedDelivery, _ message: NotificationMessage) throws -> [UInt8] {
        var apns = DeliveryRendering.apnsDelivery(for: claimed, message: message, topic: "dev.pushizo.test", now: now)
        apns.placeholderValues = DeliveryRendering.placeholderValues(for: claimed)
        return try APNsRequestFactory.payload(for: apns)
    }

    @Test func aMessageWithoutPlaceholdersIsRenderedOncePerLanguageAndSentAsRenderedAlone() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let sender = APNsSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted, bounds: .standard)
            let message = try NotificationMessage(json: [
                "headings": ["en": "Hello", "tr": "Merhaba"], "contents": ["en": "Shipped", "tr": "Yolda"],
                "data": ["k": "v"],
            ])
            let notification = UUID()
            var sent: [ClaimedDelivery] = []
            for language in ["en", "en", "en", "tr", "tr", "en", "de"] {
                var claimed = delivery(notification: notification, language: language, endpoint: emulator.endpoint)
                claimed.channelSettingsJSON = emulator.channelSettings
                let outcome = await sender.sendOne(claimed, message: message, now: Self.now)
                #expect(outcome.eventName == "sent", "\(outcome)")
                sent.append(claimed)
            }
            // en and tr were seen more than once: one shared body each; de once: rendered alone, no template.
            #expect(sender.renders.counts.built == 2)
            let received = emulator.apns.acceptedNotifications.map(\.payload)
            #expect(received == (try sent.map { try Self.renderedAlone($0, message) }))
            #expect(Set(received).count == sent.count, "every device has its own msgId")
        }
    }

    @Test func aTemplateUsingATagIsRenderedPerUser() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let sender = APNsSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted, bounds: .standard)
            let message = try NotificationMessage(json: ["contents": ["en": "Hi {{ first_name | default: \"there\" }}"]])
            let notification = UUID()
            let users = [(UUID(), #"{"first_name": "Ann"}"#), (UUID(), #"{"first_name": "Bob"}"#), (UUID(), nil)]
            for (user, tags) in users + users {
                var claimed = delivery(notification: notification, language: "en", user: user, tags: tags, endpoint: emulator.endpoint)
                claimed.channelSettingsJSON = emulator.channelSettings
                #expect(await sender.sendOne(claimed, message: message, now: Self.now).eventName == "sent")
            }
            let bodies = emulator.apns.acceptedNotifications.map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(bodies.map { $0.contains(#""body":"Hi Ann""#) } == [true, false, false, true, false, false])
            #expect(bodies.map { $0.contains(#""body":"Hi Bob""#) } == [false, true, false, false, true, false])
            #expect(bodies.map { $0.contains(#""body":"Hi there""#) } == [false, false, true, false, false, true])
            // Nothing shared for a message whose texts use placeholders; each user's tags parsed once.
            #expect(sender.renders.counts.keys == 0)
            #expect(sender.userTags.parseCount == 2)
        }
    }

    @Test func aUsersTagsAreParsedOnceAndAgainWhenTheyChange() throws {
        let tags = UserTagsCache()
        let user = UUID()
        let first = delivery(notification: UUID(), language: "en", user: user, tags: #"{"a": "1"}"#)
        #expect(DeliveryRendering.placeholderValues(for: first, userTags: tags).tags == ["a": "1"])
        #expect(DeliveryRendering.placeholderValues(for: first, userTags: tags).tags == ["a": "1"])
        #expect(tags.parseCount == 1)
        let changed = delivery(notification: UUID(), language: "en", user: user, tags: #"{"a": "2"}"#)
        #expect(DeliveryRendering.placeholderValues(for: changed, userTags: tags).tags == ["a": "2"])
        #expect(tags.parseCount == 2)
        // Without a user id (a subscription of no user has no tags anyway) nothing is kept.
        let anonymous = delivery(notification: UUID(), language: "en", tags: #"{"a": "3"}"#)
        #expect(DeliveryRendering.placeholderValues(for: anonymous, userTags: tags).tags == ["a": "3"])
        #expect(tags.parseCount == 2)
    }

    @Test func aMessageWithoutPlaceholdersParsesNoTags() throws {
        let tags = UserTagsCache()
        let message = try NotificationMessage(json: ["contents": ["en": "Plain"]])
        let claimed = delivery(notification: UUID(), language: "en", user: UUID(), tags: #"{"a": "1"}"#)
        let apns = DeliveryRendering.apnsDelivery(for: claimed, message: message, topic: "t", now: Self.now, userTags: tags)
        #expect(apns.placeholderValues == nil)
        #expect(tags.parseCount == 0)
        #expect(DeliveryRendering.renderKey(for: claimed, message: message, variant: "apns") != nil)
        let templated = try NotificationMessage(json: ["contents": ["en": "{{ a }}"]])
        #expect(DeliveryRendering.renderKey(for: claimed, message: templated, variant: "apns") == nil)
    }

    @Test func thirtyThousandLanguagesStayWithinTheBounds() {
        // A hostile producer's subscriptions in 30,000 distinct (long) languages of one notification.
        let cache = RenderCache<Result<PayloadTemplate?, APNsRequestError>>(capacity: 512, byteBudget: 256 << 10) { result in
            guard case .success(let template?) = result else { return 256 }
            return template.bytes.count
        }
        let notification = UUID()
        let template = PayloadTemplate.make { Array(("{\"m\":\"" + $0 + "\"," + String(repeating: "p", count: 4000) + "}").utf8) }
        var built = 0
        var most = (keys: 0, bytes: 0)
        for index in 0..<30_000 {
            let key = RenderKey(
                notificationID: notification, messageVersion: "1", variant: "apns",
                subscriberLanguage: "x-" + String(repeating: "l", count: (index / 3) % 200) + "\(index / 3)", appDefaultLanguage: "en",
                campaignID: nil)
            _ = cache.value(for: key) {
                built += 1
                return .success(template)
            }
            let counts = cache.counts
            most = (max(most.keys, counts.keys), max(most.bytes, counts.bytes))
        }
        #expect(most.keys <= 512 && most.bytes <= 256 << 10)
        #expect(most.bytes > 128 << 10, "payloads were kept")
        // Each language came three times in a row: built on its second sight, served from the cache on its third.
        #expect(built == 10_000)
        let tags = UserTagsCache(capacity: 64, byteBudget: 64 << 10)
        for _ in 0..<10_000 {
            _ = tags.tags(userID: UUID(), text: String(repeating: "t", count: 4000)) { _ in [:] }
        }
        #expect(tags.count <= 64 && tags.bytes <= 64 << 10)
    }
}
