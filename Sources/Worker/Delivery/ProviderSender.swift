import DeliveryCore
import Foundation

/// One provider's send path (APNs, FCM or Web Push): credentials from the app's channel, the request, the
/// transport, and the classification of the answer, for a claimed batch's deliveries at once (a delivery that
/// goes alone is a batch of one), so that their requests reach the HTTP/2 client in one hand-off per origin and
/// their answers come back without a task per delivery. Never throws: transport failures, bad credentials and
/// refusals all become a ``DeliveryOutcome``.
public protocol ProviderSender: Sendable {
    /// `app_channels.provider` this sender serves.
    var provider: Provider { get }

    /// Sends the deliveries of `batch` and reports each one's outcome through `completed` (with its index in
    /// `batch`) as soon as that one's answer is judged, exactly once per delivery. Every exchange (token,
    /// request, a resend with a replaced token) ends by `context.deadline`, else its delivery ends as
    /// ``SendBatchContext/deadlineExceeded``.
    func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async

    /// The fleet's shared token `delivery`'s requests would carry (its channel's credential and policy), so the
    /// claim can read it beside the batch (``ClaimedBatchPrefetch``); `nil` when they carry none (certificate-based
    /// APNs channels, Web Push, whose VAPID JWT is signed per origin) or the channel's settings do not parse (the
    /// send reports that). May build and cache the app's channel, as the send would.
    func sharedTokenKey(for delivery: ClaimedDelivery) -> ProviderTokenKey?
}

extension ProviderSender {
    /// No shared token.
    public func sharedTokenKey(for delivery: ClaimedDelivery) -> ProviderTokenKey? { nil }
}

/// One delivery of a claimed batch that passed every check and is to be sent, with its parsed message.
public struct BatchedSend: Sendable {
    public var delivery: ClaimedDelivery
    public var message: NotificationMessage

    public init(delivery: ClaimedDelivery, message: NotificationMessage) {
        self.delivery = delivery
        self.message = message
    }
}

/// What a batch send is given besides its deliveries: the time its decisions were taken and the per-delivery
/// deadline, shared by the whole batch since its exchanges start together.
public struct SendBatchContext: Sendable {
    /// The time the deliveries were decided at (`apns-expiration` and the like are computed from it).
    public var now: Date
    /// When every exchange of the batch must have ended: the batch's start plus the per-delivery deadline.
    /// `nil`: no deadline (tests).
    public var deadline: ContinuousClock.Instant?
    /// The per-delivery deadline ``deadline`` was set from.
    public var timeout: Duration

    public init(now: Date, deadline: ContinuousClock.Instant?, timeout: Duration) {
        self.now = now
        self.deadline = deadline
        self.timeout = timeout
    }

    /// The outcome of an exchange cut off by ``deadline``: a counted retry, since the request may have
    /// reached the provider.
    public var deadlineExceeded: DeliveryOutcome {
        .deadlineExceeded(after: timeout)
    }
}
