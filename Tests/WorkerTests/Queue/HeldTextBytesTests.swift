import Foundation
import Testing
@testable import Worker

/// What a claimed batch is counted as holding against the claim loop's bound on row text in flight.
@Suite struct HeldTextBytesTests {
    static func row(app: UUID, tags: String?, token: String, campaign: String? = nil, settings: String) -> ClaimedDelivery {
        ClaimedDelivery(
            id: 1, fence: 1, attempt: 1, notificationID: UUID(), subscriptionID: UUID(), appID: app,
            apnsID: UUID(), messageVersion: "1", campaignID: campaign, notificationStatus: "expanded",
            notificationStart: Date(timeIntervalSince1970: 0), platform: "ios", token: token, apnsEnvironment: nil,
            language: nil, timezone: nil, country: nil, subscriptionStatus: "active",
            tokenUpdatedAt: Date(timeIntervalSince1970: 0), userTagsJSON: tags, defaultLanguage: "en",
            defaultTimezone: "UTC", signingKey: [1], channelProvider: "apns", channelSettingsJSON: settings,
            channelEndpoint: nil, channelPausedUntil: nil)
    }

    @Test func eachRowsOwnTextAndEachAppsSettingsOnce() {
        let (first, second) = (UUID(), UUID())
        let tags = String(repeating: "t", count: 65_536)
        let batch = [
            Self.row(app: first, tags: tags, token: String(repeating: "a", count: 64), campaign: "spring", settings: String(repeating: "s", count: 1_000)),
            Self.row(app: first, tags: nil, token: String(repeating: "b", count: 8_192), settings: String(repeating: "s", count: 1_000)),
            Self.row(app: second, tags: "{\"ü\": 1}", token: "c", settings: "{}"),
        ]
        #expect(batch.heldTextBytes == (65_536 + 64 + 6 + 1_000) + 8_192 + (9 + 1 + 2))
        #expect([ClaimedDelivery]().heldTextBytes == 0)
    }
}
