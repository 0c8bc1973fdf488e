import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// The order of checks before a send, with a provider that records what reaches it.
@Suite("DeliveryPipeline checks")
struct DeliveryPipelineTests {
    final class RecordingSender: ProviderSender {
        let provider = "apns"
        let sends = Counter()
        func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
            sends.increment()
            return .sent(providerMessageID: "ok")
        }
    }

    let sender = RecordingSender()
    let now = Date()

    func pipeline(message: String) -> DeliveryPipeline {
        DeliveryPipeline(
            senders: [sender], maxAttempts: 3, retryPolicy: RetryPolicy(baseDelay: 1, maximumDelay: 10),
            logger: Logger(label: "test", minimumLevel: .error),
            loadMessages: { ids in Dictionary(uniqueKeysWithValues: ids.map { ($0, .init(version: "1", byteCount: message.utf8.count, json: message)) }) })
    }

    func delivery(
        attempt: Int = 1, status: String = "expanded", platform: String = "ios", subscription: String = "active",
        channel: String? = "apns", pausedUntil: Date? = nil, start: Date? = nil
    ) -> ClaimedDelivery {
        ClaimedDelivery(
            id: 1, fence: 1, attempt: attempt, notificationID: UUID(), subscriptionID: UUID(), appID: UUID(),
            apnsID: UUID(), messageVersion: "1", campaignID: nil, notificationStatus: status,
            notificationStart: start ?? now, platform: platform, token: "a0", apnsEnvironment: nil, language: "en",
            timezone: nil, country: nil, subscriptionStatus: subscription, tokenUpdatedAt: now, userTagsJSON: nil,
            defaultLanguage: "en", defaultTimezone: nil, signingKey: [1], channelProvider: channel,
            channelSettingsJSON: "{}", channelEndpoint: nil, channelPausedUntil: pausedUntil)
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
}
