import DeliveryCore
import Foundation

/// Turns an APNs response into a ``DeliveryOutcome`` (Apple: "Handling notification responses from APNs").
public enum APNsResponseClassifier {
    /// 400 reasons that name the channel's own settings (its topic, the bundle ID every request carries):
    /// the channel pauses at once and no subscription is touched. Any 403 names the credential too.
    public static let channelReasons: Set<String> = [
        "ExpiredProviderToken", "InvalidProviderToken", "MissingProviderToken", "BadCertificate",
        "BadCertificateEnvironment", "Forbidden", "MissingTopic", "BadTopic", "TopicDisallowed",
    ]

    /// Reasons that would come back for every subscription if the channel's settings were wrong, yet name
    /// no credential: `DeviceTokenNotForTopic` (the token belongs to another app, or the channel's topic is
    /// wrong) and `BadPath` (the channel's `endpoint` override is not APNs, or this request's path is bad).
    public static let suspectReasons: Set<String> = ["DeviceTokenNotForTopic", "BadPath"]

    /// Reasons that mean "try again" whatever their status (`IdleTimeout` is a 400).
    public static let transientReasons: Set<String> = ["IdleTimeout"]

    /// ``answer(_:subscriptionTokenUpdatedAt:sentToSubscriptionEnvironment:now:)``'s outcome.
    public static func classify(_ response: PushResponse, subscriptionTokenUpdatedAt: Date?,
                                sentToSubscriptionEnvironment: Bool = true, now: Date = Date()) -> DeliveryOutcome
    {
        answer(response, subscriptionTokenUpdatedAt: subscriptionTokenUpdatedAt,
               sentToSubscriptionEnvironment: sentToSubscriptionEnvironment, now: now).outcome
    }

    /// The answer with its fault class (docs/provider-answers.md, "APNs"):
    /// - 200: `sent` with the response's `apns-id` header.
    /// - 410 (`Unregistered`, `ExpiredToken`): `failed` `unregistered` / `expired_token` invalidating the
    ///   subscription, unless `subscriptionTokenUpdatedAt` is later than the response's `timestamp`
    ///   (ms since epoch): the token was registered again after APNs saw it go, so only this delivery fails.
    /// - 400 `BadDeviceToken`: `failed` `bad_device_token`, invalidating only when
    ///   `sentToSubscriptionEnvironment` (the request went to the environment the subscription recorded;
    ///   otherwise it is a configuration mismatch).
    /// - 403 (any reason: the provider token or the key is refused) and 400 `MissingTopic` / `BadTopic` /
    ///   `TopicDisallowed` (the channel's topic): `channelError` with the snake_case reason; never
    ///   invalidates. After `ExpiredProviderToken` / `InvalidProviderToken` the token is replaced first (see
    ///   ``requiresNewProviderToken(_:)``).
    /// - 400 `DeviceTokenNotForTopic`, 404 `BadPath`: `failed` (subscription kept) suspecting the channel
    ///   (``ProviderAnswer/suspectsChannel``); `DeviceTokenNotForTopic` invalidates once the channel's topic
    ///   is proven by accepted sends (``ProviderAnswer/invalidatesWhenCredentialsWork``).
    /// - 429 (`TooManyRequests`, `TooManyProviderTokenUpdates`), 5xx and 400 `IdleTimeout`: `retry` (with
    ///   `notBefore` from a `Retry-After` of delta seconds, relative to `now`).
    /// - any other status: `failed` with the snake_case of APNs's reason (`PayloadTooLarge` ->
    ///   `payload_too_large`), or `http_<status>` without one.
    /// Every non-200 detail is `{"status": <int>, "apns_reason": "<Reason>"?, "timestamp": <ms>?}`.
    ///
    /// Hostile input never traps: a body over ``maximumBodySize`` bytes, not UTF-8, nested deeper than
    /// ``maximumBodyDepth`` or not JSON is classified by status alone; `reason` is cut to
    /// ``maximumReasonLength`` characters with control characters removed (a reason that leaves no letters
    /// falls back to `http_<status>`); a `timestamp` that is not a whole number of milliseconds between
    /// 2001-09-09 (10^12) and one day after `now` is ignored (so it cannot veto an invalidation); an
    /// `apns-id` that is not visible ASCII of at most 64 characters is dropped; `Retry-After` is honoured
    /// only as delta seconds (RFC 9110 §10.2.3 `1*DIGIT`), capped at ``maximumRetryAfter``.
    public static func answer(_ response: PushResponse, subscriptionTokenUpdatedAt: Date?,
                              sentToSubscriptionEnvironment: Bool = true, now: Date = Date()) -> ProviderAnswer
    {
        if response.status == 200 {
            let apnsID = response.header("apns-id").flatMap { $0.utf8.count <= 64 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil }
            return ProviderAnswer(.sent(providerMessageID: apnsID), fault: .accepted)
        }
        let body = parseBody(response.body)
        let apnsReason = body?["reason"]?.stringValue.flatMap(sanitizedReason)
        let timestamp = body?["timestamp"]?.int64Value.flatMap { plausibleTimestamp($0, now: now) }
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let apnsReason { detail["apns_reason"] = .string(apnsReason) }
        if let timestamp { detail["timestamp"] = .int(timestamp) }
        let detailJSON = JSONValue.object(detail)
        // A reason of only punctuation snake-cases to nothing: treat it as absent.
        let snakeReason = apnsReason.map(snakeCase).flatMap(DeliveryReason.init(providerText:))
        let reason = snakeReason ?? .http(status: response.status)

        switch response.status {
        case 410:
            let goneReason = snakeReason ?? .unregistered
            if let timestamp, let updated = subscriptionTokenUpdatedAt,
               updated.timeIntervalSince1970 * 1000 > Double(timestamp)
            {
                return ProviderAnswer(
                    .failed(reason: goneReason, detail: detailJSON, invalidateSubscription: false), fault: .subscription)
            }
            return ProviderAnswer(
                .failed(reason: goneReason, detail: detailJSON, invalidateSubscription: true), fault: .subscription)
        case 403:
            return ProviderAnswer(.channelError(reason: snakeReason ?? .forbidden, detail: detailJSON), fault: .channel)
        case 429, 500...599:
            return ProviderAnswer(
                .retry(reason: reason, detail: detailJSON, notBefore: retryAfter(response, now: now)), fault: .transient)
        case 400 where apnsReason == "BadDeviceToken":
            return ProviderAnswer(
                .failed(reason: .badDeviceToken, detail: detailJSON, invalidateSubscription: sentToSubscriptionEnvironment),
                fault: .subscription)
        default:
            if let apnsReason, channelReasons.contains(apnsReason) {
                return ProviderAnswer(.channelError(reason: reason, detail: detailJSON), fault: .channel)
            }
            if let apnsReason, transientReasons.contains(apnsReason) {
                return ProviderAnswer(
                    .retry(reason: reason, detail: detailJSON, notBefore: retryAfter(response, now: now)), fault: .transient)
            }
            if let apnsReason, suspectReasons.contains(apnsReason) {
                let forAnotherApp = apnsReason == "DeviceTokenNotForTopic"
                return ProviderAnswer(
                    .failed(reason: reason, detail: detailJSON), fault: forAnotherApp ? .subscription : .delivery,
                    suspectsChannel: true, invalidatesWhenCredentialsWork: forAnotherApp)
            }
            return ProviderAnswer(.failed(reason: reason, detail: detailJSON), fault: .delivery)
        }
    }

    /// `true` for 403 `ExpiredProviderToken` / `InvalidProviderToken`: the worker reports the token refused
    /// (``ProviderTokenPolicy/decide(current:rejected:at:)`` replaces it once fleet-wide, never within 20
    /// minutes of its `iat`) and sends again once with the new token.
    public static func requiresNewProviderToken(_ response: PushResponse) -> Bool {
        guard response.status == 403, let body = parseBody(response.body),
              let reason = body["reason"]?.stringValue
        else { return false }
        return reason == "ExpiredProviderToken" || reason == "InvalidProviderToken"
    }

    /// `TooManyProviderTokenUpdates` -> `too_many_provider_token_updates`.
    public static func snakeCase(_ reason: String) -> String {
        var output = ""
        let characters = Array(reason)
        for (index, character) in characters.enumerated() {
            if character.isUppercase {
                let previous = index > 0 ? characters[index - 1] : nil
                let next = index + 1 < characters.count ? characters[index + 1] : nil
                // A new word starts at an upper-case letter after a lower-case one, or at the last capital of
                // an acronym run ("BadURL" -> bad_url, "APNsID" stays readable).
                if let previous, previous.isLowercase || previous.isNumber || (previous.isUppercase && (next?.isLowercase ?? false)) {
                    output.append("_")
                }
                output.append(contentsOf: character.lowercased())
            } else if character.isLetter || character.isNumber {
                output.append(character)
            } else if !output.hasSuffix("_"), !output.isEmpty {
                output.append("_")
            }
        }
        return output
    }

    /// APNs error bodies are a few dozen bytes (`{"reason":"...","timestamp":...}`); larger ones are not
    /// parsed.
    public static let maximumBodySize = 16_384
    /// The deepest JSON nesting parsed (APNs uses 1); deeper bodies are not handed to the recursive decoder.
    public static let maximumBodyDepth = 16
    /// The longest APNs `reason` kept, in characters (Apple's longest is 27, `TooManyProviderTokenUpdates`).
    public static let maximumReasonLength = 64
    /// The longest `Retry-After` honoured, in seconds (1 hour), so a misbehaving server cannot park
    /// deliveries for days or push the next attempt past what a timestamp column can hold.
    public static let maximumRetryAfter: Double = 3600

    /// The body as JSON, or `nil` when it is too large, not UTF-8, too deep or not JSON.
    static func parseBody(_ bytes: [UInt8]) -> JSONValue? {
        guard !bytes.isEmpty, bytes.count <= maximumBodySize,
              String(validating: bytes, as: UTF8.self) != nil,
              nestingDepth(bytes) <= maximumBodyDepth
        else { return nil }
        return try? JSONValue(parsing: bytes)
    }

    /// The deepest `[` / `{` nesting outside strings (an upper bound is all that is needed).
    static func nestingDepth(_ bytes: [UInt8]) -> Int {
        var depth = 0
        var deepest = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth = max(depth - 1, 0)
            default: break
            }
        }
        return deepest
    }

    /// `reason` without control characters, cut to ``maximumReasonLength`` characters; `nil` when nothing is left.
    static func sanitizedReason(_ reason: String) -> String? {
        var scalars = String.UnicodeScalarView()
        for scalar in reason.unicodeScalars where !HTTPFieldValue.isControl(scalar) {
            scalars.append(scalar)
            if scalars.count >= maximumReasonLength { break }
        }
        let text = String(scalars).trimmingCharacters(in: .whitespaces)
        return text.isEmpty ? nil : text
    }

    /// `milliseconds` when it can be a real APNs timestamp: from 10^12 ms (2001-09-09) to one day after `now`.
    static func plausibleTimestamp(_ milliseconds: Int64, now: Date) -> Int64? {
        let latest = now.timeIntervalSince1970 * 1000 + 86_400_000
        guard milliseconds >= 1_000_000_000_000, latest.isFinite, Double(milliseconds) <= latest else { return nil }
        return milliseconds
    }

    static func retryAfter(_ response: PushResponse, now: Date) -> Date? {
        guard let value = response.header("retry-after")?.trimmingCharacters(in: .whitespaces),
              !value.isEmpty, value.utf8.allSatisfy({ (48...57).contains($0) })
        else { return nil }
        // Digits only, so the only failure of Int(_:) is overflow: beyond any cap anyway.
        let seconds = Double(Int(value) ?? Int.max)
        return now.addingTimeInterval(min(seconds, maximumRetryAfter))
    }
}
