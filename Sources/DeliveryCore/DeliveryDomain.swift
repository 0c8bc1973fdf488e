/// The delivery domain's closed vocabularies, decoded once from their database text. The text values are a
/// pinned contract (docs/producer-contract.md): `rawValue` / ``Platform/text`` is exactly what the tables
/// hold, and nothing else is ever written.

/// `subscriptions.platform`: `ios`, `android`, `web`; any other text is kept as ``unknown(_:)`` so the
/// delivery fails `unknown_platform` naming it instead of the row being refused.
public enum Platform: Sendable, Hashable, CustomStringConvertible {
    case ios
    case android
    case web
    /// A value the worker does not know (a producer ahead of it, or a typo).
    case unknown(String)

    /// Decodes the column text; case-sensitive, as the column stores it.
    public init(_ text: String) {
        switch text {
        case "ios": self = .ios
        case "android": self = .android
        case "web": self = .web
        default: self = .unknown(text)
        }
    }

    /// The column text.
    public var text: String {
        switch self {
        case .ios: "ios"
        case .android: "android"
        case .web: "web"
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
        case .unknown: nil
        }
    }
}

/// `app_channels.provider`: Apple Push Notification service, Firebase Cloud Messaging (HTTP v1), and Web
/// Push (RFC 8030 with RFC 8291 encryption and RFC 8292 VAPID).
public enum Provider: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case apns
    case fcm
    case webpush

    public var description: String { rawValue }
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

/// The `delivery_events.reason` values the worker's own rules write (provider answers add their own, e.g.
/// `unregistered`, `bad_device_token`). `rawValue` is the stored text.
public enum DeliveryReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// `failed`: claimed more times than `PUSHIZO_MAX_ATTEMPTS` allows (counted retries, or crashes mid-send).
    case maxAttempts = "max_attempts"
    /// `failed`: retries that spent no attempt went past `PUSHIZO_MAX_UNCOUNTED_RETRIES`.
    case retriesExhausted = "retries_exhausted"
    /// `failed`: a producer- or subscriber-written column of the delivery's rows (e.g. `subscriptions.token`)
    /// is longer than the worker reads; `detail.columns` names them.
    case oversizedColumn = "oversized_column"
    /// `skipped`: the notification was canceled, or its row deleted.
    case canceled
    /// `skipped`: past `ttl` (or `ttl` 0 on a second attempt, or quiet hours end after the expiry).
    case expired
    /// `skipped`: the subscription is not `active`.
    case subscriptionInactive = "subscription_inactive"
    /// `failed`: `subscriptions.platform` is not `ios`, `android` or `web`.
    case unknownPlatform = "unknown_platform"
    /// `skipped`: the app has no channel for the platform's provider.
    case noChannel = "no_channel"
    /// `skipped`: the message has nothing this provider can show (a badge- or sound-only push, which only
    /// APNs carries, to an Android or web subscription).
    case nothingToShow = "nothing_to_show"
    /// `failed`: the message's `apns_push_type` (VoIP, Live Activity) is an APNs push type and the
    /// subscription's provider is FCM or Web Push, which have neither (a `voip` / `liveactivity` subscription
    /// whose platform is not `ios`).
    case pushTypeUnsupported = "push_type_unsupported"
    /// `deferred`: quiet hours.
    case quietHours = "quiet_hours"
    /// `deferred`: the message's `delivery_time_of_day` has not come yet in the subscriber's zone.
    case localTime = "local_time"
    /// `retrying` (no attempt spent): the app's channel is paused.
    case channelPaused = "channel_paused"
    /// `skipped`: a frequency cap rule is full for the user.
    case frequencyCapped = "frequency_capped"
    /// `retrying` (no attempt spent): the frequency-cap reservation could not be made.
    case capUnavailable = "cap_unavailable"
    /// `retrying` (no attempt spent, no event): the claim's lease had less than the per-delivery deadline left.
    case leaseExpiring = "lease_expiring"
    /// `retrying` (no attempt spent): the message could not be read from the database.
    case messageUnavailable = "message_unavailable"
    /// `retrying` (no attempt spent): the provider could not be reached (the request never left).
    case providerUnreachable = "provider_unreachable"
    /// `retrying` (no attempt spent, no event, not counted against the retries allowed): the request waited 2 s for
    /// a stream (every stream of the push service in use, or its connection not open) and was withdrawn unsent; the
    /// worker, not the delivery, was short of streams there. It comes back after the outage backoff (a tenth of
    /// the message's age).
    case originBusy = "origin_busy"
    /// `retrying`: the whole provider exchange took longer than the per-delivery deadline.
    case deadlineExceeded = "deadline_exceeded"
    /// `failed`: no sender serves the platform's provider.
    case providerNotSupported = "provider_not_supported"
    /// `failed`: the message does not validate (the detail names the field).
    case invalidMessage = "invalid_message"
    /// `failed`: the message or the request built from it is too large.
    case payloadTooLarge = "payload_too_large"

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

    /// The reason text the outcome carries (`quiet_hours` for a deferral), `nil` for `sent`.
    public var reason: String? {
        switch self {
        case .sent: nil
        case .failed(let reason, _, _), .retry(let reason, _, _), .channelError(let reason, _, _), .skipped(let reason, _):
            reason
        case .deferred(_, _, let reason): reason.rawValue
        }
    }
}
