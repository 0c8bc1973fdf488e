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

/// Why a Web Push request could not be built: `invalid_endpoint`, `payload_too_large`, or, skipped rather than
/// failed, `silent_push_unsupported` (more may be added); the detail never holds the endpoint, a capability URL.
public typealias WebPushRequestError = ProviderRequestError
