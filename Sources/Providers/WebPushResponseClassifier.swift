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

    /// ``answer(_:now:)``'s outcome (kept for callers that need no fault class).
    public static func classify(_ response: PushResponse, now: Date = Date()) -> DeliveryOutcome {
        answer(response, now: now).outcome
    }

    /// The push service's answer with its fault class (docs/provider-answers.md, "Web Push"):
    /// - 201 (RFC 8030 §5: "Created"; 200 and 202 are accepted too): `sent` with the `Location` header (the
    ///   push message resource) when it is visible ASCII of at most 1024 bytes.
    /// - 404, 410: `failed` `unregistered` (the reason APNs and FCM use for the same event), invalidating
    ///   the subscription (RFC 8030 §7.3: the subscription expired or was removed). Subscription fault.
    /// - 413: `failed` `payload_too_large` (RFC 8030 §7.2); 415: `failed` `unsupported_media_type`. Delivery.
    /// - 400, 401, 403: `failed` `bad_request` / `vapid_unauthorized` / `vapid_forbidden`, subscription kept,
    ///   never retried. One push service's refusal of one subscription names no credential: RFC 8292 §4.2
    ///   has 403 for a subscription restricted to another key, and a hostile subscriber chooses the push
    ///   service. These answers suspect the channel (``ProviderAnswer/suspectsChannel``): only refusals of
    ///   several subscriptions at several origins pause it (``ChannelFaultEvidence``).
    /// - 408, 429: `retry` `request_timeout` / `rate_limited`, `notBefore` from `Retry-After` (RFC 8030
    ///   §8.4; delta seconds or IMF-fixdate, capped at 1 hour). 5xx: `retry` `http_<status>`. Transient.
    /// - anything else: `failed` `http_<status>`. Delivery.
    /// Every non-2xx detail is `{"status": <int>, "body": "<at most 200 characters, control characters
    /// removed>"?}`.
    public static func answer(_ response: PushResponse, now: Date = Date()) -> ProviderAnswer {
        switch response.status {
        case 200...202:
            let location = response.header("location").flatMap {
                $0.utf8.count <= maximumLocationLength && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil
            }
            return ProviderAnswer(.sent(providerMessageID: location), fault: .accepted)
        default:
            break
        }
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let excerpt = excerpt(response.body) { detail["body"] = .string(excerpt) }
        let detailJSON = JSONValue.object(detail)
        func retry(_ reason: String) -> ProviderAnswer {
            ProviderAnswer(
                .retry(reason: reason, detail: detailJSON, notBefore: RetryAfterHeader.notBefore(response, now: now)),
                fault: .transient)
        }
        switch response.status {
        case 404, 410:
            return ProviderAnswer(
                .failed(reason: "unregistered", detail: detailJSON, invalidateSubscription: true), fault: .subscription)
        case 413:
            return ProviderAnswer(.failed(reason: "payload_too_large", detail: detailJSON), fault: .delivery)
        case 415:
            return ProviderAnswer(.failed(reason: "unsupported_media_type", detail: detailJSON), fault: .delivery)
        case 408:
            return retry("request_timeout")
        case 429:
            return retry("rate_limited")
        case 400:
            return ProviderAnswer(.failed(reason: "bad_request", detail: detailJSON), fault: .delivery, suspectsChannel: true)
        case 401:
            return ProviderAnswer(.failed(reason: "vapid_unauthorized", detail: detailJSON), fault: .delivery, suspectsChannel: true)
        case 403:
            return ProviderAnswer(.failed(reason: "vapid_forbidden", detail: detailJSON), fault: .subscription, suspectsChannel: true)
        case 500...599:
            return retry("http_\(response.status)")
        default:
            return ProviderAnswer(.failed(reason: "http_\(response.status)", detail: detailJSON), fault: .delivery)
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
