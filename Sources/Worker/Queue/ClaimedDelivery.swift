import Foundation

/// One delivery claimed by this worker, with everything needed to decide and send it, read in the claim's
/// single round trip. `fence` must accompany the completion (see ``DeliveryCompletion``).
public struct ClaimedDelivery: Sendable {
    public var id: Int64
    /// The fencing token this claim got; a completion with an older fence is ignored by the database.
    public var fence: Int64
    /// 1 for the first send attempt; every claim counts one.
    public var attempt: Int
    public var notificationID: UUID
    public var subscriptionID: UUID
    public var appID: UUID
    /// Stable per delivery: APNs's `apns-id` on every attempt.
    public var apnsID: UUID

    // notifications
    /// The notification row's version (`xmin`): the message is fetched once per notification and version
    /// and cached, rather than shipped with every claimed row (a broadcast's message is the same for all).
    public var messageVersion: String
    public var campaignID: String?
    public var notificationStatus: String
    /// `coalesce(send_after, created_at)`: the instant the message's `ttl` counts from.
    public var notificationStart: Date

    // subscriptions
    public var platform: String
    public var token: String
    public var apnsEnvironment: String?
    public var language: String?
    public var timezone: String?
    public var country: String?
    public var subscriptionStatus: String
    /// Compared before invalidating, so a token re-registered meanwhile is never marked invalid.
    public var tokenUpdatedAt: Date
    /// `users.tags` of the subscription's user as JSON text (`nil` for an anonymous subscription, and for
    /// tags over ``DeliveryRendering/maximumUserTagsBytes``, which the claim does not read), for
    /// placeholders.
    public var userTagsJSON: String?
    /// `subscriptions.user_id` (`nil` for an anonymous subscription).
    public var userID: UUID? = nil
    /// `subscriptions.web_p256dh` / `web_auth` (base64url, RFC 8291 §2): a web subscription's keys, `nil`
    /// for other platforms.
    public var webP256DH: String? = nil
    public var webAuth: String? = nil

    // apps
    public var defaultLanguage: String?
    public var defaultTimezone: String?
    /// `apps.quiet_hours_start` / `quiet_hours_end` as PostgreSQL prints `time` (`22:00:00`); both nil = off.
    public var quietHoursStart: String? = nil
    public var quietHoursEnd: String? = nil
    public var signingKey: [UInt8]
    /// `apps.frequency_caps` as JSON text (`[{"max": N, "per_seconds": W}]`; `nil` or `[]` = no caps).
    public var frequencyCapsJSON: String? = nil

    // app_channels (nil when the app has no channel for this platform's provider)
    public var channelProvider: String?
    public var channelSettingsJSON: String?
    public var channelEndpoint: String?
    public var channelPausedUntil: Date?

    /// `deliveries.uncounted_retries`: retries so far that spent no attempt.
    public var uncountedRetries: Int = 0
    /// `deliveries.local_due_at`: the instant expansion scheduled this delivery for by the message's
    /// `delivery_time_of_day` (docs/local-time-delivery.md); `nil` when not scheduled by local time.
    public var localDueAt: Date? = nil
    /// When this worker's claim runs out, on this process's monotonic clock (set by the claim loop from the
    /// instant before the claim's statement, so never later than the real expiry); `nil` outside the claim
    /// loop (tests, `preview`): no lease guard.
    public var leaseExpiry: ContinuousClock.Instant? = nil
    /// Columns of this delivery's rows whose text was longer than the claim reads (e.g.
    /// `subscriptions.token`); such values are not shipped to the worker, and the delivery fails
    /// `oversized_column`.
    public var oversizedColumns: [String] = []
}

extension ClaimedDelivery {
    /// What frequency caps count against: the subscription's user, else the subscription itself
    /// (docs/frequency-caps.md).
    public var capKey: UUID { userID ?? subscriptionID }
}

/// What the pipeline decided for one claimed delivery, ready for the batched write-back.
public struct DeliveryCompletion: Sendable {
    public var deliveryID: Int64
    public var fence: Int64
    /// `delivery_events.event`.
    public var event: String
    public var reason: String?
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
    /// is left in the queue (see ``QueueStore/releaseFrequencyCapGrants(on:_:)``).
    public var capRelease: FrequencyCapRelease? = nil
    /// Whose delivery this was and which attempt, as claimed. With it, the event is still written when the
    /// delivery row vanished while the push was in flight because its subscription, notification or app
    /// was deleted (the cascade took the row, not another worker). `nil`: such a completion writes nothing.
    public var claimedAs: Claim? = nil

    /// The identity of a claimed delivery, carried so its event can be written without the queue row.
    public struct Claim: Sendable, Equatable {
        public var appID: UUID
        public var notificationID: UUID
        public var subscriptionID: UUID
        /// The claim's attempt number (`deliveries.attempt` after the claim).
        public var attempt: Int

        public init(appID: UUID, notificationID: UUID, subscriptionID: UUID, attempt: Int) {
            self.appID = appID
            self.notificationID = notificationID
            self.subscriptionID = subscriptionID
            self.attempt = attempt
        }

        public init(_ delivery: ClaimedDelivery) {
            self.init(
                appID: delivery.appID, notificationID: delivery.notificationID,
                subscriptionID: delivery.subscriptionID, attempt: delivery.attempt)
        }
    }

    public init(
        deliveryID: Int64, fence: Int64, event: String, reason: String?, detailJSON: String, nextRunAt: Date?,
        invalidation: SubscriptionInvalidation? = nil, channelPause: ChannelPause? = nil
    ) {
        self.deliveryID = deliveryID
        self.fence = fence
        self.event = event
        self.reason = reason
        self.detailJSON = detailJSON
        self.nextRunAt = nextRunAt
        self.invalidation = invalidation
        self.channelPause = channelPause
    }
}

public struct SubscriptionInvalidation: Sendable, Equatable {
    public var subscriptionID: UUID
    public var reason: String
    public var tokenUpdatedAt: Date
    /// `users.tags` of the subscription's user as JSON text (`nil` for an anonymous subscription), for
    /// placeholders.
    public var userTagsJSON: String?
}

public struct ChannelPause: Sendable, Equatable {
    public var appID: UUID
    public var provider: String
    public var until: Date
    public var reason: String
}

extension Array where Element == ClaimedDelivery {
    /// Bytes of row text a claimed batch keeps in memory while it is processed: each row's user tags (up to
    /// 64 KiB), token (up to 8 KiB) and campaign id, and each app's channel settings once (the claim decodes an
    /// app's repeated columns once, so its rows share that text). The claim loop bounds the sum over batches in
    /// flight, so slots full of the largest rows cannot hold `PUSHIZO_CONCURRENCY` times 72 KiB.
    var heldTextBytes: Int {
        var bytes = 0
        var apps = Set<UUID>()
        for delivery in self {
            bytes += (delivery.userTagsJSON?.utf8.count ?? 0) + delivery.token.utf8.count + (delivery.campaignID?.utf8.count ?? 0)
            if apps.insert(delivery.appID).inserted { bytes += delivery.channelSettingsJSON?.utf8.count ?? 0 }
        }
        return bytes
    }
}
