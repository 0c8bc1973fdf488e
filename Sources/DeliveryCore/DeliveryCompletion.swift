import Foundation

/// What the pipeline decided for one claimed delivery, ready for the batched write-back.
public struct DeliveryCompletion: Sendable {
    /// The row or page the delivery was leased through; `fence` is its fence.
    public var source: DeliverySource
    public var fence: Int64
    /// `delivery_events.event`.
    public var event: DeliveryEvent
    /// `delivery_events.reason` (`nil` for `sent`); also `deliveries.last_error` of a row that runs again.
    public var reason: DeliveryReason?
    /// `delivery_events.detail` as JSON text.
    public var detailJSON: String
    /// `nil`: terminal, the row leaves the queue. Otherwise the row runs again at this instant.
    public var nextRunAt: Date?
    /// Set when the provider said the token is gone: the subscription becomes `invalid` with this reason,
    /// unless its token was updated after `tokenUpdatedAt`.
    public var invalidation: SubscriptionInvalidation?
    /// Set on a credential or configuration error: the app's channel is paused.
    public var channelPause: ChannelPause?
    /// The claim is not counted as a send attempt (the request never reached the provider: a paused
    /// channel, an unreachable provider), so waiting out an outage never ends in `max_attempts`.
    public var refundsAttempt = false
    /// `false`: no `delivery_events` row is written, only the queue row changes (a retry past the first
    /// ``CompletionFactory/retryingEventsWithoutAttempt`` uncounted ones, a delivery put back because its
    /// lease was about to run out).
    public var writesEvent = true
    /// A retry that spends no attempt: `deliveries.uncounted_retries` grows by one.
    public var countsUncountedRetry = false
    /// Set on a terminal completion other than `sent` of a delivery whose app has frequency caps: the
    /// completion transaction gives the notification's grant back when no device of the key got it and none
    /// is left in the queue (see `FrequencyCapStore.releaseGrants(on:_:)`).
    public var capRelease: FrequencyCapRelease? = nil
    /// Whose delivery this was and which attempt, as claimed. With it, the event is still written when the
    /// delivery row vanished while the push was in flight because its subscription, notification or app
    /// was deleted (the cascade took the row, not another worker). `nil`: such a completion writes nothing.
    public var claimedAs: Claim? = nil
    /// Set on a delivery put back (`retrying`, `channel_paused`) because its app's channel of this provider was
    /// paused when it was claimed. Once the batch is written the worker asks whether that pause has ended
    /// meanwhile (an operator's `resume` that ran while this push was in flight, whose requeue could not see the
    /// leased row) and makes the app's held deliveries of that channel due again (docs/operations.md,
    /// "Operator commands").
    public var heldByPausedChannel: Provider? = nil
    /// The delivery's queue lane as claimed (``ClaimFacts/lane``): a Citus-distributed queue's completion is
    /// written by one statement per lane, each naming its lane (docs/scale-out.md, "The hot statements").
    public var lane: Int32 = 0

    /// The identity of a claimed delivery, carried so its event can be written without the queue row.
    public struct Claim: Sendable, Equatable {
        public var appID: UUID
        public var notificationID: UUID
        public var subscriptionID: UUID
        /// The claim's attempt number (`deliveries.attempt` after the claim).
        public var attempt: Int
        /// APNs's `apns-id` of the delivery: a page's delivery that must wait keeps it in the row it becomes.
        public var apnsID: UUID? = nil

        public init(appID: UUID, notificationID: UUID, subscriptionID: UUID, attempt: Int) {
            self.appID = appID
            self.notificationID = notificationID
            self.subscriptionID = subscriptionID
            self.attempt = attempt
        }
    }

    public init(
        source: DeliverySource, fence: Int64, event: DeliveryEvent, reason: DeliveryReason?, detailJSON: String,
        nextRunAt: Date?, invalidation: SubscriptionInvalidation? = nil, channelPause: ChannelPause? = nil
    ) {
        self.source = source
        self.fence = fence
        self.event = event
        self.reason = reason
        self.detailJSON = detailJSON
        self.nextRunAt = nextRunAt
        self.invalidation = invalidation
        self.channelPause = channelPause
    }
}

/// A subscription to mark `invalid` with the completion, unless its token changed since the claim read it.
public struct SubscriptionInvalidation: Sendable, Equatable {
    public var subscriptionID: UUID
    /// `subscriptions.invalid_reason`.
    public var reason: DeliveryReason
    public var tokenUpdatedAt: Date
    /// `users.tags` of the subscription's user as JSON text (`nil` for an anonymous subscription), for
    /// placeholders.
    public var userTagsJSON: String?

    public init(subscriptionID: UUID, reason: DeliveryReason, tokenUpdatedAt: Date, userTagsJSON: String? = nil) {
        self.subscriptionID = subscriptionID
        self.reason = reason
        self.tokenUpdatedAt = tokenUpdatedAt
        self.userTagsJSON = userTagsJSON
    }
}

public struct ChannelPause: Sendable, Equatable {
    public var appID: UUID
    /// `app_channels.provider`.
    public var provider: Provider
    /// `app_channels.paused_until`.
    public var until: Date
    /// `app_channels.paused_reason`.
    public var reason: DeliveryReason

    public init(appID: UUID, provider: Provider, until: Date, reason: DeliveryReason) {
        self.appID = appID
        self.provider = provider
        self.until = until
        self.reason = reason
    }
}

/// Where a finished delivery may give its notification's grant back: a terminal completion other than
/// `sent` of a delivery whose app has caps. The grant goes only if no device of the key got the notification
/// and none is still queued (docs/frequency-caps.md: a notification that failed everywhere does not count).
public struct FrequencyCapRelease: Sendable, Equatable {
    public var appID: UUID
    public var capKey: UUID
    public var notificationID: UUID

    public init(appID: UUID, capKey: UUID, notificationID: UUID) {
        self.appID = appID
        self.capKey = capKey
        self.notificationID = notificationID
    }
}
