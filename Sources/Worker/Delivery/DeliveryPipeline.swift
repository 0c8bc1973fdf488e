import DeliveryCore
import Foundation
import Synchronization

/// The per-delivery path: checks in a fixed order (canceled -> message valid -> expired -> subscription
/// active -> platform and channel -> send), then the provider sender, then the completion with its event.
public final class DeliveryPipeline: DeliveryProcessing {
    /// Apple's and Google's default storage time when a message gives no `ttl`: 4 weeks, in seconds.
    public static let defaultTTL: Int64 = 2_419_200
    /// Seconds a channel stays paused after a credential or configuration error when the provider gave no
    /// better hint.
    public static let defaultChannelPause: Double = 300

    private let senders: [String: any ProviderSender]
    private let maxAttempts: Int
    private let retryPolicy: RetryPolicy
    private let logger: Logger
    private let warnings = LogOnce()
    /// Parsed messages by notification: a broadcast's thousands of deliveries share one message, and
    /// Foundation's JSON parsing is the costliest step of the per-delivery path.
    private let messages = MessageCache(capacity: 4096)

    public init(senders: [any ProviderSender], maxAttempts: Int, retryPolicy: RetryPolicy, logger: Logger) {
        self.senders = Dictionary(senders.map { ($0.provider, $0) }, uniquingKeysWith: { first, _ in first })
        self.maxAttempts = maxAttempts
        self.retryPolicy = retryPolicy
        self.logger = logger
    }

    public func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion {
        let now = Date()
        let (outcome, provider) = await decide(delivery, now: now)
        return CompletionFactory.completion(
            for: delivery, outcome: outcome, provider: provider, maxAttempts: maxAttempts,
            retryPolicy: retryPolicy, now: now, unitRandom: Double.random(in: 0..<1))
    }

    func decide(_ delivery: ClaimedDelivery, now: Date) async -> (DeliveryOutcome, String?) {
        if delivery.notificationStatus == "canceled" {
            return (.skipped(reason: "canceled"), nil)
        }
        let message: NotificationMessage
        switch messages.message(for: delivery.notificationID, json: delivery.messageJSON) {
        case .success(let parsed): message = parsed
        case .failure(let invalid): return (invalid.outcome, nil)
        }
        let ttl = message.ttl.map(Int64.init) ?? Self.defaultTTL
        let expiresAt = delivery.notificationStart.addingTimeInterval(Double(ttl))
        if expiresAt < now {
            return (.skipped(reason: "expired", detail: ["expired_at": .string(expiresAt.formatted(.iso8601))]), nil)
        }
        if delivery.subscriptionStatus != "active" {
            return (.skipped(reason: "subscription_inactive", detail: ["status": .string(delivery.subscriptionStatus)]), nil)
        }
        guard let provider = PlatformProvider.provider(forPlatform: delivery.platform) else {
            return (.failed(reason: "unknown_platform", detail: ["platform": .string(delivery.platform)]), nil)
        }
        guard delivery.channelProvider != nil else {
            if warnings.firstTime("no_channel:\(delivery.appID):\(provider)") {
                logger.warning("app has no channel for this provider; its deliveries are skipped",
                               ["app_id": delivery.appID.uuidString.lowercased(), "provider": provider])
            }
            return (.skipped(reason: "no_channel", detail: ["provider": .string(provider)]), provider)
        }
        if let pausedUntil = delivery.channelPausedUntil, pausedUntil > now {
            return (.retry(reason: "channel_paused", detail: ["provider": .string(provider)], notBefore: pausedUntil), provider)
        }
        guard let sender = senders[provider] else {
            return (.failed(reason: "provider_not_supported", detail: ["provider": .string(provider)]), provider)
        }
        return (await sender.send(delivery, message: message, now: now), provider)
    }
}

/// Turns an outcome into the queue change and the event row (DESIGN.md §3 event names).
public enum CompletionFactory {
    /// - Parameters:
    ///   - unitRandom: jitter draw in `0..<1` for the retry time.
    /// A `retry` on the last allowed attempt becomes `failed` with reason `max_attempts`.
    public static func completion(
        for delivery: ClaimedDelivery, outcome: DeliveryOutcome, provider: String?, maxAttempts: Int,
        retryPolicy: RetryPolicy, now: Date, unitRandom: Double
    ) -> DeliveryCompletion {
        func make(_ event: String, _ reason: String?, _ detail: JSONValue, next: Date?) -> DeliveryCompletion {
            var members = detail.objectValue ?? (detail.isNull ? [:] : ["info": detail])
            if let provider, members["provider"] == nil { members["provider"] = .string(provider) }
            return DeliveryCompletion(
                deliveryID: delivery.id, fence: delivery.fence, event: event, reason: reason,
                detailJSON: JSONValue.object(members).jsonText, nextRunAt: next)
        }
        switch outcome {
        case .sent(let providerMessageID):
            var detail: [String: JSONValue] = [:]
            if let providerMessageID { detail["provider_message_id"] = .string(providerMessageID) }
            if provider == "apns" { detail["apns_id"] = .string(providerMessageID ?? delivery.apnsID.uuidString.lowercased()) }
            return make("sent", nil, .object(detail), next: nil)
        case .failed(let reason, let detail, let invalidate):
            var completion = make("failed", reason, detail, next: nil)
            if invalidate {
                completion.invalidation = SubscriptionInvalidation(
                    subscriptionID: delivery.subscriptionID, reason: reason, tokenUpdatedAt: delivery.tokenUpdatedAt)
            }
            return completion
        case .retry(let reason, let detail, let notBefore):
            if delivery.attempt >= maxAttempts {
                var members = detail.objectValue ?? [:]
                members["last_reason"] = .string(reason)
                members["attempts"] = .int(Int64(delivery.attempt))
                return make("failed", "max_attempts", .object(members), next: nil)
            }
            let next = retryPolicy.nextAttempt(
                after: delivery.attempt, now: now, unitRandom: unitRandom, notBefore: notBefore)
            var members = detail.objectValue ?? [:]
            members["next_attempt_at"] = .string(next.formatted(.iso8601))
            return make("retrying", reason, .object(members), next: next)
        case .channelError(let reason, let detail, let pausedUntil):
            let until = pausedUntil ?? now.addingTimeInterval(DeliveryPipeline.defaultChannelPause)
            var members = detail.objectValue ?? [:]
            members["next_attempt_at"] = .string(until.formatted(.iso8601))
            members["channel_paused_until"] = .string(until.formatted(.iso8601))
            var completion = make("retrying", reason, .object(members), next: until)
            if let provider {
                completion.channelPause = ChannelPause(appID: delivery.appID, provider: provider, until: until, reason: reason)
            }
            return completion
        case .skipped(let reason, let detail):
            return make("skipped", reason, detail, next: nil)
        case .deferred(let until, let detail):
            var members = detail.objectValue ?? [:]
            members["until"] = .string(until.formatted(.iso8601))
            return make("deferred", "quiet_hours", .object(members), next: until)
        }
    }
}

/// A bounded cache of parsed `notifications.message` documents, keyed by notification id and checked against
/// the JSON text (so an edited row is parsed again). When full it starts over: simple, and a broadcast's
/// deliveries arrive together anyway.
final class MessageCache: Sendable {
    private struct Entry {
        var json: String
        var result: Result<NotificationMessage, InvalidMessage>
    }

    struct InvalidMessage: Error {
        var outcome: DeliveryOutcome
    }

    private let capacity: Int
    private let entries = Mutex<[UUID: Entry]>([:])

    init(capacity: Int) {
        self.capacity = capacity
    }

    /// The parsed message, or the `failed` / `invalid_message` outcome naming the bad field.
    func message(for notificationID: UUID, json: String) -> Result<NotificationMessage, InvalidMessage> {
        if let entry = entries.withLock({ $0[notificationID] }), entry.json == json {
            return entry.result
        }
        let result: Result<NotificationMessage, InvalidMessage>
        do {
            result = .success(try NotificationMessage(json: try JSONValue(parsing: json)))
        } catch let error as MessageError {
            result = .failure(InvalidMessage(outcome: error.outcome))
        } catch {
            result = .failure(
                InvalidMessage(outcome: .failed(reason: "invalid_message", detail: ["error": "message is not valid JSON"])))
        }
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[notificationID] = Entry(json: json, result: result)
        }
        return result
    }
}
