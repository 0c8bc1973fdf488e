import DeliveryCore
import Foundation

/// Turns a push service's answer to a Web Push request (RFC 8030 §5) into a ``DeliveryOutcome``. No I/O.
/// Push services differ in their error bodies (Mozilla autopush sends `{"errno", "message"}`, FCM's web
/// push text, Apple plain JSON `{"reason"}`), so only the status and headers decide; a short sanitized
/// excerpt of the body goes to `detail`.
public enum WebPushResponseClassifier {
    /// The most body bytes looked at for the `detail` excerpt.
    public static let maximumBodyExcerpt = 200
    /// The longest `Location` kept, in bytes.
    public static let maximumLocationLength = 1024
    /// The longest `Retry-After` honoured, in seconds (1 hour).
    public static let maximumRetryAfter: Double = RetryAfterHeader.maximum

    /// - 201 (RFC 8030 §5: "Created"; 200 and 202 are accepted too): `sent` with the `Location` header (the
    ///   push message resource) when it is visible ASCII of at most 1024 bytes.
    /// - 404, 410: `failed` `unregistered` (the reason APNs and FCM use for the same event), invalidating
    ///   the subscription (RFC 8030 §7.3: the subscription expired or was removed).
    /// - 413: `failed` `payload_too_large` (RFC 8030 §7.2).
    /// - 429: `retry` `rate_limited`, `notBefore` from `Retry-After` (RFC 8030 §8.4; delta seconds or
    ///   IMF-fixdate, capped at 1 hour).
    /// - 400, 401, 403: `channelError` `bad_request` / `vapid_unauthorized` / `vapid_forbidden`: the VAPID
    ///   token or the app's configuration is wrong (RFC 8292 §4.2), so no invalidation and no endless retry.
    /// - 5xx: `retry` `http_<status>` (with `Retry-After` when given).
    /// - anything else: `failed` `http_<status>`.
    /// Every non-2xx detail is `{"status": <int>, "body": "<at most 200 characters, control characters
    /// removed>"?}`.
    public static func classify(_ response: PushResponse, now: Date = Date()) -> DeliveryOutcome {
        switch response.status {
        case 200...202:
            let location = response.header("location").flatMap {
                $0.utf8.count <= maximumLocationLength && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil
            }
            return .sent(providerMessageID: location)
        default:
            break
        }
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let excerpt = excerpt(response.body) { detail["body"] = .string(excerpt) }
        let detailJSON = JSONValue.object(detail)
        switch response.status {
        case 404, 410:
            return .failed(reason: "unregistered", detail: detailJSON, invalidateSubscription: true)
        case 413:
            return .failed(reason: "payload_too_large", detail: detailJSON)
        case 429:
            return .retry(reason: "rate_limited", detail: detailJSON, notBefore: RetryAfterHeader.notBefore(response, now: now))
        case 400:
            return .channelError(reason: "bad_request", detail: detailJSON)
        case 401:
            return .channelError(reason: "vapid_unauthorized", detail: detailJSON)
        case 403:
            return .channelError(reason: "vapid_forbidden", detail: detailJSON)
        case 500...599:
            return .retry(reason: "http_\(response.status)", detail: detailJSON, notBefore: RetryAfterHeader.notBefore(response, now: now))
        default:
            return .failed(reason: "http_\(response.status)", detail: detailJSON)
        }
    }

    /// The first ``maximumBodyExcerpt`` characters of a UTF-8 body (invalid bytes replaced) without control
    /// characters; `nil` when nothing is left.
    static func excerpt(_ body: [UInt8]) -> String? {
        guard !body.isEmpty else { return nil }
        // 4 bytes per character at most: never decode more than needed.
        let text = String(decoding: body.prefix(maximumBodyExcerpt * 4), as: UTF8.self)
        return FCMResponseClassifier.sanitizedMessage(String(text.prefix(maximumBodyExcerpt)))
    }
}
