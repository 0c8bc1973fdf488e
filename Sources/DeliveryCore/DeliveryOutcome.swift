import Foundation

/// What one send attempt of one delivery came to, as decided by a provider's response classifier
/// (or by policy before any send). The worker turns it into a `delivery_events` row (docs/producer-contract.md) and
/// into the queue change that goes with it.
public enum DeliveryOutcome: Sendable, Equatable {
    /// The provider accepted the push. Event `sent`; `providerMessageID` goes to `detail` (APNs's
    /// `apns-id`, FCM's message name, Web Push's `Location`).
    case sent(providerMessageID: String?)

    /// Permanent failure of this delivery. Event `failed` with `reason` (snake_case, e.g. `unregistered`,
    /// `bad_device_token`, `payload_too_large`, `invalid_message`), `detail` (e.g. the provider's own reason
    /// string). With `invalidateSubscription` the subscription is marked `invalid` with `reason`.
    case failed(reason: DeliveryReason, detail: JSONValue = .null, invalidateSubscription: Bool = false)

    /// Transient failure: try again. Event `retrying`; the next attempt is not before `notBefore`
    /// (e.g. from `Retry-After`), and not before the worker's own backoff for this attempt.
    case retry(reason: DeliveryReason, detail: JSONValue = .null, notBefore: Date? = nil)

    /// The app's provider credentials or settings are at fault: an answer naming the credential (APNs
    /// `InvalidProviderToken`, FCM `PERMISSION_DENIED`), settings that do not parse, or enough
    /// ``ChannelFaultEvidence`` (never one subscription's answer alone). The channel is paused until
    /// `pausedUntil`, this delivery goes back to the queue for after the pause, and the subscription is left
    /// alone.
    case channelError(reason: DeliveryReason, detail: JSONValue = .null, pausedUntil: Date? = nil)

    /// Not sent, by rule. Event `skipped` with `reason`: `frequency_capped`, `expired`,
    /// `subscription_inactive`, `canceled`, `no_channel`.
    case skipped(reason: DeliveryReason, detail: JSONValue = .null)

    /// Held by rule: event `deferred` with `reason` (`quiet_hours`, or `local_time` for a delivery claimed
    /// before its `delivery_time_of_day`) and `detail.until`; the delivery runs again at `until`.
    case deferred(until: Date, detail: JSONValue = .null, reason: DeliveryReason = .quietHours)
}

extension DeliveryOutcome {
    /// The `delivery_events.event` value this outcome writes. A channel error writes `retrying`.
    public var eventName: String { event.rawValue }

    /// A counted retry `deadline_exceeded` of an exchange cut off after `timeout` (the request may have reached
    /// the provider); `detail.deadline_s` is `timeout` in seconds.
    public static func deadlineExceeded(after timeout: Duration) -> DeliveryOutcome {
        .retry(reason: .deadlineExceeded, detail: ["deadline_s": .double(timeout.inSeconds)])
    }

    /// `true` when the delivery leaves the queue (`sent`, `failed`, `skipped`).
    public var isTerminal: Bool {
        switch self {
        case .sent, .failed, .skipped: true
        case .retry, .channelError, .deferred: false
        }
    }
}
