import DeliveryCore

/// The push services browsers hand out endpoints for, recognized by the endpoint's host, and what each needs
/// beyond RFC 8030 (docs/web-push.md, "Push services and their quirks"). No I/O.
public enum WebPushService: String, Sendable, CaseIterable {
    /// Chrome, Edge on Android, Opera...: `fcm.googleapis.com` (Firebase Cloud Messaging's Web Push endpoint).
    case fcm
    /// Firefox: Mozilla autopush, `updates.push.services.mozilla.com`.
    case autopush
    /// Safari: Apple's web push service, `web.push.apple.com` (Apple: allow `https://*.push.apple.com`).
    case apple
    /// Edge on Windows: Windows Push Notification Services, `*.notify.windows.com`.
    case wns
    /// Any other RFC 8030 push service: nothing beyond the RFCs.
    case other

    /// Recognizes a push service from an endpoint host (ASCII, lower case, as ``WebPushEndpoint/host``).
    public init(host: String) {
        func within(_ domain: String) -> Bool { host == domain || host.hasSuffix("." + domain) }
        if host == "fcm.googleapis.com" {
            self = .fcm
        } else if within("push.services.mozilla.com") {
            self = .autopush
        } else if within("push.apple.com") {
            self = .apple
        } else if within("notify.windows.com") {
            self = .wns
        } else {
            self = .other
        }
    }

    /// Headers this service wants in addition to RFC 8030's, after `ttl` / `urgency` / `topic`.
    ///
    /// WNS: `x-wns-cache-policy` consistent with the `ttl` (Microsoft, "Push notification service request
    /// and response headers": `cache` lets WNS keep the notification while the device is offline,
    /// `no-cache` drops it), so `cache` for a `ttl` above 0 and `no-cache` for `ttl: 0` (deliver now or
    /// never, RFC 8030 §5.2). Every other service: none.
    /// - Parameter ttl: the `ttl` header's value, in seconds.
    public func extraHeaders(ttl: Int) -> [PushHeader] {
        switch self {
        case .wns: [PushHeader("x-wns-cache-policy", ttl > 0 ? "cache" : "no-cache")]
        case .fcm, .autopush, .apple, .other: []
        }
    }
}
