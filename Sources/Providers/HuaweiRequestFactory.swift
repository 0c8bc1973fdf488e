import DeliveryCore
import Foundation

/// Builds Huawei Push Kit send requests (Huawei: "Sending Messages", HMS Core Push Kit server API v1,
/// `POST https://push-api.cloud.huawei.com/v1/[appid]/messages:send`) without any I/O.
///
/// A visible push is a **notification message**: Push Kit draws `message.android.notification` itself (the
/// HMS Core SDK does not see a notification message while the app is in the background), with the texts in
/// the subscriber's language. A silent push (`content_available: true`) is a **data message** without
/// `android.notification`, which Push Kit hands to the app. Both carry the rest of the push in `message.data`.
public enum HuaweiRequestFactory {
    /// Push Kit's host.
    public static let host = "push-api.cloud.huawei.com"
    /// Push Kit's limit on the request body, in bytes, **not counting the token** (Huawei, "Sending Messages":
    /// "The message body cannot exceed 4096 bytes (excluding token)").
    public static let maximumBodySize = 4096
    /// The longest push token accepted, in bytes (Huawei gives no length: "It does not have a fixed length";
    /// the forms shown are 32 and about 130 characters).
    public static let maximumTokenLength = 4096
    /// `click_action.type` 3: open the app (the one action that needs no intent or URL of the app's own).
    public static let openAppClickAction: Int64 = 3
    /// Request-building errors caused by the app's channel settings rather than by the message: they pause the
    /// channel.
    public static let channelRequestErrors: Set<DeliveryReason> = [.missingAppID, .invalidAppID, .invalidAccessToken]

    /// Builds `POST /v1/{app_id}/messages:send` with headers, in this order: `authorization: Bearer <access
    /// token>` (Huawei, "Open Platform Authentication - Client Password Mode": the OAuth 2.0 client-credentials
    /// access token) and `content-type: application/json; charset=UTF-8`.
    ///
    /// Body (compact JSON, sorted keys, non-ASCII as UTF-8, `/` unescaped):
    /// `{"message":{"android"?:{"notification":{"body"?,"click_action":{"type":3},"title"?}},"data":"<JSON text>","token":["<token>"]},"validate_only":false}`.
    /// - `token`: an array of one token (Push Kit takes 1 to 1000; the worker sends one delivery per request so
    ///   each answer is that subscription's).
    /// - `data`: a **string**, the JSON text of the flat map of ``FCMDataLayout`` (`on.msgId`, `on.campaignId`,
    ///   `on.url`, `on.image`, `on.actions`, `on.subtitle`, `on.androidChannelId`, `on.androidSound`,
    ///   `on.silent`, the app's `data` under `on.d.`); `on.title` and `on.body` only on a silent push, which
    ///   has neither, so never: the texts of a visible push are in `android.notification`.
    /// - `android.notification`: `title` and `body` in the subscriber's language (placeholders filled), and
    ///   `click_action` `{"type": 3}` (open the app); left out on a silent push.
    /// - `validate_only`: `false` (a real send; `true` asks Push Kit to check the message without sending it).
    ///
    /// Size: when the body without the token exceeds 4096 bytes, the longest of the title, subtitle and body
    /// are shortened first, at grapheme-cluster boundaries with `…` (``TextShortener``).
    /// - Throws: ``HuaweiRequestError`` with reason `bad_device_token_format` (empty, longer than 4096 bytes or
    ///   not visible ASCII), `missing_app_id`, `invalid_app_id` (anything but ASCII digits: it goes into the
    ///   path), `invalid_access_token` (empty or not visible ASCII; never echoed), `invalid_message` (a text
    ///   renders empty in every language or is not a valid template) or `payload_too_large` (still over the
    ///   limit with every text shortened).
    public static func makeRequest(_ delivery: HuaweiDelivery, accessToken: String) throws(HuaweiRequestError) -> PushRequest {
        let token = delivery.pushToken
        guard HTTPFieldValue.isVisibleASCII(token), token.utf8.count <= maximumTokenLength else {
            throw HuaweiRequestError(reason: .badDeviceTokenFormat,
                                     detail: "a Push Kit token is 1 to \(maximumTokenLength) visible ASCII characters (got \(token.utf8.count) bytes)")
        }
        guard !delivery.appID.isEmpty else {
            throw HuaweiRequestError(reason: .missingAppID, detail: "the huawei channel has no app_id")
        }
        guard delivery.appID.utf8.count <= 64, delivery.appID.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw HuaweiRequestError(reason: .invalidAppID, detail: "the huawei app_id is 1 to 64 ASCII digits")
        }
        guard HTTPFieldValue.isVisibleASCII(accessToken) else {
            throw HuaweiRequestError(reason: .invalidAccessToken,
                                     detail: "the OAuth 2.0 access token must be non-empty visible ASCII")
        }
        let body = try body(for: delivery)
        return PushRequest(method: "POST", path: "/v1/\(delivery.appID)/messages:send",
                           headers: [PushHeader("authorization", "Bearer \(accessToken)"),
                                     PushHeader("content-type", "application/json; charset=UTF-8")],
                           body: body)
    }

    /// The request body alone, already shortened to fit (what ``makeRequest(_:accessToken:)`` sends), for
    /// previews and tests. The token is not checked here.
    /// - Throws: ``HuaweiRequestError`` `invalid_message` or `payload_too_large`.
    public static func body(for delivery: HuaweiDelivery) throws(HuaweiRequestError) -> [UInt8] {
        let message = delivery.message
        let fixed = FCMDataLayout.entriesBesideTexts(message: message, msgID: delivery.msgID, campaignID: delivery.campaignID)
        // A silent push shows nothing: no notification, no texts (as APNs sends no alert).
        var text = LocalizedText()
        if !message.isSilent {
            do {
                text = try LocalizedText.render(message, subscriberLanguage: delivery.subscriberLanguage,
                                                appDefaultLanguage: delivery.appDefaultLanguage,
                                                placeholderValues: delivery.placeholderValues)
            } catch {
                throw HuaweiRequestError(reason: .invalidMessage, detail: error.description)
            }
        }
        let tokenBytes = JSONValue.string(delivery.pushToken).serialized().count - 2
        let outcome = TextShortener.fit(text, limit: maximumBodySize, counting: .jsonString) { text in
            let bytes = serializedBody(fixed: fixed, text: text, silent: message.isSilent, token: delivery.pushToken)
            return (bytes, bytes.count - tokenBytes)
        }
        switch outcome {
        case .fitted(let bytes, _): return bytes
        case .tooLarge(let size):
            throw HuaweiRequestError(reason: .payloadTooLarge,
                                     detail: "the Push Kit message body counts \(size) bytes without the token with every text shortened; the limit is \(maximumBodySize)")
        }
    }

    static func serializedBody(fixed: [String: String], text: LocalizedText, silent: Bool, token: String) -> [UInt8] {
        var data = fixed
        if let subtitle = text.subtitle { data[FCMDataLayout.subtitle] = subtitle }
        var message: [String: JSONValue] = [
            "token": .array([.string(token)]),
            "data": .string(JSONValue.object(data.mapValues { .string($0) }).jsonText),
        ]
        if !silent {
            var notification: [String: JSONValue] = ["click_action": .object(["type": .int(openAppClickAction)])]
            if let title = text.title { notification["title"] = .string(title) }
            if let body = text.body { notification["body"] = .string(body) }
            message["android"] = .object(["notification": .object(notification)])
        }
        return JSONValue.object(["message": .object(message), "validate_only": .bool(false)]).serialized()
    }
}
