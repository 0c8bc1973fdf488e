import DeliveryCore

/// Where a planned request goes, as the plan decides it; the sender turns it into the connection's origin.
public enum PushDestination: Hashable, Sendable {
    /// The app channel's own `app_channels.endpoint`, already checked against the egress policy when the channel
    /// was parsed.
    case channelEndpoint
    /// Apple's production host, `api.push.apple.com:443` ("Sending notification requests to APNs").
    case apnsProduction
    /// Apple's development host, `api.sandbox.push.apple.com:443`.
    case apnsSandbox
    /// FCM's production host, `fcm.googleapis.com:443` (Firebase: "Send a message using FCM HTTP v1 API").
    case fcm
    /// Huawei Push Kit's host, `push-api.cloud.huawei.com:443` (Huawei: "Sending Messages").
    case huaweiPushKit
    /// A Web Push subscription's push service (RFC 8030 §5): the endpoint's host as the egress policy reads it
    /// (a name, or an address in canonical text) and its port.
    case pushService(host: String, port: Int)
}

/// What a request plan (``APNsRequestPlan``, ``FCMRequestPlan``, ``HuaweiRequestPlan``, ``WebPushRequestPlan``) makes of one delivery
/// before anything is sent.
public enum PlannedRequest: Sendable {
    /// The request to send, and where.
    case send(PushRequest, to: PushDestination)
    /// The outcome to record without sending: a request that cannot be built (the channel's settings at fault
    /// give a `channelError`, which pauses the channel; the message's or subscription's give `failed`), or a
    /// channel that cannot carry this push.
    case record(DeliveryOutcome)
}

/// What a request plan makes of a provider's answer.
public enum PlannedAnswer: Sendable, Equatable {
    /// The answer classified (``ProviderAnswer``), to be judged against the channel's fault evidence.
    case judged(ProviderAnswer)
    /// The answer refused the request's provider token (APNs) or access token (FCM): the sender replaces that
    /// token once fleet-wide and resends the delivery once with the new one. Only the first answer of a
    /// delivery is read so; a resend's answer is always ``judged(_:)``.
    case tokenRefused
}
