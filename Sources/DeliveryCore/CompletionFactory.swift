import Foundation
import UUIDText

/// The claim's facts the after-send policy (``CompletionFactory``) reads: which delivery and claim, how many
/// attempts and uncounted retries it has had, and the instants its backoff and invalidation are judged by.
public struct ClaimFacts: Sendable, Equatable {
    /// The row or page the delivery was leased through.
    public var source: DeliverySource
    /// The claim's fencing token; the completion carries it back.
    public var fence: Int64
    /// The claim's attempt number (1 for the first send attempt).
    public var attempt: Int
    /// `deliveries.uncounted_retries`: retries so far that spent no attempt.
    public var uncountedRetries: Int
    public var appID: UUID
    public var notificationID: UUID
    public var subscriptionID: UUID
    /// APNs's `apns-id` of the delivery, stable over its attempts.
    public var apnsID: UUID
    /// `coalesce(send_after, created_at)`: the message's age, which paces uncounted retries, counts from it.
    public var notificationStart: Date
    /// `subscriptions.token_updated_at` as claimed: an invalidation applies only while it is unchanged.
    public var tokenUpdatedAt: Date
    /// The delivery's queue lane (`deliveries.lane`; docs/scale-out.md, "The shape: queue lanes"): 0 on a single
    /// node; on a Citus-distributed queue the lane it was claimed in, which its completion names.
    public var lane: Int32 = 0

    public init(
        source: DeliverySource, fence: Int64, attempt: Int, uncountedRetries: Int = 0, appID: UUID, notificationID: UUID,
        subscriptionID: UUID, apnsID: UUID, notificationStart: Date, tokenUpdatedAt: Date
    ) {
        self.source = source
        self.fence = fence
        self.attempt = attempt
        self.uncountedRetries = uncountedRetries
        self.appID = appID
        self.notificationID = notificationID
        self.subscriptionID = subscriptionID
        self.apnsID = apnsID
        self.notificationStart = notificationStart
        self.tokenUpdatedAt = tokenUpdatedAt
    }
}

/// Turns an outcome into the queue change and the event row (the event names of docs/producer-contract.md).
public enum CompletionFactory {
    /// How long a channel stays paused after a credential or configuration error when the provider gave no
    /// better hint.
    public static let defaultChannelPause: Duration = .seconds(300)

    /// Retry reasons that do not count as a send attempt, because the request never reached the provider, or
    /// because the app's configuration, not this push, was refused: FCM `THIRD_PARTY_AUTH_ERROR` names the APNs
    /// or web push credential configured in Firebase, and the subscription it was refused for is held
    /// (``CredentialHolds``) as a paused channel holds all of them. Such deliveries wait out the outage (backing
    /// off) until their `ttl` expires or `PUSHIZO_MAX_UNCOUNTED_RETRIES` ends them, never `max_attempts`.
    public static let uncountedRetryReasons: Set<DeliveryReason> = [
        .channelPaused, .providerUnreachable, .messageUnavailable, .capUnavailable, .thirdPartyAuthError,
    ]

    /// How many retries spending no attempt write a `retrying` event; later ones change the queue row only
    /// (its `last_error`), so a long outage adds a bounded number of events per delivery.
    public static let retryingEventsWithoutAttempt = 5

    /// The retry reason of a delivery put back in the queue unsent because its lease had less than the
    /// per-delivery deadline left: no attempt spent, no event written, not counted as an uncounted retry
    /// (the worker, not the delivery, was late).
    public static let leaseExpiringReason = DeliveryReason.leaseExpiring

    /// The retry reason of a delivery whose request was withdrawn unsent after waiting for a stream (`HTTP2Error
    /// .originBusy`: every stream of the push service in use, or its connection not open): no attempt spent, no
    /// event written, not counted as an uncounted retry, and back at the origin's ticket (``OriginPacing``), or
    /// after the outage backoff when it has none.
    public static let originBusyReason = DeliveryReason.originBusy

    /// The retry reason of an FCM delivery its project's fleet-wide bucket held back unsent
    /// (``DeliveryReason/fcmProjectQuota``): no attempt spent, no event written, not counted as an uncounted retry
    /// (the project's quota, not the delivery, is short), back when the bucket's refill reaches it.
    public static let projectQuotaReason = DeliveryReason.fcmProjectQuota

    /// - Parameters:
    ///   - maxUncountedRetries: retries spending no attempt allowed before `failed` / `retries_exhausted`.
    ///   - unitRandom: jitter draw in `0..<1` for the retry time, drawn only for a retry (the system generator is
    ///     a `getrandom` system call, once per delivery for nothing when most are sent).
    /// A counted `retry` on the last allowed attempt becomes `failed` with reason `max_attempts`; an
    /// uncounted one (or a channel error) past `maxUncountedRetries` becomes `failed` / `retries_exhausted`.
    public static func completion(
        for delivery: ClaimFacts, outcome: DeliveryOutcome, provider: Provider?, maxAttempts: Int,
        maxUncountedRetries: Int = .max, retryPolicy: RetryPolicy, now: Date, unitRandom: @autoclosure () -> Double
    ) -> DeliveryCompletion {
        func make(_ event: DeliveryEvent, _ reason: DeliveryReason?, detailJSON: String, next: Date?) -> DeliveryCompletion {
            var completion = DeliveryCompletion(
                source: delivery.source, fence: delivery.fence, event: event, reason: reason,
                detailJSON: detailJSON, nextRunAt: next)
            completion.claimedAs = DeliveryCompletion.Claim(
                appID: delivery.appID, notificationID: delivery.notificationID,
                subscriptionID: delivery.subscriptionID, attempt: delivery.attempt)
            completion.claimedAs?.apnsID = delivery.apnsID
            completion.lane = delivery.lane
            return completion
        }
        func make(_ event: DeliveryEvent, _ reason: DeliveryReason?, _ detail: JSONValue, next: Date?) -> DeliveryCompletion {
            var members = detail.objectValue ?? (detail.isNull ? [:] : ["info": detail])
            if let provider, members["provider"] == nil { members["provider"] = .string(provider.rawValue) }
            var completion = make(event, reason, detailJSON: JSONValue.object(members).jsonText, next: next)
            if reason == .channelPaused, next != nil {
                completion.heldByPausedChannel = provider ?? members["provider"]?.stringValue.flatMap(Provider.init(rawValue:))
            }
            return completion
        }
        switch outcome {
        case .sent(let providerMessageID):
            // The most common event: its detail (all strings) is written without building a JSON object, and an
            // APNs one, whose members are known in order, without sorting them either.
            if provider == .apns {
                return make(
                    .sent, nil, detailJSON: apnsSentDetail(apnsID: delivery.apnsID, providerMessageID: providerMessageID),
                    next: nil)
            }
            var detail: [(key: String, value: String)] = []
            if let providerMessageID { detail.append(("provider_message_id", providerMessageID)) }
            if let provider { detail.append(("provider", provider.rawValue)) }
            return make(.sent, nil, detailJSON: JSONValue.objectText(ofStrings: detail), next: nil)
        case .failed(let reason, let detail, let invalidate):
            var completion = make(.failed, reason, detail, next: nil)
            if invalidate {
                completion.invalidation = SubscriptionInvalidation(
                    subscriptionID: delivery.subscriptionID, reason: reason, tokenUpdatedAt: delivery.tokenUpdatedAt)
            }
            return completion
        case .retry(let reason, _, _) where reason == leaseExpiringReason:
            var completion = make(.retrying, reason, .object([:]), next: now)
            completion.refundsAttempt = true
            completion.writesEvent = false
            return completion
        case .retry(let reason, _, let notBefore?) where reason == projectQuotaReason:
            var completion = make(.retrying, reason, .object([:]), next: max(notBefore, now))
            completion.refundsAttempt = true
            completion.writesEvent = false
            return completion
        case .retry(let reason, _, let notBefore) where reason == originBusyReason:
            // Back at the origin's ticket (``OriginPacing``: about when the push service can take it), or paced
            // like an outage without one; neither an event nor a retry counted towards `retries_exhausted`: the
            // delivery did nothing wrong, and a broadcast draining for an hour through a slow push service must
            // not run out of retries.
            let next =
                notBefore
                ?? retryPolicy.nextAttemptDuringOutage(
                    age: .seconds(now.timeIntervalSince(delivery.notificationStart)), now: now, unitRandom: unitRandom())
            var completion = make(.retrying, reason, .object([:]), next: next)
            completion.refundsAttempt = true
            completion.writesEvent = false
            return completion
        case .retry(let reason, let detail, let notBefore):
            let counted = !uncountedRetryReasons.contains(reason)
            if counted && delivery.attempt >= maxAttempts {
                var members = detail.objectValue ?? [:]
                members["last_reason"] = .string(reason.rawValue)
                members["attempts"] = .int(Int64(delivery.attempt))
                return make(.failed, .maxAttempts, .object(members), next: nil)
            }
            if !counted && delivery.uncountedRetries >= maxUncountedRetries {
                return make(.failed, .retriesExhausted, exhaustedDetail(detail, reason: reason, count: delivery.uncountedRetries), next: nil)
            }
            // Uncounted retries back off by how long the message has waited, not by attempts.
            let next =
                counted
                ? retryPolicy.nextAttempt(after: delivery.attempt, now: now, unitRandom: unitRandom(), notBefore: notBefore)
                : retryPolicy.nextAttemptDuringOutage(
                    age: .seconds(now.timeIntervalSince(delivery.notificationStart)), now: now, unitRandom: unitRandom(),
                    notBefore: notBefore)
            var members = detail.objectValue ?? [:]
            members["next_attempt_at"] = .string(next.formatted(.iso8601))
            var completion = make(.retrying, reason, .object(members), next: next)
            completion.refundsAttempt = !counted
            completion.countsUncountedRetry = !counted
            completion.writesEvent = counted || delivery.uncountedRetries < retryingEventsWithoutAttempt
            return completion
        case .channelError(let reason, let detail, let pausedUntil):
            let until = pausedUntil ?? now.addingTimeInterval(defaultChannelPause.inSeconds)
            if delivery.uncountedRetries >= maxUncountedRetries {
                // The channel still pauses (the event carries it); this delivery waits no more.
                var completion = make(.failed, .retriesExhausted, exhaustedDetail(detail, reason: reason, count: delivery.uncountedRetries), next: nil)
                if let provider {
                    completion.channelPause = ChannelPause(appID: delivery.appID, provider: provider, until: until, reason: reason)
                }
                return completion
            }
            var members = detail.objectValue ?? [:]
            members["next_attempt_at"] = .string(until.formatted(.iso8601))
            members["channel_paused_until"] = .string(until.formatted(.iso8601))
            var completion = make(.retrying, reason, .object(members), next: until)
            // The provider refused the app's credentials, not this push: the attempt does not count. Its event
            // is always written (it carries the channel pause), so these are bounded by maxUncountedRetries.
            completion.refundsAttempt = true
            completion.countsUncountedRetry = true
            if let provider {
                completion.channelPause = ChannelPause(appID: delivery.appID, provider: provider, until: until, reason: reason)
            }
            return completion
        case .skipped(let reason, let detail):
            return make(.skipped, reason, detail, next: nil)
        case .deferred(let until, let detail, let reason):
            var members = detail.objectValue ?? [:]
            members["until"] = .string(until.formatted(.iso8601))
            var completion = make(.deferred, reason, .object(members), next: until)
            completion.refundsAttempt = true
            return completion
        }
    }

    /// `detail` of a `retries_exhausted` failure: the last retry's detail, its reason and the count.
    private static func exhaustedDetail(_ detail: JSONValue, reason: DeliveryReason, count: Int) -> JSONValue {
        var members = detail.objectValue ?? [:]
        members["last_reason"] = .string(reason.rawValue)
        members["uncounted_retries"] = .int(Int64(count))
        return .object(members)
    }

    /// The detail of an APNs `sent` event: `apns_id` (Apple's answer's `apns-id`, else the request's), `provider`
    /// and, when Apple answered one, `provider_message_id`: the text ``JSONValue/objectText(ofStrings:)`` writes
    /// for those members (keys in byte order, values escaped alike), without building and sorting them.
    static func apnsSentDetail(apnsID: UUID, providerMessageID: String?) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(64 + 2 * (providerMessageID?.utf8.count ?? CanonicalUUIDText.length))
        output.append(contentsOf: #"{"apns_id":"#.utf8)
        if let providerMessageID {
            JSONValue.appendString(providerMessageID, to: &output)
        } else {
            output.append(UInt8(ascii: "\""))
            CanonicalUUIDText.append(apnsID, to: &output)
            output.append(UInt8(ascii: "\""))
        }
        output.append(contentsOf: #","provider":"apns""#.utf8)
        if let providerMessageID {
            output.append(contentsOf: #","provider_message_id":"#.utf8)
            JSONValue.appendString(providerMessageID, to: &output)
        }
        output.append(UInt8(ascii: "}"))
        return String(decoding: output, as: UTF8.self)
    }
}
