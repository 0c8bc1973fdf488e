import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// Retries that spend no attempt still end, and write a bounded number of events; a delivery whose lease
/// is about to run out goes back unsent; a send that overruns its deadline is cancelled.
@Suite("Retry bounds and per-delivery deadline")
struct RetryBoundsTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = RetryPolicy(baseDelay: .seconds(2), maximumDelay: .seconds(60))

    func delivery(uncountedRetries: Int) -> ClaimedDelivery {
        ClaimedDelivery(
            id: 7, fence: 3, attempt: 1, notificationID: UUID(), subscriptionID: UUID(), appID: UUID(),
            apnsID: UUID(), messageVersion: "1", campaignID: nil, notificationStatus: "expanded",
            notificationStart: Self.now, platform: "ios", token: "a0", apnsEnvironment: nil, language: nil,
            timezone: nil, country: nil, subscriptionStatus: "active", tokenUpdatedAt: Self.now, userTagsJSON: nil,
            defaultLanguage: "en", defaultTimezone: "UTC", signingKey: [1], channelProvider: "apns",
            channelSettingsJSON: "{}", channelEndpoint: nil, channelPausedUntil: nil, uncountedRetries: uncountedRetries)
    }

    /// A pipeline whose messages all parse and whose frequency caps always grant.
    func pipeline(_ sender: any ProviderSender, deliveryTimeout: Duration) -> DeliveryPipeline {
        DeliveryPipeline(
            senders: [sender], maxAttempts: 3, retryPolicy: policy, logger: Logger(label: "test", minimumLevel: .error),
            deliveryTimeout: deliveryTimeout,
            loadMessages: { ids in
                Dictionary(uniqueKeysWithValues: ids.map { ($0, .init(version: "1", byteCount: 26, json: #"{"contents": {"en": "hi"}}"#)) })
            },
            reserveFrequencyCap: { _ in .granted(reused: false) })
    }

    func completion(_ outcome: DeliveryOutcome, uncountedRetries: Int, max: Int = 10) -> DeliveryCompletion {
        CompletionFactory.completion(
            for: delivery(uncountedRetries: uncountedRetries).completionFacts, outcome: outcome, provider: .apns, maxAttempts: 3,
            maxUncountedRetries: max, retryPolicy: policy, now: Self.now, unitRandom: 0)
    }

    @Test(arguments: [DeliveryReason.providerUnreachable, .channelPaused, .capUnavailable, .messageUnavailable])
    func uncountedRetriesEndWithRetriesExhausted(reason: DeliveryReason) throws {
        let last = completion(.retry(reason: reason), uncountedRetries: 9)
        #expect(last.event == .retrying)
        #expect(last.countsUncountedRetry)
        let over = completion(.retry(reason: reason), uncountedRetries: 10)
        #expect(over.event == .failed)
        #expect(over.reason == DeliveryReason.retriesExhausted)
        #expect(over.nextRunAt == nil)
        let detail = try JSONValue(parsing: over.detailJSON)
        #expect(detail["last_reason"] == .string(reason.rawValue))
        #expect(detail["uncounted_retries"] == .int(10))
    }

    @Test func onlyTheFirstUncountedRetriesWriteAnEvent() {
        let limit = CompletionFactory.retryingEventsWithoutAttempt
        let written = (0..<20).filter { completion(.retry(reason: .providerUnreachable), uncountedRetries: $0, max: 100).writesEvent }
        #expect(written == Array(0..<limit))
        // Counted retries always write theirs (bounded by max attempts).
        #expect(completion(.retry(reason: .serviceUnavailable), uncountedRetries: 50, max: 100).writesEvent)
    }

    @Test func channelErrorsAreBoundedTooAndStillPauseTheChannel() {
        let paused = completion(.channelError(reason: .invalidProviderToken), uncountedRetries: 2)
        #expect(paused.event == .retrying)
        #expect(paused.countsUncountedRetry)
        #expect(paused.writesEvent)
        let over = completion(.channelError(reason: .invalidProviderToken), uncountedRetries: 10)
        #expect(over.event == .failed)
        #expect(over.reason == DeliveryReason.retriesExhausted)
        #expect(over.channelPause != nil)
    }

    @Test func aDeliveryPutBackForItsLeaseSpendsNothingAndWritesNoEvent() {
        let completion = completion(.retry(reason: CompletionFactory.leaseExpiringReason), uncountedRetries: 0)
        #expect(completion.nextRunAt == Self.now)
        #expect(completion.refundsAttempt)
        #expect(!completion.writesEvent)
        #expect(!completion.countsUncountedRetry)
    }

    /// Withdrawn from behind a push service with every stream in use: back after the outage backoff, with no
    /// event and no count towards `retries_exhausted`, however often (a long broadcast through a slow push
    /// service can be withdrawn many times).
    @Test func aDeliveryWithdrawnFromABusyOriginSpendsNothingAndNeverRunsOutOfRetries() {
        for uncounted in [0, 10, 1_000] {
            let completion = completion(.retry(reason: CompletionFactory.originBusyReason), uncountedRetries: uncounted)
            #expect(completion.event == .retrying)
            #expect(completion.refundsAttempt && !completion.writesEvent && !completion.countsUncountedRetry)
            // The message is as old as `now`: the base delay's ceiling (2 s), drawn from its upper half.
            #expect(completion.nextRunAt.map { $0 >= Self.now.addingTimeInterval(1) && $0 <= Self.now.addingTimeInterval(2) } == true)
        }
    }

    @Test func noSendStartsOnALeaseAboutToRunOut() async {
        let sender = DeliveryPipelineTests.RecordingSender()
        let pipeline = pipeline(sender, deliveryTimeout: .seconds(10))
        var late = delivery(uncountedRetries: 0)
        late.notificationStart = Date()
        late.leaseExpiry = .now + .seconds(5)
        let putBack = await pipeline.process(late)
        #expect(putBack.reason == CompletionFactory.leaseExpiringReason)
        #expect(putBack.refundsAttempt && !putBack.writesEvent)
        #expect(sender.sends.value == 0)
        var fresh = late
        fresh.leaseExpiry = .now + .seconds(60)
        let sent = await pipeline.process(fresh)
        #expect(sent.event == .sent)
        #expect(sender.sends.value == 1)
    }

    /// A provider exchange that never ends on its own (a token endpoint or push service that holds the
    /// request): it notes whether it was cancelled.
    final class HangingSender: OneByOneSender {
        let provider = Provider.apns
        let cancelled = Counter()
        func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
            try? await Task.sleep(for: .seconds(600))
            if Task.isCancelled { cancelled.increment() }
            return .sent(providerMessageID: nil)
        }
    }

    @Test func theDeliveryDeadlineCancelsTheWholeExchange() async {
        let sender = HangingSender()
        let pipeline = pipeline(sender, deliveryTimeout: .milliseconds(50))
        var claimed = delivery(uncountedRetries: 0)
        claimed.notificationStart = Date()
        let completion = await pipeline.process(claimed)
        #expect(completion.event == .retrying)
        #expect(completion.reason == DeliveryReason.deadlineExceeded)
        #expect(!completion.refundsAttempt)
        #expect(sender.cancelled.value == 1)
    }
}
