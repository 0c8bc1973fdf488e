import DeliveryCore
import Foundation
import UUIDText

/// Builds APNs requests (Apple: "Sending notification requests to APNs", "Generating a remote
/// notification") without any I/O.
public enum APNsRequestFactory {
    /// APNs's payload limit for regular remote notifications, in UTF-8 bytes of the body.
    public static let maximumPayloadSize = 4096
    /// `apns-collapse-id` limit in UTF-8 bytes.
    public static let maximumCollapseIDSize = 64
    /// The farthest `apns-expiration` is set from `now`, in seconds (``NotificationMessage/maximumTTL``,
    /// 28 days): APNs stores a push about 30 days at most, so a later deadline changes nothing but could
    /// overflow whole-second arithmetic.
    public static let maximumExpirationInterval = Double(NotificationMessage.maximumTTL)

    /// The APNs host for a subscription's environment: `api.sandbox.push.apple.com` for `sandbox`,
    /// `api.push.apple.com` otherwise. (The worker may override the origin, e.g. with the emulator.)
    public static func host(for environment: String?) -> String {
        environment?.lowercased() == "sandbox" ? "api.sandbox.push.apple.com" : "api.push.apple.com"
    }

    /// Builds `POST /3/device/<token>` with headers, in this order:
    /// `authorization: bearer <jwt>`, `apns-id` (lower-case UUID), `apns-push-type` (`alert`, or
    /// `background` for a silent push), `apns-priority` (`10` for `priority: high` or unset, `5` for
    /// `normal`; always `5` for background, as Apple requires), `apns-topic`, `apns-expiration` (whole UNIX
    /// seconds; `0` when `ttl` is 0 or the deadline has passed; at most `now` + 28 days, see
    /// ``maximumExpirationInterval``; omitted when neither `ttl` nor `expiration` is set), `apns-collapse-id`
    /// (when set). A message with `apns_push_type` (``APNsPushType``) sends that push type, the topic with its
    /// suffix (``APNsPushType/topicSuffix``: `<bundle id>.voip`, `.push-type.liveactivity`, `.location-query`,
    /// `.voip-ptt`, `.complication`, `.pushkit.fileprovider`, `.push-type.widgets`; the channel's topic as it is
    /// for `mdm`), priority `10` for VoIP and Push to Talk, `apns-expiration: 0` for Push to Talk, and the
    /// payloads of ``appPayload(for:)``, ``liveActivityPayload(for:)``, ``fileProviderPayload(for:)``,
    /// ``mdmPayload(for:)`` and ``widgetsPayload``.
    ///
    /// Every header value is either generated here (digits, a UUID, constants) or checked: the topic and the
    /// bearer token must be visible ASCII and the collapse id a clean header value
    /// (``HTTPFieldValue``), so no CR / LF / control character reaches the HTTP/2 layer, where it would
    /// fail as a transport error on every retry. Out-of-range numbers set directly on the message (`ttl`,
    /// `ios_badge_count`, a non-finite `ios_relevance_score` or volume) are clamped or dropped, never trapped on.
    ///
    /// Payload (compact JSON, sorted keys, non-ASCII as UTF-8):
    /// - visible alert: `aps.alert` `{title?, subtitle?, body}` in the subscriber's language
    ///   (``LanguageSelector``) with placeholders filled; `aps.sound` a string from `ios_sound`, or the
    ///   `{"critical":1,"name","volume"}` dictionary only for level `critical` with `ios_critical_sound`;
    ///   `aps.badge` for `SetTo` (an `Increase` goes to `on.badgeIncrement` for the SDK's extension, since
    ///   APNs badges are absolute); `thread-id`, `category`, `interruption-level`, `relevance-score`, and
    ///   always `mutable-content: 1` (the SDK's Notification Service Extension records `received`).
    /// - silent push (`content_available: true`): `aps` is only `{"content-available":1}`; no alert, sound or badge.
    /// - badge-only or sound-only push (no `contents` or `headings`): push type `alert`, `aps` without `alert`
    ///   and without `mutable-content`, e.g. `{"badge":0}` (Apple: the alert push type covers alert, sound or badge).
    /// - `on`: `msgId`, `campaignId`, `url`, `image`, `actions` (`[{id, title, url?}]` from `buttons`), `data`.
    ///
    /// When the body exceeds 4096 bytes, the longest of the alert's `title`, `subtitle` and `body` are
    /// shortened first, at grapheme-cluster boundaries with `…` (``TextShortener``: the cut line is
    /// computed from byte counts, JSON escapes included, and the payload serialized once more).
    /// - Throws: `APNsRequestError` with reason `bad_device_token_format` (not 64...200 hex characters),
    ///   `missing_topic`, `invalid_topic` (not visible ASCII, e.g. a space or CR/LF in the bundle ID),
    ///   `invalid_provider_token` (the bearer token is empty or not visible ASCII; the token is not echoed),
    ///   `invalid_message` (collapse id over 64 bytes or not a clean header value; a text that renders
    ///   empty in every language or is not a valid template), or `payload_too_large`
    ///   (still over 4096 bytes with every text shortened, e.g. `data` alone is too big).
    public static func makeRequest(_ delivery: APNsDelivery, bearerToken: String) throws(APNsRequestError) -> PushRequest {
        try makeRequest(delivery, bearerToken: bearerToken) { () throws(APNsRequestError) in try payload(for: delivery) }
    }

    /// ``makeRequest(_:bearerToken:)`` with the body from `body` (e.g. a ``PayloadTemplate`` rendered once for
    /// the notification and language, filled with this device's msgId), called after every header check so
    /// the errors come in the same order.
    /// - Throws: as ``makeRequest(_:bearerToken:)``, and whatever `body` throws.
    public static func makeRequest(
        _ delivery: APNsDelivery, bearerToken: String, body: () throws(APNsRequestError) -> [UInt8]
    ) throws(APNsRequestError) -> PushRequest {
        try makeRequest(delivery, authorization: APNsProviderAuthorization(bearerToken: bearerToken), body: body)
    }

    /// ``makeRequest(_:bearerToken:body:)`` with the `authorization` field checked and built once for every request
    /// that carries the same provider token (``APNsProviderAuthorization``): the requests then share one string,
    /// and the HTTP/2 client compares it with the previous request's instead of checking it again.
    /// - Throws: as ``makeRequest(_:bearerToken:)``; `invalid_provider_token` at the same point, when
    ///   `authorization` holds no valid token.
    public static func makeRequest(
        _ delivery: APNsDelivery, authorization: APNsProviderAuthorization, body: () throws(APNsRequestError) -> [UInt8]
    ) throws(APNsRequestError) -> PushRequest {
        let token = delivery.deviceToken
        guard APNsDeviceToken.isWellFormed(token) else {
            let problem = APNsDeviceToken.isHexadecimal(token)
                ? "\(token.utf8.count) characters" : "characters that are not hexadecimal digits"
            throw APNsRequestError(reason: .badDeviceTokenFormat,
                                   detail: "an APNs device token is an even number, 64 to 200, of hexadecimal characters (got \(problem))")
        }
        guard !delivery.topic.isEmpty else {
            throw APNsRequestError(reason: .missingTopic, detail: "the APNs channel has no topic (bundle ID)")
        }
        guard HTTPFieldValue.isVisibleASCII(delivery.topic) else {
            throw APNsRequestError(reason: .invalidTopic,
                                   detail: "the APNs topic (bundle ID) must be visible ASCII without spaces or control characters")
        }
        guard let authorizationValue = authorization.fieldValue else {
            throw APNsRequestError(reason: .invalidProviderToken,
                                   detail: "the provider token must be a non-empty visible-ASCII JWT")
        }
        let message = delivery.message
        var headers = [
            PushHeader("authorization", authorizationValue),
            PushHeader("apns-id", CanonicalUUIDText.format(delivery.apnsID)),
            PushHeader("apns-push-type", pushTypeHeader(message)),
            PushHeader("apns-priority", priorityHeader(message)),
            PushHeader("apns-topic", delivery.topic + (message.apnsPushType?.topicSuffix ?? "")),
        ]
        if let expiration = expirationHeader(delivery) {
            headers.append(PushHeader("apns-expiration", expiration))
        }
        if let collapseID = message.collapseID, !collapseID.isEmpty {
            guard collapseID.utf8.count <= maximumCollapseIDSize else {
                throw APNsRequestError(reason: .invalidMessage,
                                       detail: "`collapse_id`: at most \(maximumCollapseIDSize) bytes for APNs (got \(collapseID.utf8.count))")
            }
            guard HTTPFieldValue.isValid(collapseID) else {
                throw APNsRequestError(reason: .invalidMessage,
                                       detail: "`collapse_id`: must not contain control characters (CR, LF, NUL, tab) or start or end with a space")
            }
            headers.append(PushHeader("apns-collapse-id", collapseID))
        }
        return PushRequest(method: "POST", path: "/3/device/\(token)", headers: headers, body: try body())
    }

    /// ``payload(for:)`` rendered once for every device that shares the delivery's message, languages,
    /// campaign and placeholder values (``PayloadTemplate``): `nil` when the msgId cannot be spliced in.
    /// - Throws: as ``payload(for:)``.
    public static func payloadTemplate(for delivery: APNsDelivery) throws(APNsRequestError) -> PayloadTemplate? {
        try PayloadTemplate.make { (msgID: String) throws(APNsRequestError) -> [UInt8] in
            var stand = delivery
            stand.msgID = msgID
            return try payload(for: stand)
        }
    }

    /// The serialized payload alone (what `makeRequest` puts in the body), for previews and tests.
    /// - Throws: `APNsRequestError` `payload_too_large`, or `invalid_message` when a text renders empty in
    ///   every language or is not a valid template (``LocalizedText/render(_:subscriberLanguage:appDefaultLanguage:placeholderValues:)``).
    public static func payload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        let message = delivery.message
        switch message.apnsPushType {
        case .voip?, .location?, .pushToTalk?, .complication?: return try appPayload(for: delivery)
        case .liveActivity?: return try liveActivityPayload(for: delivery)
        case .fileProvider?: return try fileProviderPayload(for: delivery)
        case .mdm?: return try mdmPayload(for: delivery)
        case .widgets?: return widgetsPayload
        case nil: break
        }
        let onDictionary = customDictionary(delivery)
        if message.isSilent {
            let body = JSONValue.object(["aps": ["content-available": 1], "on": onDictionary]).serialized()
            guard body.count <= maximumPayloadSize else { throw tooLarge(body.count) }
            return body
        }
        if !message.hasVisibleText {
            // A badge-only or sound-only push: no `alert`, and no `mutable-content` (iOS runs a service
            // extension only for a push that shows an alert).
            var aps = apsWithoutAlert(message)
            aps["mutable-content"] = nil
            let body = JSONValue.object(["aps": .object(aps), "on": onDictionary]).serialized()
            guard body.count <= maximumPayloadSize else { throw tooLarge(body.count) }
            return body
        }
        let aps = apsWithoutAlert(message)
        return try fittedBody(message, for: delivery) { alert in
            var aps = aps
            aps["alert"] = alertJSON(alert)
            return JSONValue.object(["aps": .object(aps), "on": onDictionary]).serialized()
        }
    }

    /// Renders `message`'s texts for the subscriber and serializes `body(texts)`, shortening the longest texts
    /// first at grapheme-cluster boundaries (``TextShortener``, serialized twice at most) until the body is at
    /// most ``maximumPayloadSize`` bytes.
    /// - Throws: `APNsRequestError` `invalid_message` (a text renders empty in every language or is not a
    ///   valid template) or `payload_too_large` (still too large with every text shortened).
    static func fittedBody(_ message: NotificationMessage, for delivery: APNsDelivery,
                           body: (LocalizedText) -> [UInt8]) throws(APNsRequestError) -> [UInt8]
    {
        let alert: LocalizedText
        do {
            alert = try LocalizedText.render(message, subscriberLanguage: delivery.subscriberLanguage,
                                             appDefaultLanguage: delivery.appDefaultLanguage,
                                             placeholderValues: delivery.placeholderValues)
        } catch {
            throw APNsRequestError(reason: .invalidMessage, detail: error.description)
        }
        let outcome = TextShortener.fit(alert, limit: maximumPayloadSize, counting: .jsonString) { alert in
            let bytes = body(alert)
            return (bytes, bytes.count)
        }
        switch outcome {
        case .fitted(let body, _): return body
        case .tooLarge(let size): throw tooLarge(size)
        }
    }

    /// `aps.alert`: `{title?, subtitle?, body?}`, absent texts left out.
    static func alertJSON(_ alert: LocalizedText) -> JSONValue {
        var members: [String: JSONValue] = [:]
        if let title = alert.title { members["title"] = .string(title) }
        if let subtitle = alert.subtitle { members["subtitle"] = .string(subtitle) }
        if let body = alert.body { members["body"] = .string(body) }
        return .object(members)
    }

    static func apsWithoutAlert(_ message: NotificationMessage) -> [String: JSONValue] {
        var aps: [String: JSONValue] = ["mutable-content": 1]
        if message.iosInterruptionLevel == .critical, let critical = message.iosCriticalSound {
            // A non-finite volume cannot be JSON (the whole payload would serialize as `null`): full volume.
            let volume = critical.volume.isNaN ? 1.0 : min(max(critical.volume, 0), 1)
            aps["sound"] = ["critical": 1, "name": .string(critical.name), "volume": .double(volume)]
        } else if let sound = message.iosSound, !sound.isEmpty {
            aps["sound"] = .string(sound)
        }
        if message.iosBadgeType == .setTo, let count = message.iosBadgeCount {
            aps["badge"] = .int(Int64(clampedBadge(count)))
        }
        if let thread = message.threadID, !thread.isEmpty { aps["thread-id"] = .string(thread) }
        if let category = message.iosCategory, !category.isEmpty { aps["category"] = .string(category) }
        if let level = message.iosInterruptionLevel { aps["interruption-level"] = .string(level.rawValue) }
        if let score = message.iosRelevanceScore, score.isFinite { aps["relevance-score"] = .double(min(max(score, 0), 1)) }
        return aps
    }

    static func customDictionary(_ delivery: APNsDelivery) -> JSONValue {
        let message = delivery.message
        var on: [String: JSONValue] = ["msgId": .string(delivery.msgID)]
        if let campaign = delivery.campaignID { on["campaignId"] = .string(campaign) }
        if let url = message.url { on["url"] = .string(url) }
        if let image = message.image { on["image"] = .string(image) }
        if !message.buttons.isEmpty { on["actions"] = NormalizedFields.actions(message.buttons) }
        if let data = message.data { on["data"] = .object(data) }
        if !message.isSilent, message.iosBadgeType == .increase, let count = message.iosBadgeCount {
            on["badgeIncrement"] = .int(Int64(clampedBadge(count)))
        }
        return .object(on)
    }

    /// Works in `Double` seconds and clamps before the one conversion to whole seconds, so no `ttl`,
    /// `expiration` or clock value (huge, negative, infinite, NaN) can overflow `Int64`.
    static func expirationHeader(_ delivery: APNsDelivery) -> String? {
        if delivery.message.apnsPushType?.expiresImmediately == true { return "0" }
        let ttl = delivery.message.ttl
        guard ttl != nil || delivery.expiration != nil else { return nil }
        if let ttl, ttl <= 0 { return "0" }
        let now = delivery.now.timeIntervalSince1970
        guard now.isFinite else { return "0" }
        // Seconds from now: the earlier of ttl and the expiration, at most maximumExpirationInterval.
        var remaining = maximumExpirationInterval
        if let ttl { remaining = min(remaining, Double(ttl)) }
        if let expiration = delivery.expiration {
            let untilExpiration = expiration.timeIntervalSince1970 - now
            // NaN (a NaN date) says nothing usable: treat as already passed.
            remaining = untilExpiration.isNaN ? 0 : min(remaining, untilExpiration)
        }
        // A deadline already passed means "now or never", which APNs spells 0.
        guard remaining > 0 else { return "0" }
        let deadline = (now + remaining).rounded(.down)
        guard deadline > 0 else { return "0" }
        return String(Int64(exactly: deadline) ?? Int64.max)
    }

    /// `count` within ±``NotificationMessage/maximumBadgeCount``.
    static func clampedBadge(_ count: Int) -> Int {
        min(max(count, -NotificationMessage.maximumBadgeCount), NotificationMessage.maximumBadgeCount)
    }

    static func tooLarge(_ size: Int) -> APNsRequestError {
        APNsRequestError(reason: .payloadTooLarge,
                         detail: "the APNs payload is \(size) bytes with every text shortened; the limit is \(maximumPayloadSize)")
    }
}

/// The `authorization` field of token-based APNs requests, `bearer <provider token>` (Apple, "Establishing a
/// token-based connection to APNs"), checked and built once per provider token rather than once per request.
/// A token that is empty or not visible ASCII (a JWT is base64url and dots; anything else would corrupt the
/// header) makes no field: ``APNsRequestFactory/makeRequest(_:authorization:body:)`` then throws
/// `invalid_provider_token`, in the order of its other checks. The token is never echoed.
public struct APNsProviderAuthorization: Sendable {
    /// `bearer <token>`, or nil when the token cannot be sent.
    public let fieldValue: String?

    public init(bearerToken: String) {
        fieldValue = HTTPFieldValue.isVisibleASCII(bearerToken) ? "bearer \(bearerToken)" : nil
    }
}
