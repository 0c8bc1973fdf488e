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
    /// - 406: `retry` `rate_limited`, like 429. Microsoft's push service (WNS) answers 406 Not Acceptable when
    ///   "the cloud service exceeded its throttle limit" (Microsoft, "Push notification service request and
    ///   response headers"); a push request asks for no content negotiation, so a 406 can mean nothing else.
    ///   `notBefore` from `Retry-After`, else from WNS's `X-WNS-CONTINUE-AFTER` (integer seconds), capped at
    ///   1 hour. Transient; the subscription is kept.
    /// - any other 4xx with a usable `Retry-After` (RFC 9110 §10.2.3: how long to wait before a follow-up
    ///   request): `retry` `http_<status>` not before it. A status with a meaning of its own keeps it (404 and
    ///   410 are gone whatever they add; 400, 401, 403, 413 and 415 refuse the request itself). Transient.
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
        func retry(_ reason: DeliveryReason, notBefore: Date? = RetryAfterHeader.notBefore(response, now: now)) -> ProviderAnswer {
            ProviderAnswer(.retry(reason: reason, detail: detailJSON, notBefore: notBefore), fault: .transient)
        }
        switch response.status {
        case 404, 410:
            return ProviderAnswer(
                .failed(reason: .unregistered, detail: detailJSON, invalidateSubscription: true), fault: .subscription)
        case 413:
            return ProviderAnswer(.failed(reason: .payloadTooLarge, detail: detailJSON), fault: .delivery)
        case 415:
            return ProviderAnswer(.failed(reason: .unsupportedMediaType, detail: detailJSON), fault: .delivery)
        case 408:
            return retry(.requestTimeout)
        case 429:
            return retry(.rateLimited)
        case 406:
            return retry(
                .rateLimited,
                notBefore: RetryAfterHeader.notBefore(response, now: now) ?? RetryAfterHeader.wnsContinueAfter(response, now: now))
        case 400:
            return ProviderAnswer(.failed(reason: .badRequest, detail: detailJSON), fault: .delivery, suspectsChannel: true)
        case 401:
            return ProviderAnswer(.failed(reason: .vapidUnauthorized, detail: detailJSON), fault: .delivery, suspectsChannel: true)
        case 403:
            return ProviderAnswer(.failed(reason: .vapidForbidden, detail: detailJSON), fault: .subscription, suspectsChannel: true)
        case 500...599:
            return retry(.http(status: response.status))
        case 400...499:
            if let notBefore = RetryAfterHeader.notBefore(response, now: now) { return retry(.http(status: response.status), notBefore: notBefore) }
            return ProviderAnswer(.failed(reason: .http(status: response.status), detail: detailJSON), fault: .delivery)
        default:
            return ProviderAnswer(.failed(reason: .http(status: response.status), detail: detailJSON), fault: .delivery)
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
