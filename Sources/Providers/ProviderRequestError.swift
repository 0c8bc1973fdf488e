import DeliveryCore

/// Why a provider's request could not be built (APNs, FCM HTTP v1, Web Push): the worker fails the delivery, not
/// retried, with ``reason``, or skips it when ``skips`` (a push the provider cannot carry, such as Web Push's
/// `silent_push_unsupported`). One shape for every provider, as APNSwift's `APNSError` keeps one error with an
/// open-struct reason: ``reason`` is a ``DeliveryReason`` (snake_case, the `delivery_events.reason`), which any
/// provider extends with reasons of its own; `APNsRequestError`, `FCMRequestError` and `WebPushRequestError` name it
/// where each provider's factories throw it.
public struct ProviderRequestError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The `delivery_events.reason`, e.g. `payload_too_large`, `bad_device_token_format`, `missing_topic`.
    public var reason: DeliveryReason
    /// Human-readable detail (the offending field). Never a token, a key or a Web Push endpoint.
    public var detail: String
    /// `true`: nothing is wrong with the subscription or message, the push is just not sendable this way; the
    /// outcome is `skipped`, not `failed`.
    public var skips: Bool

    public init(reason: DeliveryReason, detail: String, skips: Bool = false) {
        self.reason = reason
        self.detail = detail
        self.skips = skips
    }

    public var description: String { "\(reason): \(detail)" }

    /// The outcome to record: `failed` (or `skipped` when ``skips``) with `reason` and `{"message": detail}`,
    /// subscription untouched.
    public var outcome: DeliveryOutcome {
        if skips { return .skipped(reason: reason, detail: ["message": .string(detail)]) }
        return .failed(reason: reason, detail: ["message": .string(detail)], invalidateSubscription: false)
    }
}
