/// The delivery domain's closed vocabularies, decoded once from their database text. The text values are a
/// pinned contract (docs/producer-contract.md): `rawValue` / ``Platform/text`` is exactly what the tables
/// hold, and nothing else is ever written.

/// `subscriptions.platform`: `ios`, `android`, `web`, `huawei` (an Android device with HMS Core, served by Huawei
/// Push Kit); any other text is kept as ``unknown(_:)`` so the
/// delivery fails `unknown_platform` naming it instead of the row being refused.
public enum Platform: Sendable, Hashable, CustomStringConvertible {
    case ios
    case android
    case web
    /// An Android device with HMS Core and no Google services (docs/huawei.md).
    case huawei
    /// A value the worker does not know (a producer ahead of it, or a typo).
    case unknown(String)

    /// Decodes the column text; case-sensitive, as the column stores it.
    public init(_ text: String) {
        switch text {
        case "ios": self = .ios
        case "android": self = .android
        case "web": self = .web
        case "huawei": self = .huawei
        default: self = .unknown(text)
        }
    }

    /// The column text.
    public var text: String {
        switch self {
        case .ios: "ios"
        case .android: "android"
        case .web: "web"
        case .huawei: "huawei"
        case .unknown(let text): text
        }
    }

    public var description: String { text }

    /// The provider that serves the platform (`subscriptions.platform` -> `app_channels.provider`), `nil`
    /// for an unknown one.
    public var provider: Provider? {
        switch self {
        case .ios: .apns
        case .android: .fcm
        case .web: .webpush
        case .huawei: .huawei
        case .unknown: nil
        }
    }
}

/// `app_channels.provider`: Apple Push Notification service, Firebase Cloud Messaging (HTTP v1), Web Push
/// (RFC 8030 with RFC 8291 encryption and RFC 8292 VAPID), and Huawei Push Kit (server API v1).
public enum Provider: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case apns
    case fcm
    case webpush
    case huawei

    public var description: String { rawValue }

    /// The `subscriptions.platform` this provider serves (the inverse of ``Platform/provider``).
    public var platform: Platform {
        switch self {
        case .apns: .ios
        case .fcm: .android
        case .webpush: .web
        case .huawei: .huawei
        }
    }
}

/// `delivery_events.event`.
public enum DeliveryEvent: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// The provider accepted the push.
    case sent
    /// Permanently not delivered.
    case failed
    /// Will be tried again (`deliveries.next_run_at`).
    case retrying
    /// Not sent, by rule (expired, capped, canceled, ...).
    case skipped
    /// Held by quiet hours until `detail.until`.
    case deferred

    public var description: String { rawValue }
}

extension DeliveryOutcome {
    /// The `delivery_events.event` this outcome writes (a channel error writes `retrying`).
    public var event: DeliveryEvent {
        switch self {
        case .sent: .sent
        case .failed: .failed
        case .retry, .channelError: .retrying
        case .skipped: .skipped
        case .deferred: .deferred
        }
    }

    /// The reason the outcome carries (``DeliveryReason/quietHours`` for a deferral), `nil` for `sent`.
    public var reason: DeliveryReason? {
        switch self {
        case .sent: nil
        case .failed(let reason, _, _), .retry(let reason, _, _), .channelError(let reason, _, _), .skipped(let reason, _):
            reason
        case .deferred(_, _, let reason): reason
        }
    }
}
