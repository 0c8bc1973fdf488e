import DeliveryCore
import Foundation
import Testing

@Suite("From outcome to completion")
struct CompletionFactoryTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = RetryPolicy(baseDelay: .seconds(2), maximumDelay: .seconds(60))

    func delivery(attempt: Int) -> ClaimFacts {
        ClaimFacts(
            source: .row(7), fence: 3, attempt: attempt, appID: UUID(), notificationID: UUID(), subscriptionID: UUID(),
            apnsID: UUID(), notificationStart: Self.now, tokenUpdatedAt: Self.now)
    }

    func detail(_ completion: DeliveryCompletion) throws -> JSONValue {
        try JSONValue(parsing: completion.detailJSON)
    }

    @Test func sentIsTerminalWithTheProviderID() throws {
        let completion = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .sent(providerMessageID: "abc"), provider: .apns, maxAttempts: 3,
            retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.event == .sent)
        #expect(completion.nextRunAt == nil)
        #expect(completion.fence == 3)
        #expect(try detail(completion)["apns_id"] == "abc")
        #expect(try detail(completion)["provider"] == "apns")
    }

    /// An APNs `sent` has its detail written without building its members: the same text, byte for byte, as the
    /// members written through `objectText(ofStrings:)` (what every other `sent` detail goes through), with and
    /// without Apple's `apns-id`, and with one that needs escaping.
    @Test func anAPNsSentDetailIsTheTextOfItsMembers() throws {
        let facts = delivery(attempt: 1)
        for answered in [nil, "2F8A1C3E-0B4D-4E5F-9A6B-7C8D9E0F1A2B", "odd \"id\"\n\u{1}é"] as [String?] {
            let completion = CompletionFactory.completion(
                for: facts, outcome: .sent(providerMessageID: answered), provider: .apns, maxAttempts: 3,
                retryPolicy: policy, now: Self.now, unitRandom: 0)
            var members: [(key: String, value: String)] = [("apns_id", answered ?? facts.apnsID.uuidString.lowercased())]
            members.append(("provider", "apns"))
            if let answered { members.append(("provider_message_id", answered)) }
            let expected = JSONValue.objectText(ofStrings: members)
            #expect(Array(completion.detailJSON.utf8) == Array(expected.utf8), "\(String(describing: answered))")
            #expect(try detail(completion)["apns_id"] == .string(answered ?? facts.apnsID.uuidString.lowercased()))
        }
    }

    /// A send its FCM project's bucket held back (docs/fcm.md, "Project quota"): back when the refill reaches it,
    /// on its last attempt and past every uncounted retry allowed alike, with no attempt, no event and no
    /// uncounted retry spent.
    @Test func aSendHeldByItsProjectQuotaSpendsNothing() throws {
        var facts = delivery(attempt: 3)
        facts.uncountedRetries = 50
        let until = Self.now.addingTimeInterval(0.25)
        let completion = CompletionFactory.completion(
            for: facts, outcome: .retry(reason: CompletionFactory.projectQuotaReason, notBefore: until), provider: .fcm,
            maxAttempts: 3, maxUncountedRetries: 10, retryPolicy: policy, now: Self.now, unitRandom: 0.5)
        #expect(completion.event == .retrying)
        #expect(completion.reason == .fcmProjectQuota)
        #expect(completion.nextRunAt == until)
        #expect(completion.refundsAttempt)
        #expect(!completion.writesEvent)
        #expect(!completion.countsUncountedRetry)
    }

    @Test func retryIsRescheduledUntilTheLastAttempt() throws {
        let outcome = DeliveryOutcome.retry(reason: .serviceUnavailable)
        let early = CompletionFactory.completion(
            for: delivery(attempt: 2), outcome: outcome, provider: .apns, maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0)
        #expect(early.event == .retrying)
        #expect(early.reason == DeliveryReason.serviceUnavailable)
        #expect(early.nextRunAt == Self.now.addingTimeInterval(2))  // attempt 2: ceiling 4 s, jitter 0 -> 2 s
        #expect(try detail(early)["next_attempt_at"] != nil)

        let last = CompletionFactory.completion(
            for: delivery(attempt: 3), outcome: outcome, provider: .apns, maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0)
        #expect(last.event == .failed)
        #expect(last.reason == DeliveryReason.maxAttempts)
        #expect(last.nextRunAt == nil)
        #expect(try detail(last)["last_reason"] == "service_unavailable")
    }

    @Test func invalidationCarriesTheTokenTimestampSeen() {
        let claimed = delivery(attempt: 1)
        let completion = CompletionFactory.completion(
            for: claimed, outcome: .failed(reason: .unregistered, invalidateSubscription: true), provider: .apns,
            maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.invalidation?.subscriptionID == claimed.subscriptionID)
        #expect(completion.invalidation?.tokenUpdatedAt == claimed.tokenUpdatedAt)
        #expect(completion.nextRunAt == nil)
    }

    @Test func channelErrorPausesTheChannelNotTheSubscription() {
        let until = Self.now.addingTimeInterval(900)
        let completion = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .channelError(reason: .invalidProviderToken, pausedUntil: until),
            provider: .apns, maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.event == .retrying)
        #expect(completion.nextRunAt == until)
        #expect(completion.channelPause?.until == until)
        #expect(completion.channelPause?.provider == .apns)
        #expect(completion.invalidation == nil)
    }

    /// A delivery put back for its paused channel names that channel, so the worker can ask, once the batch is
    /// written, whether an operator resumed it meanwhile; no other completion does.
    @Test func aDeliveryPutBackForItsPausedChannelNamesTheChannel() throws {
        let paused = Date.distantFuture
        for provider in [Provider.apns, .fcm] {
            let completion = CompletionFactory.completion(
                for: delivery(attempt: 1),
                outcome: .retry(reason: .channelPaused, detail: ["provider": .string(provider.rawValue)], notBefore: paused),
                provider: nil, maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
            #expect(completion.event == .retrying && completion.heldByPausedChannel == provider)
        }
        let named = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .retry(reason: .channelPaused, notBefore: paused), provider: .webpush,
            maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(named.heldByPausedChannel == .webpush)
        for outcome in [DeliveryOutcome.retry(reason: .serviceUnavailable), .sent(providerMessageID: nil)] {
            let other = CompletionFactory.completion(
                for: delivery(attempt: 1), outcome: outcome, provider: .apns, maxAttempts: 3, retryPolicy: policy,
                now: Self.now, unitRandom: 0)
            #expect(other.heldByPausedChannel == nil)
        }
    }

    @Test func uncountedRetriesRefundTheAttemptAndNeverExhaustIt() throws {
        for reason in [DeliveryReason.channelPaused, .providerUnreachable, .messageUnavailable] {
            let completion = CompletionFactory.completion(
                for: delivery(attempt: 3), outcome: .retry(reason: reason), provider: .apns, maxAttempts: 3,
                retryPolicy: policy, now: Self.now, unitRandom: 0)
            #expect(completion.event == .retrying)
            #expect(completion.refundsAttempt)
            #expect(completion.nextRunAt != nil)
        }
        let counted = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: .retry(reason: .serviceUnavailable), provider: .apns,
            maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(!counted.refundsAttempt)
    }

    /// FCM `THIRD_PARTY_AUTH_ERROR` names the APNs or web push credential configured in Firebase: the delivery
    /// waits for the hold without spending an attempt, the channel is not paused, the subscription is kept.
    @Test func aRefusedPartialCredentialWaitsForItsHoldWithoutSpendingAnAttempt() throws {
        let until = Self.now.addingTimeInterval(300)
        let completion = CompletionFactory.completion(
            for: delivery(attempt: 3), outcome: .retry(reason: .thirdPartyAuthError, notBefore: until), provider: .fcm,
            maxAttempts: 3, retryPolicy: policy, now: Self.now, unitRandom: 0)
        #expect(completion.event == .retrying)
        #expect(completion.reason == DeliveryReason.thirdPartyAuthError)
        #expect(completion.nextRunAt == until)
        #expect(completion.refundsAttempt)
        #expect(completion.countsUncountedRetry)
        #expect(completion.channelPause == nil)
        #expect(completion.invalidation == nil)
    }

    /// A throttling answer's `Retry-After` (WNS 406 included) is a floor, and the retry still counts: it ends
    /// in `max_attempts` like any other, never invalidating the subscription.
    @Test func aThrottledRetryWaitsForRetryAfterAndCountsItsAttempt() throws {
        let floor = Self.now.addingTimeInterval(900)
        let outcome = DeliveryOutcome.retry(reason: .rateLimited, detail: ["status": 406], notBefore: floor)
        let early = CompletionFactory.completion(
            for: delivery(attempt: 1), outcome: outcome, provider: .webpush, maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0.99)
        #expect(early.event == .retrying)
        #expect(early.nextRunAt == floor)
        #expect(!early.refundsAttempt)
        #expect(try detail(early)["next_attempt_at"]?.stringValue == floor.formatted(.iso8601))
        let last = CompletionFactory.completion(
            for: delivery(attempt: 3), outcome: outcome, provider: .webpush, maxAttempts: 3, retryPolicy: policy,
            now: Self.now, unitRandom: 0)
        #expect(last.event == .failed)
        #expect(last.reason == DeliveryReason.maxAttempts)
        #expect(last.invalidation == nil)
    }

    @Test func outageBackoffGrowsWithTheMessagesAge() {
        // A message waiting for an hour retries within [180 s, 360 s), not every 2 s.
        let next = policy.nextAttemptDuringOutage(age: .seconds(3600), now: Self.now, unitRandom: 0)
        #expect(next == Self.now.addingTimeInterval(30))  // ceiling min(60, 360) = 60 -> 30 s with jitter 0
        let young = policy.nextAttemptDuringOutage(age: .seconds(1), now: Self.now, unitRandom: 0)
        #expect(young == Self.now.addingTimeInterval(1))  // ceiling = base 2 s
    }
}
