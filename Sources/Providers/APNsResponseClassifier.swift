import DeliveryCore
import Foundation

/// Turns an APNs response into a ``DeliveryOutcome`` (Apple: "Handling notification responses from APNs").
public enum APNsResponseClassifier {
    /// Reasons that mean the app's credentials or channel configuration are wrong: the channel pauses and
    /// no subscription is touched.
    public static let channelReasons: Set<String> = [
        "ExpiredProviderToken", "InvalidProviderToken", "MissingProviderToken", "BadCertificate",
        "BadCertificateEnvironment", "Forbidden", "MissingTopic", "BadTopic", "TopicDisallowed",
    ]

    /// - 200: `sent` with the response's `apns-id` header.
    /// - 410 (`Unregistered`, `ExpiredToken`): `failed` `unregistered` / `expired_token` invalidating the
    ///   subscription, unless `subscriptionTokenUpdatedAt` is later than the response's `timestamp`
    ///   (ms since epoch): the token was registered again after APNs saw it go, so only this delivery fails.
    /// - 400 `BadDeviceToken`: `failed` `bad_device_token`, invalidating only when
    ///   `sentToSubscriptionEnvironment` (the request went to the environment the subscription recorded;
    ///   otherwise it is a configuration mismatch, DESIGN §4).
    /// - 403 (any reason) and 400 `MissingTopic` / `BadTopic` / `TopicDisallowed`: `channelError` with the
    ///   snake_case reason; never invalidates. After `ExpiredProviderToken` / `InvalidProviderToken` also call
    ///   ``APNsTokenManager/invalidate()`` (see ``requiresNewProviderToken(_:)``).
    /// - 429 and 5xx: `retry` (with `notBefore` from a `Retry-After` of delta seconds, relative to `now`).
    /// - any other status: `failed` with the snake_case of APNs's reason (`PayloadTooLarge` ->
    ///   `payload_too_large`), or `http_<status>` without one.
    /// Every non-200 detail is `{"status": <int>, "apns_reason": "<Reason>"?, "timestamp": <ms>?}`. An
    /// unparsable body is classified by status alone.
    public static func classify(_ response: PushResponse, subscriptionTokenUpdatedAt: Date?,
                                sentToSubscriptionEnvironment: Bool = true, now: Date = Date()) -> DeliveryOutcome
    {
        if response.status == 200 {
            return .sent(providerMessageID: response.header("apns-id"))
        }
        let body = try? JSONValue(parsing: response.body)
        let apnsReason = body?["reason"]?.stringValue
        let timestamp = body?["timestamp"]?.int64Value
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let apnsReason { detail["apns_reason"] = .string(apnsReason) }
        if let timestamp { detail["timestamp"] = .int(timestamp) }
        let detailJSON = JSONValue.object(detail)
        let reason = apnsReason.map(snakeCase) ?? "http_\(response.status)"

        switch response.status {
        case 410:
            let goneReason = apnsReason.map(snakeCase) ?? "unregistered"
            if let timestamp, let updated = subscriptionTokenUpdatedAt,
               updated.timeIntervalSince1970 * 1000 > Double(timestamp)
            {
                return .failed(reason: goneReason, detail: detailJSON, invalidateSubscription: false)
            }
            return .failed(reason: goneReason, detail: detailJSON, invalidateSubscription: true)
        case 403:
            return .channelError(reason: apnsReason.map(snakeCase) ?? "forbidden", detail: detailJSON)
        case 429, 500...599:
            return .retry(reason: apnsReason.map(snakeCase) ?? "http_\(response.status)", detail: detailJSON,
                          notBefore: retryAfter(response, now: now))
        case 400 where apnsReason == "BadDeviceToken":
            return .failed(reason: "bad_device_token", detail: detailJSON, invalidateSubscription: sentToSubscriptionEnvironment)
        default:
            if let apnsReason, channelReasons.contains(apnsReason) {
                return .channelError(reason: reason, detail: detailJSON)
            }
            return .failed(reason: reason, detail: detailJSON)
        }
    }

    /// `true` for 403 `ExpiredProviderToken` / `InvalidProviderToken`: the worker should call
    /// ``APNsTokenManager/invalidate()`` for that team + key.
    public static func requiresNewProviderToken(_ response: PushResponse) -> Bool {
        guard response.status == 403, let body = try? JSONValue(parsing: response.body),
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

    static func retryAfter(_ response: PushResponse, now: Date) -> Date? {
        guard let value = response.header("retry-after")?.trimmingCharacters(in: .whitespaces),
              let seconds = Int(value), seconds >= 0
        else { return nil }
        return now.addingTimeInterval(Double(seconds))
    }
}
