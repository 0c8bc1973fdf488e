import DeliveryCore
import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// The order of checks before a send, with a provider that records what reaches it.
@Suite("DeliveryPipeline checks")
struct DeliveryPipelineTests {
    final class RecordingSender: OneByOneSender {
        let provider = Provider.apns
        let sends = Counter()
        func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
            sends.increment()
            return .sent(providerMessageID: "ok")
        }
    }

    let sender = RecordingSender()
    let now = Date()
    /// Reservations asked for; the answer is `capAnswer` (nil: the database is unreachable).
    final class CapStub: Sendable {
        let requests = Mutex<[FrequencyCapRequest]>([])
        let answer = Mutex<FrequencyCapDecision?>(.granted(reused: false))
    }
    let stub = CapStub()

    func pipeline(message: String) -> DeliveryPipeline {
        DeliveryPipeline(
            senders: [sender], maxAttempts: 3, retryPolicy: RetryPolicy(baseDelay: .seconds(1), maximumDelay: .seconds(10)),
            logger: Logger(label: "test", minimumLevel: .error),
            loadMessages: { ids in Dictionary(uniqueKeysWithValues: ids.map { ($0, .init(version: "1", byteCount: message.utf8.count, json: message)) }) },
            reserveFrequencyCap: { [stub] request in
                stub.requests.withLock { $0.append(request) }
                guard let answer = stub.answer.withLock({ $0 }) else {
                    throw PostgresError(code: .connectionFailed, message: "no database in this test")
                }
                return answer
            })
    }

    func delivery(
        attempt: Int = 1, status: String = "expanded", platform: String = "ios", subscription: String = "active",
        channel: String? = "apns", pausedUntil: Date? = nil, start: Date? = nil, caps: String? = nil,
        user: UUID? = nil, quietHours: Bool = false
    ) -> ClaimedDelivery {
        var claimed = ClaimedDelivery(
            id: 1, fence: 1, attempt: attempt, notificationID: UUID(), subscriptionID: UUID(), appID: UUID(),
            apnsID: UUID(), messageVersion: "1", campaignID: nil, notificationStatus: status,
            notificationStart: start ?? now, platform: platform, token: "a0", apnsEnvironment: nil, language: "en",
            timezone: nil, country: nil, subscriptionStatus: subscription, tokenUpdatedAt: now, userTagsJSON: nil,
            defaultLanguage: "en", defaultTimezone: nil, signingKey: [1], channelProvider: channel,
            channelSettingsJSON: "{}", channelEndpoint: nil, channelPausedUntil: pausedUntil)
        claimed.frequencyCapsJSON = caps
        claimed.userID = user
        if quietHours {
            // All day but one second: any `now` is inside it.
            claimed.quietHoursStart = "00:00:00"
            claimed.quietHoursEnd = "23:59:59"
        }
        return claimed
    }

    func outcome(_ delivery: ClaimedDelivery, message: String = #"{"contents": {"en": "hi"}}"#) async -> String {
        let (outcome, _) = await pipeline(message: message).decide(delivery, now: now)
        switch outcome {
        case .sent: return "sent"
        case .failed(let reason, _, _): return "failed/\(reason)"
        case .retry(let reason, _, _): return "retrying/\(reason)"
        case .skipped(let reason, _): return "skipped/\(reason)"
        case .channelError(let reason, _, _): return "channel/\(reason)"
        case .deferred: return "deferred"
        }
    }

    /// An outcome decided before a provider was chosen (a message that cannot be sent) counts under the
    /// platform's provider; only an unknown platform's counts as `none`.
    @Test func outcomesBeforeAProviderCountUnderThePlatformsProvider() async {
        let metrics = WorkerMetrics()
        let counted = DeliveryPipeline(
            senders: [sender], maxAttempts: 3, retryPolicy: RetryPolicy(baseDelay: .seconds(1), maximumDelay: .seconds(10)),
            logger: Logger(label: "test", minimumLevel: .error),
            loadMessages: { ids in Dictionary(uniqueKeysWithValues: ids.map { ($0, .init(version: "1", byteCount: 14, json: #"{"contents": 5}"#)) }) },
            reserveFrequencyCap: { _ in .granted(reused: false) }, metrics: metrics)
        _ = await counted.process(delivery())
        _ = await counted.process(delivery(platform: "fcm-typo"))
        let text = metrics.registry.render()
        #expect(text.contains(#"pushizo_deliveries_total{provider="apns",event="failed",reason="invalid_message"} 1"#), "\(text)")
        #expect(text.contains(#"pushizo_deliveries_total{provider="none",event="failed",reason="invalid_message"} 1"#), "\(text)")
    }

    @Test func checksInOrderBeforeSending() async {
        #expect(await outcome(delivery()) == "sent")
        #expect(await outcome(delivery(attempt: 4)) == "failed/max_attempts")
        #expect(await outcome(delivery(status: "canceled")) == "skipped/canceled")
        #expect(await outcome(delivery(), message: #"{"contents": 5}"#) == "failed/invalid_message")
        #expect(await outcome(delivery(start: now.addingTimeInterval(-100)), message: #"{"contents": {"en": "x"}, "ttl": 60}"#) == "skipped/expired")
        #expect(await outcome(delivery(subscription: "invalid")) == "skipped/subscription_inactive")
        #expect(await outcome(delivery(platform: "fridge")) == "failed/unknown_platform")
        #expect(await outcome(delivery(channel: nil)) == "skipped/no_channel")
        #expect(await outcome(delivery(pausedUntil: now.addingTimeInterval(60))) == "retrying/channel_paused")
        #expect(await outcome(delivery(platform: "android", channel: "fcm")) == "failed/provider_not_supported")
        #expect(sender.sends.value == 1)
    }

    @Test func ttlZeroIsOneAttemptHoweverLate() async {
        let message = #"{"contents": {"en": "now or never"}, "ttl": 0}"#
        #expect(await outcome(delivery(attempt: 1, start: now.addingTimeInterval(-30)), message: message) == "sent")
        #expect(await outcome(delivery(attempt: 2, start: now.addingTimeInterval(-30)), message: message) == "skipped/expired")
        #expect(sender.sends.value == 1)
    }

    static let caps = #"[{"max": 3, "per_seconds": 86400}]"#

    @Test func frequencyCapComesAfterEveryOtherCheckAndOnlyForCappedMessages() async {
        let user = UUID()
        // Stopped earlier: no reservation is asked for, so no grant is used.
        #expect(await outcome(delivery(subscription: "invalid", caps: Self.caps)) == "skipped/subscription_inactive")
        #expect(await outcome(delivery(caps: Self.caps, quietHours: true)) == "deferred")
        #expect(await outcome(delivery(pausedUntil: now.addingTimeInterval(60), caps: Self.caps)) == "retrying/channel_paused")
        #expect(await outcome(delivery(platform: "android", channel: "fcm", caps: Self.caps)) == "failed/provider_not_supported")
        // Exempt and silent messages neither check nor count; no caps, empty or malformed caps: no check.
        #expect(await outcome(delivery(caps: Self.caps), message: #"{"contents": {"en": "x"}, "frequency_cap_exempt": true}"#) == "sent")
        #expect(await outcome(delivery(caps: Self.caps), message: #"{"content_available": true}"#) == "sent")
        #expect(await outcome(delivery(caps: "[]")) == "sent")
        #expect(await outcome(delivery(caps: #"[{"max": 3, "per_second": 60}]"#)) == "sent")
        #expect(stub.requests.withLock { $0.isEmpty })
        // A capped message asks, keyed by the user (else the subscription).
        let withUser = delivery(caps: Self.caps, user: user)
        #expect(await outcome(withUser) == "sent")
        let anonymous = delivery(caps: Self.caps)
        #expect(await outcome(anonymous) == "sent")
        let asked = stub.requests.withLock { $0 }
        #expect(asked.map(\.capKey) == [user, anonymous.subscriptionID])
        #expect(asked.first?.caps == FrequencyCaps(rules: [FrequencyCapRule(max: 3, perSeconds: 86400)]))
        #expect(asked.first?.notificationID == withUser.notificationID)
        #expect(sender.sends.value == 6)
    }

    @Test func deniedIsSkippedAndAnUnreachableDatabaseIsAnUncountedRetry() async {
        stub.answer.withLock { $0 = .denied(rule: FrequencyCapRule(max: 3, perSeconds: 86400), used: 3) }
        let (denied, _) = await pipeline(message: #"{"contents": {"en": "x"}}"#).decide(delivery(caps: Self.caps), now: now)
        #expect(denied == .skipped(reason: .frequencyCapped, detail: denied.detailForTest))
        #expect(denied.detailForTest["used"] == 3)
        #expect(denied.detailForTest["max"] == 3)
        stub.answer.withLock { $0 = nil }
        #expect(await outcome(delivery(caps: Self.caps)) == "retrying/cap_unavailable")
        #expect(CompletionFactory.uncountedRetryReasons.contains(DeliveryReason.capUnavailable))
        #expect(sender.sends.value == 0)
    }

    @Test func terminalNonSentCompletionsOfCappedAppsCarryARelease() async {
        let user = UUID()
        let failing = pipeline(message: #"{"contents": 5}"#)
        let failed = await failing.process(delivery(caps: Self.caps, user: user))
        #expect(failed.event == .failed)
        #expect(failed.capRelease?.capKey == user)
        let uncapped = await failing.process(delivery(caps: "[]", user: user))
        #expect(uncapped.capRelease == nil)
        let sent = await pipeline(message: #"{"contents": {"en": "x"}}"#).process(delivery(caps: Self.caps, user: user))
        #expect(sent.event == .sent)
        #expect(sent.capRelease == nil)
        stub.answer.withLock { $0 = .denied(rule: FrequencyCapRule(max: 1, perSeconds: 60), used: 1) }
        let capped = await pipeline(message: #"{"contents": {"en": "x"}}"#).process(delivery(caps: Self.caps, user: user))
        #expect(capped.reason == DeliveryReason.frequencyCapped)
        #expect(capped.capRelease == nil)
    }
}

extension DeliveryOutcome {
    fileprivate var detailForTest: JSONValue {
        if case .skipped(_, let detail) = self { return detail }
        return .null
    }
}
