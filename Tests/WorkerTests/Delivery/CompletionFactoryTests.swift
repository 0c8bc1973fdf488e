import DeliveryCore
import Foundation
import Testing
@testable import Worker

@Suite("From outcome to completion")
struct CompletionFactoryTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = RetryPolicy(baseDelay: 2, maximumDelay: 60)

    func delivery(attempt: Int) -> ClaimedDelivery {
        ClaimedDelivery(
            id: 7, fence: 3, attempt: attempt, notificationID: UUID(), subscriptionID: UUID(), appID: UUID(),
            apnsID: UUID(), messageJSON: "{}", campaignID: nil, notificationStatus: "expanded",
            notificationStart: Self.now, platform: "ios", token: "a0", apnsEnvironment: nil, language: nil,
            timezone: nil, country: nil, subscriptionStatus: "active", tokenUpdatedAt: Self.now, userTagsJSON: nil,
            defaultLanguage: "en", defaultTimezone: "UTC", signingKey: [1], channelProvider: "apns",
            channelSettingsJSON: "{}", channelEndpoint: nil, channelPausedUntil: nil)
    }

    func detail(_ completion: DeliveryCompletion) throws -> JSONValue {
        try JSONValue(parsing: completion.detailJSON)
    }

    @Test func sentIsTerminalWithTheProviderID() throws {
        let completion = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .sent(providerMessageID: "abc"), provider: "apns", maxAttempts: 3,
            retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.event == "sent")
        #expect(completion.nextRunAt == nil)
        #expect(completion.fence == 3)
        #expect(try detail(completion)["apns_id"] == "abc")
        #expect(try detail(completion)["provider"] == "apns")
    }

    @Test func retryIsRescheduledUntilTheLastAttempt() throws {
        let outcome = DeliveryOutcome.retry(reason: "service_unavailable")
        let early = CompletionFactory.completion(
            for: delivery(attempt: 2), outcome: outcome, provider: "apns", maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0)
        #expect(early.event == "retrying")
        #expect(early.reason == "service_unavailable")
        #expect(early.nextRunAt == Self.now.addingTimeInterval(2))  // attempt 2: ceiling 4 s, jitter 0 -> 2 s
        #expect(try detail(early)["next_attempt_at"] != nil)

        let last = CompletionFactory.completion(
            for: delivery(attempt: 3), outcome: outcome, provider: "apns", maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0)
        #expect(last.event == "failed")
        #expect(last.reason == "max_attempts")
        #expect(last.nextRunAt == nil)
        #expect(try detail(last)["last_reason"] == "service_unavailable")
    }

    @Test func invalidationCarriesTheTokenTimestampSeen() {
        let claimed = delivery(attempt: 1)
        let completion = CompletionFactory.completion(
            for: claimed, outcome: .failed(reason: "unregistered", invalidateSubscription: true), provider: "apns",
            maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.invalidation?.subscriptionID == claimed.subscriptionID)
        #expect(completion.invalidation?.tokenUpdatedAt == claimed.tokenUpdatedAt)
        #expect(completion.nextRunAt == nil)
    }

    @Test func channelErrorPausesTheChannelNotTheSubscription() {
        let until = Self.now.addingTimeInterval(900)
        let completion = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .channelError(reason: "invalid_provider_token", pausedUntil: until),
            provider: "apns", maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.event == "retrying")
        #expect(completion.nextRunAt == until)
        #expect(completion.channelPause?.until == until)
        #expect(completion.channelPause?.provider == "apns")
        #expect(completion.invalidation == nil)
    }

    @Test func messageCacheReparsesAnEditedRow() {
        let cache = MessageCache(capacity: 2)
        let id = UUID()
        guard case .success = cache.message(for: id, json: #"{"contents": {"en": "hi"}}"#) else {
            Issue.record("valid message refused")
            return
        }
        guard case .failure(let invalid) = cache.message(for: id, json: #"{"contents": {"en": "hi"}, "ttl": -1}"#) else {
            Issue.record("edited, invalid message served from the cache")
            return
        }
        #expect(invalid.outcome.eventName == "failed")
    }
}
