import DeliveryCore
import Foundation

/// Everything ``WebPushRequestFactory`` needs to build one Web Push request (RFC 8030), gathered by the
/// worker from the delivery, subscription, notification and app rows. No I/O happens with it.
public struct WebPushDelivery: Sendable {
    /// `subscriptions.token` for a web subscription: the push resource URL the browser's
    /// `PushSubscription.endpoint` gave (`https://fcm.googleapis.com/fcm/send/...`,
    /// `https://updates.push.services.mozilla.com/wpush/v2/...`, `https://web.push.apple.com/...`).
    public var endpoint: String
    public var message: NotificationMessage
    public var subscriberLanguage: String?
    public var appDefaultLanguage: String?
    /// Placeholder values (user tags, then subscription fields); `nil` renders every placeholder as missing.
    public var placeholderValues: PlaceholderValues?
    /// The signed msgId (`MessageIDCodec.sign`) for `msgId`.
    public var msgID: String
    /// `notifications.campaign_id` for `campaignId`.
    public var campaignID: String?
    /// The build time, for `ttl` when `expiration` is set.
    public var now: Date
    /// A hard expiry for the push; the `ttl` header is the earlier of this and `message.ttl`.
    public var expiration: Date?
    /// When the body takes the Declarative Web Push form (the channel's `declarative` setting).
    public var declarative: WebPushDeclarativePolicy

    public init(endpoint: String, message: NotificationMessage, subscriberLanguage: String? = nil,
                appDefaultLanguage: String? = nil, placeholderValues: PlaceholderValues? = nil, msgID: String,
                campaignID: String? = nil, now: Date, expiration: Date? = nil,
                declarative: WebPushDeclarativePolicy = .applePushService)
    {
        self.declarative = declarative
        self.endpoint = endpoint
        self.message = message
        self.subscriberLanguage = subscriberLanguage
        self.appDefaultLanguage = appDefaultLanguage
        self.placeholderValues = placeholderValues
        self.msgID = msgID
        self.campaignID = campaignID
        self.now = now
        self.expiration = expiration
    }
}

/// Why a Web Push request could not be built. The worker fails the delivery (not retried) with `reason`,
/// or skips it when ``skips`` (a push Web Push cannot carry, e.g. `silent_push_unsupported`).
public struct WebPushRequestError: Error, CustomStringConvertible, Sendable, Equatable {
    /// snake_case, the `delivery_events.reason`: `invalid_endpoint`, `payload_too_large`,
    /// `silent_push_unsupported` (more may be added).
    public var reason: DeliveryReason
    /// Human-readable detail. Never contains the endpoint, which is a capability URL.
    public var detail: String
    /// `true`: nothing is wrong with the subscription or message, the push is just not sendable this way;
    /// the outcome is `skipped`, not `failed`.
    public var skips: Bool

    public init(reason: DeliveryReason, detail: String, skips: Bool = false) {
        self.reason = reason
        self.detail = detail
        self.skips = skips
    }

    public var description: String { "\(reason): \(detail)" }

    /// The outcome to record: `failed` (or `skipped` when ``skips``) with `reason` and `{"message": detail}`,
    /// subscription untouched.
    public var outcome: DeliveryOutcome {
        if skips { return .skipped(reason: reason, detail: ["message": .string(detail)]) }
        return .failed(reason: reason, detail: ["message": .string(detail)], invalidateSubscription: false)
    }
}
