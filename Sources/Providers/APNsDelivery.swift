import DeliveryCore
import Foundation

/// Everything ``APNsRequestFactory`` needs to build one APNs request, gathered by the worker from the
/// delivery, subscription, notification and app rows. No I/O happens with it.
public struct APNsDelivery: Sendable {
    /// `subscriptions.token`: the device token as hex text (64 characters today; up to 200 accepted).
    public var deviceToken: String
    /// `subscriptions.apns_environment`: `production` or `sandbox` (`nil` is treated as production by
    /// ``APNsRequestFactory/host(for:)``).
    public var environment: String?
    /// `apns-topic`: the app's bundle ID (from ``APNsCredentials/topic``).
    public var topic: String
    /// `apns-id`: stable per delivery so a retried request is recognisably the same push.
    public var apnsID: UUID
    public var message: NotificationMessage
    public var subscriberLanguage: String?
    public var appDefaultLanguage: String?
    /// Placeholder values (user tags, then subscription fields); `nil` leaves `{{ ... }}` to render with
    /// every name missing (defaults or empty text).
    public var placeholderValues: PlaceholderValues?
    /// The signed msgId (`MessageIDCodec.sign`) for `on.msgId`.
    public var msgID: String
    /// `notifications.campaign_id` for `on.campaignId`.
    public var campaignID: String?
    /// A hard expiry for the push (e.g. the notification's own deadline). The header `apns-expiration` is
    /// the earlier of this and `now + message.ttl`; with neither, the header is omitted (APNs's default
    /// storage policy applies).
    public var expiration: Date?
    /// The build time, for `apns-expiration = now + ttl`.
    public var now: Date

    public init(deviceToken: String, environment: String? = nil, topic: String, apnsID: UUID, message: NotificationMessage,
                subscriberLanguage: String? = nil, appDefaultLanguage: String? = nil, placeholderValues: PlaceholderValues? = nil,
                msgID: String, campaignID: String? = nil, expiration: Date? = nil, now: Date)
    {
        self.deviceToken = deviceToken
        self.environment = environment
        self.topic = topic
        self.apnsID = apnsID
        self.message = message
        self.subscriberLanguage = subscriberLanguage
        self.appDefaultLanguage = appDefaultLanguage
        self.placeholderValues = placeholderValues
        self.msgID = msgID
        self.campaignID = campaignID
        self.expiration = expiration
        self.now = now
    }
}

/// Why an APNs request could not be built: `invalid_message`, `payload_too_large`, `bad_device_token_format`,
/// `missing_topic`, ... (more may be added).
public typealias APNsRequestError = ProviderRequestError
