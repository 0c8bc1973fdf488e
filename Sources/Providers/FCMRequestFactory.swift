import DeliveryCore
import Foundation

/// Builds FCM HTTP v1 send requests (Firebase: "Firebase Cloud Messaging HTTP v1 API",
/// `projects.messages.send`; "About FCM messages") without any I/O.
///
/// Every push is a **data-only** message: the SDK draws every notification, so there is no `notification`
/// block (with one, Android would draw it itself while the app is in the background, bypassing the SDK).
public enum FCMRequestFactory {
    /// The FCM HTTP v1 host.
    public static let host = "fcm.googleapis.com"
    /// FCM's message payload limit, in bytes as counted by ``payloadSize(of:)`` (Firebase Admin error
    /// `messaging/payload-size-limit-exceeded`: "4096 bytes for most messages ... The total payload size
    /// includes both keys and values").
    public static let maximumPayloadSize = 4096
    /// Bytes counted for each `data` entry on top of its key and value. FCM accepts less than 4096 bytes of
    /// keys plus values: reports measured about 6 bytes per extra entry (framing of the entry).
    public static let perEntryOverhead = 6
    /// Bytes counted once per message: the same reports measured about 45 bytes FCM uses itself; 64 keeps
    /// a margin so a push that fits here is not refused with `INVALID_ARGUMENT` there.
    public static let fixedOverhead = 64
    /// The longest registration token accepted, in bytes (real tokens are about 160).
    public static let maximumTokenLength = 4096

    /// Builds `POST /v1/projects/{project_id}/messages:send` with headers, in this order:
    /// `authorization: Bearer <access token>` (an OAuth 2.0 token for the service account, scope
    /// `https://www.googleapis.com/auth/firebase.messaging`) and `content-type: application/json; charset=UTF-8`.
    ///
    /// Body (compact JSON, sorted keys, non-ASCII as UTF-8, `/` unescaped):
    /// `{"message":{"android":{"collapse_key"?,"direct_boot_ok"?,"priority","ttl"?},"data":{...},"fcm_options"?:{"analytics_label"},"token"}}`.
    /// - `data`: the flat string map of ``FCMDataLayout`` (normalized fields under `on.`, the app's `data`
    ///   under `on.d.` with values as ``NormalizedData/text(of:)``); no `notification` block.
    /// - `android.priority`: `HIGH` for `priority: high`, or for a visible push without a priority (the SDK
    ///   shows it at once, like APNs priority 10); `NORMAL` for `priority: normal` and for a silent push
    ///   without `priority: high` (FCM deprioritizes high-priority pushes that show nothing).
    /// - `android.ttl`: `"<seconds>s"`, the earlier of `ttl` and `expiration`, 0...2,419,200 (28 days,
    ///   FCM's maximum); `"0s"` means now or never; left out when neither is set (FCM's default, 4 weeks).
    /// - `android.collapse_key`: `collapse_id`, when set and not empty.
    /// - `android.direct_boot_ok`: `android_direct_boot_ok`, when set (FCM HTTP v1 `AndroidConfig`).
    /// - `fcm_options.analytics_label`: `fcm_analytics_label`, when set (FCM HTTP v1 `FcmOptions`, pattern
    ///   `^[a-zA-Z0-9-_.~%]{1,50}$`).
    ///
    /// Size: when ``payloadSize(of:)`` exceeds 4096, the longest of `on.title`, `on.subtitle` and `on.body`
    /// are shortened first, at grapheme-cluster boundaries with `…` (``TextShortener``, counting UTF-8 bytes
    /// as ``payloadSize(of:)`` does).
    /// - Throws: `FCMRequestError` with reason `bad_device_token_format` (empty, longer than 4096 bytes, or
    ///   not visible ASCII), `missing_project_id`, `invalid_project_id` (anything but ASCII letters, digits,
    ///   `-`, `_`, `.`, `:`; it goes into the path), `invalid_access_token` (empty or not visible ASCII; never
    ///   echoed), `invalid_message` (`fcm_analytics_label` outside Firebase's pattern; a text renders empty in every language or is not a valid template), or
    ///   `payload_too_large` (still over the limit with every text shortened, e.g. `data` alone is too big).
    public static func makeRequest(_ delivery: FCMDelivery, accessToken: String) throws(FCMRequestError) -> PushRequest {
        try makeRequest(delivery, accessToken: accessToken) { () throws(FCMRequestError) in try data(for: delivery) }
    }

    /// ``makeRequest(_:accessToken:)`` with `message.data` from `data` (e.g. another delivery's that renders
    /// alike, with this device's msgId: ``data(_:msgID:)``), called after every other check so the errors
    /// come in the same order.
    /// - Throws: as ``makeRequest(_:accessToken:)``, and whatever `data` throws.
    public static func makeRequest(
        _ delivery: FCMDelivery, accessToken: String, data: () throws(FCMRequestError) -> [String: String]
    ) throws(FCMRequestError) -> PushRequest {
        let token = delivery.registrationToken
        guard HTTPFieldValue.isVisibleASCII(token), token.utf8.count <= maximumTokenLength else {
            throw FCMRequestError(reason: .badDeviceTokenFormat,
                                  detail: "an FCM registration token is 1 to \(maximumTokenLength) visible ASCII characters (got \(token.utf8.count) bytes)")
        }
        guard !delivery.projectID.isEmpty else {
            throw FCMRequestError(reason: .missingProjectID, detail: "the FCM channel has no project_id")
        }
        guard delivery.projectID.utf8.allSatisfy(isProjectIDByte) else {
            throw FCMRequestError(reason: .invalidProjectID,
                                  detail: "the FCM project_id may hold only ASCII letters, digits, '-', '_', '.' and ':'")
        }
        guard HTTPFieldValue.isVisibleASCII(accessToken) else {
            throw FCMRequestError(reason: .invalidAccessToken,
                                  detail: "the OAuth 2.0 access token must be non-empty visible ASCII")
        }
        let data = try data()
        var message: [String: JSONValue] = [
            "token": .string(token),
            "data": .object(data.mapValues { .string($0) }),
            "android": android(delivery),
        ]
        if let label = delivery.message.fcmAnalyticsLabel {
            // Checked again here (a message built in code skips init(json:)): FCM refuses the whole send
            // with INVALID_ARGUMENT, so a bad label fails this delivery alone, before a request is made.
            guard (1...NotificationMessage.maximumFCMAnalyticsLabelLength).contains(label.utf8.count),
                  label.utf8.allSatisfy(NotificationMessage.isFCMAnalyticsLabelByte)
            else {
                throw FCMRequestError(reason: .invalidMessage,
                                      detail: "`fcm_analytics_label`: must match Firebase's pattern ^[a-zA-Z0-9-_.~%]{1,50}$")
            }
            message["fcm_options"] = ["analytics_label": .string(label)]
        }
        return PushRequest(method: "POST", path: "/v1/projects/\(delivery.projectID)/messages:send",
                           headers: [PushHeader("authorization", "Bearer \(accessToken)"),
                                     PushHeader("content-type", "application/json; charset=UTF-8")],
                           body: JSONValue.object(["message": .object(message)]).serialized())
    }

    /// The `message.data` map alone, already shortened to fit (what `makeRequest` sends), for previews and
    /// tests.
    /// - Throws: `FCMRequestError` `payload_too_large` or `invalid_message`.
    public static func data(for delivery: FCMDelivery) throws(FCMRequestError) -> [String: String] {
        let message = delivery.message
        let fixed = FCMDataLayout.entriesBesideTexts(message: message, msgID: delivery.msgID, campaignID: delivery.campaignID)
        // A silent push shows nothing: no title, subtitle or body (as APNs sends no alert).
        var text = LocalizedText()
        if !message.isSilent {
            do {
                text = try LocalizedText.render(message, subscriberLanguage: delivery.subscriberLanguage,
                                                appDefaultLanguage: delivery.appDefaultLanguage,
                                                placeholderValues: delivery.placeholderValues)
            } catch {
                throw FCMRequestError(reason: .invalidMessage, detail: error.description)
            }
        }
        let outcome = TextShortener.fit(text, limit: maximumPayloadSize, counting: .utf8) { text in
            var data = fixed
            if let title = text.title { data[FCMDataLayout.title] = title }
            if let subtitle = text.subtitle { data[FCMDataLayout.subtitle] = subtitle }
            if let body = text.body { data[FCMDataLayout.body] = body }
            return (data, payloadSize(of: data))
        }
        switch outcome {
        case .fitted(let data, _): return data
        case .tooLarge(let size):
            throw FCMRequestError(reason: .payloadTooLarge,
                                  detail: "the FCM data payload counts \(size) bytes with every text shortened; the limit is \(maximumPayloadSize)")
        }
    }

    /// `shared`, the data of a delivery whose message, languages, campaign and placeholder values are the
    /// same, with `msgID` in place of its msgId; `nil` unless both msgIds are 64 bytes of base64url
    /// (``PayloadTemplate/msgIDLength``). Exact: the msgId's length is all that the size limit and the
    /// shortening of texts see of it.
    public static func data(_ shared: [String: String], msgID: String) -> [String: String]? {
        guard let old = shared[FCMDataLayout.msgID], old.utf8.count == PayloadTemplate.msgIDLength,
              msgID.utf8.count == PayloadTemplate.msgIDLength, msgID.utf8.allSatisfy(WebPushRequestFactory.isBase64URLByte)
        else { return nil }
        var data = shared
        data[FCMDataLayout.msgID] = msgID
        return data
    }

    /// The size FCM's limit is checked against, in bytes: ``fixedOverhead`` plus, for every entry, the
    /// UTF-8 bytes of its key and of its value (unescaped: FCM measures the strings, not their JSON
    /// spelling) plus ``perEntryOverhead``. The token, `android` options and JSON punctuation of the
    /// request are not counted, as FCM does not count them.
    public static func payloadSize(of data: [String: String]) -> Int {
        data.reduce(fixedOverhead) { $0 + $1.key.utf8.count + $1.value.utf8.count + perEntryOverhead }
    }

    static func android(_ delivery: FCMDelivery) -> JSONValue {
        let message = delivery.message
        let high = message.priority == .high || (message.priority == nil && !message.isSilent)
        var android: [String: JSONValue] = ["priority": high ? "HIGH" : "NORMAL"]
        if let seconds = NormalizedFields.timeToLive(ttl: message.ttl, expiration: delivery.expiration, now: delivery.now) {
            android["ttl"] = .string("\(seconds)s")
        }
        if let collapse = message.collapseID, !collapse.isEmpty { android["collapse_key"] = .string(collapse) }
        if let directBoot = message.androidDirectBootOK { android["direct_boot_ok"] = .bool(directBoot) }
        return .object(android)
    }

    static func isProjectIDByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"):
            true
        default:
            false
        }
    }
}
