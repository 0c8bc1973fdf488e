import Foundation

/// The subscriptions of one channel whose pushes wait because a credential that carries only some of the
/// channel's pushes was refused for them (``ProviderFault/partialCredential``; docs/provider-answers.md, "When a
/// credential carries only some pushes"). A value without I/O: the worker keeps one per cached channel, beside
/// its ``ChannelFaultEvidence``, so new settings start with nothing held.
///
/// FCM answers `THIRD_PARTY_AUTH_ERROR` (Firebase, `google.firebase.fcm.v1.FcmError.ErrorCode`: "APNs
/// certificate or web push auth key was invalid or missing") only for the registration tokens of Apple and web
/// apps, which FCM delivers through that credential; Android tokens of the same channel go through FCM alone.
/// Nothing in the subscription row says which tokens those are (every row an `fcm` channel serves is
/// `platform` `android`, `kind` `device`, and a registration token is opaque), so the scope is learned from the
/// answers: the subscription refused so is held for ``Policy/hold``, its pushes waiting without a
/// request, while every other subscription of the channel is sent as usual. A hold says the credential is
/// wrong, not the subscription: the subscription is kept, and its deliveries wait (retries that spend no
/// attempt) until the credential is fixed or their retry bounds end them.
public struct CredentialHolds: Sendable, Equatable {
    /// How long a subscription is held, and how many are remembered.
    public struct Policy: Sendable, Equatable {
        /// How long a subscription is held after a refusal, and the earliest retry of the refused delivery.
        public var hold: Duration
        /// Subscriptions held at once, the most recently refused; past it the oldest hold is dropped, and that
        /// subscription's next push costs one more request. Bounds memory whatever the answers.
        public var maximumHeld: Int

        /// - Parameter hold: a negative span holds for none.
        public init(hold: Duration, maximumHeld: Int) {
            self.hold = max(hold, .zero)
            self.maximumHeld = max(maximumHeld, 1)
        }

        /// 5 minutes, as long as a channel pause; 64 subscriptions per channel.
        public static let standard = Policy(hold: .seconds(300), maximumHeld: 64)
    }

    private struct Hold: Sendable, Equatable {
        var subscription: UUID
        var reason: DeliveryReason
        var refusedAt: Date
        var until: Date
    }

    public let policy: Policy
    /// Oldest refusal first, at most one per subscription.
    private var holds: [Hold] = []

    public init(policy: Policy = .standard) {
        self.policy = policy
    }

    /// Holds currently remembered, expired ones included until the next refusal (for tests and logs).
    public var heldSubscriptions: Int { holds.count }

    /// The outcome to record for `answer`: a ``ProviderFault/partialCredential`` retry holds `subscription`
    /// until `time` plus ``Policy/hold`` and comes back with that instant as its `notBefore` and as
    /// `detail.held_until`; any other answer's outcome is returned unchanged.
    public mutating func judge(_ answer: ProviderAnswer, subscription: UUID, at time: Date) -> DeliveryOutcome {
        guard answer.fault == .partialCredential, case .retry(let reason, let detail, let notBefore) = answer.outcome else {
            return answer.outcome
        }
        let until = max(time.addingTimeInterval(policy.hold.inSeconds), notBefore ?? time)
        holds.removeAll { $0.until <= time || $0.subscription == subscription }
        holds.append(Hold(subscription: subscription, reason: reason, refusedAt: time, until: until))
        if holds.count > policy.maximumHeld { holds.removeFirst(holds.count - policy.maximumHeld) }
        var members = detail.objectValue ?? [:]
        members["held_until"] = .string(until.formatted(.iso8601))
        return .retry(reason: reason, detail: .object(members), notBefore: until)
    }

    /// The outcome of a push to `subscription` while it is held, without a request: a retry with the refusal's
    /// reason, not before the hold ends, `detail` = `{"refused_at", "held_until"}` (no `status`: nothing was
    /// sent); `nil` when the subscription is not held at `time`.
    public func heldOutcome(for subscription: UUID, at time: Date) -> DeliveryOutcome? {
        guard let hold = holds.last(where: { $0.subscription == subscription }), hold.until > time else { return nil }
        return .retry(
            reason: hold.reason,
            detail: ["refused_at": .string(hold.refusedAt.formatted(.iso8601)), "held_until": .string(hold.until.formatted(.iso8601))],
            notBefore: hold.until)
    }
}
