import DeliveryCore
import Foundation

/// Everything ``HuaweiRequestFactory`` needs to build one Huawei Push Kit send request, gathered by the worker
/// from the delivery, subscription, notification and app rows. No I/O happens with it.
public struct HuaweiDelivery: Sendable {
    /// `subscriptions.token`: the Push Kit token the HMS Core SDK gave the device (Huawei: "Accessing HUAWEI
    /// Push Kit": no fixed length; visible ASCII in every form Huawei shows).
    public var pushToken: String
    /// The app's App ID from the `huawei` channel settings (`app_id`), the `[appid]` of
    /// `/v1/[appid]/messages:send`.
    public var appID: String
    public var message: NotificationMessage
    public var subscriberLanguage: String?
    public var appDefaultLanguage: String?
    /// Placeholder values (user tags, then subscription fields); `nil` renders every placeholder as missing.
    public var placeholderValues: PlaceholderValues?
    /// The signed msgId (`MessageIDCodec.sign`) for `on.msgId`.
    public var msgID: String
    /// `notifications.campaign_id` for `on.campaignId`.
    public var campaignID: String?

    public init(pushToken: String, appID: String, message: NotificationMessage, subscriberLanguage: String? = nil,
                appDefaultLanguage: String? = nil, placeholderValues: PlaceholderValues? = nil, msgID: String,
                campaignID: String? = nil)
    {
        self.pushToken = pushToken
        self.appID = appID
        self.message = message
        self.subscriberLanguage = subscriberLanguage
        self.appDefaultLanguage = appDefaultLanguage
        self.placeholderValues = placeholderValues
        self.msgID = msgID
        self.campaignID = campaignID
    }
}

/// Why a Huawei Push Kit request could not be built (reasons `bad_device_token_format`, `missing_app_id`,
/// `invalid_app_id`, `invalid_access_token`, `invalid_message`, `payload_too_large`). The worker fails the delivery
/// (not retried) with `reason`, or pauses the channel for the reasons in
/// ``HuaweiRequestFactory/channelRequestErrors``.
public typealias HuaweiRequestError = ProviderRequestError
