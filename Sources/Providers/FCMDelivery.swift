import DeliveryCore
import Foundation

/// Everything ``FCMRequestFactory`` needs to build one FCM HTTP v1 send request, gathered by the worker
/// from the delivery, subscription, notification and app rows. No I/O happens with it.
public struct FCMDelivery: Sendable {
    /// `subscriptions.token`: the FCM registration token (visible ASCII, usually about 160 characters).
    public var registrationToken: String
    /// The Firebase project ID from the app's FCM channel settings (`project_id` of the service account),
    /// the `{project_id}` in `/v1/projects/{project_id}/messages:send`.
    public var projectID: String
    public var message: NotificationMessage
    public var subscriberLanguage: String?
    public var appDefaultLanguage: String?
    /// Placeholder values (user tags, then subscription fields); `nil` renders every placeholder as missing.
    public var placeholderValues: PlaceholderValues?
    /// The signed msgId (`MessageIDCodec.sign`) for `on.msgId`.
    public var msgID: String
    /// `notifications.campaign_id` for `on.campaignId`.
    public var campaignID: String?
    /// The build time, for `android.ttl` when `expiration` is set.
    public var now: Date
    /// A hard expiry for the push; `android.ttl` is the earlier of this and `message.ttl`.
    public var expiration: Date?

    public init(registrationToken: String, projectID: String, message: NotificationMessage,
                subscriberLanguage: String? = nil, appDefaultLanguage: String? = nil,
                placeholderValues: PlaceholderValues? = nil, msgID: String, campaignID: String? = nil,
                now: Date, expiration: Date? = nil)
    {
        self.registrationToken = registrationToken
        self.projectID = projectID
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

/// Why an FCM request could not be built: `bad_device_token_format`, `missing_project_id`, `invalid_project_id`,
/// `invalid_access_token`, `payload_too_large` (more may be added); the detail never holds the access token.
public typealias FCMRequestError = ProviderRequestError
