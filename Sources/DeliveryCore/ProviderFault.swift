import Foundation

/// Whose fault a provider's answer is (the tables of docs/provider-answers.md). It decides what the worker
/// touches: only the delivery, the subscription too, the app's whole channel, or nothing (try again).
public enum ProviderFault: String, Sendable, Equatable, CaseIterable {
    /// Accepted: nobody's fault.
    case accepted
    /// This push is wrong (its payload, its headers): the delivery fails, nothing else changes.
    case delivery
    /// The subscriber's token or endpoint is gone or wrong: the delivery fails and, where the answer says
    /// so, the subscription is marked `invalid`.
    case subscription
    /// The app's credentials or channel settings are wrong: the channel pauses, the delivery waits.
    case channel
    /// A credential of the app that carries only some of the channel's pushes is wrong (FCM
    /// `THIRD_PARTY_AUTH_ERROR`: the APNs certificate or web push auth key configured in Firebase, which FCM
    /// uses for Apple and web apps only). The channel goes on; the subscription it was refused for waits
    /// (``CredentialHolds``), kept, never failed for it.
    case partialCredential
    /// The provider or the path to it failed for now: the delivery is retried.
    case transient
}

/// A provider's answer as its classifier reads it: the outcome for one delivery, whose fault it is, and
/// whether the answer is one a wrong channel credential would also give.
public struct ProviderAnswer: Sendable, Equatable {
    /// The outcome when this answer is taken on its own (one subscription's answer).
    public var outcome: DeliveryOutcome
    public var fault: ProviderFault
    /// The answer names no credential, yet every subscription would get it if the channel's credentials or
    /// settings were wrong (Web Push 400/401/403, APNs `DeviceTokenNotForTopic`, FCM `SENDER_ID_MISMATCH`).
    /// On its own it is `fault` (a delivery failure); several distinct subscriptions refused so within a
    /// window are evidence against the channel (``ChannelFaultEvidence``).
    public var suspectsChannel: Bool
    /// For a suspect answer: the subscription is marked `invalid` when the channel's credentials were
    /// accepted for other subscriptions within the evidence window (they work, so the subscription is at
    /// fault; FCM `SENDER_ID_MISMATCH`). Without that proof only the delivery fails.
    public var invalidatesWhenCredentialsWork: Bool

    public init(
        _ outcome: DeliveryOutcome, fault: ProviderFault, suspectsChannel: Bool = false,
        invalidatesWhenCredentialsWork: Bool = false
    ) {
        self.outcome = outcome
        self.fault = fault
        self.suspectsChannel = suspectsChannel
        self.invalidatesWhenCredentialsWork = invalidatesWhenCredentialsWork
    }
}

/// The evidence that one app's channel (one app + provider), not one subscription, is at fault. A value
/// without I/O: the worker keeps one per cached channel (so new settings start with no evidence) behind a
/// lock and feeds it every answer.
///
/// A channel pauses on a suspect answer (``ProviderAnswer/suspectsChannel``) only when, within
/// ``Policy/window``, at least ``Policy/distinctSubscriptions`` different subscriptions were
/// refused so, from at least ``Policy/distinctOrigins`` different origins (push services, for Web Push),
/// and no answer in that window accepted the channel's credentials. One subscription refused many times
/// counts once; an acceptance proves the credentials work, so refusals are then the subscriptions' own.
/// Answers that name the credential (APNs `InvalidProviderToken`) do not come here: they pause at once.
public struct ChannelFaultEvidence: Sendable, Equatable {
    /// How much evidence pauses a channel.
    public struct Policy: Sendable, Equatable {
        /// How long a refusal or an acceptance counts.
        public var window: Duration
        /// Distinct subscriptions refused within the window.
        public var distinctSubscriptions: Int
        /// Distinct origins among them.
        public var distinctOrigins: Int
        /// Refusals kept (the most recent, one per subscription), so memory stays bounded whatever arrives.
        public var maximumTracked: Int

        /// - Parameter window: a negative span counts as none.
        public init(window: Duration, distinctSubscriptions: Int, distinctOrigins: Int, maximumTracked: Int = 32) {
            self.window = max(window, .zero)
            self.distinctSubscriptions = max(distinctSubscriptions, 1)
            self.distinctOrigins = max(distinctOrigins, 1)
            self.maximumTracked = max(maximumTracked, self.distinctSubscriptions)
        }

        /// APNs and FCM (one provider origin): 3 distinct subscriptions within 10 minutes.
        public static let singleOrigin = Policy(window: .seconds(600), distinctSubscriptions: 3, distinctOrigins: 1)
        /// Web Push: 3 distinct subscriptions at 2 or more push-service origins within 10 minutes.
        public static let webPush = Policy(window: .seconds(600), distinctSubscriptions: 3, distinctOrigins: 2)
    }

    /// What one suspect refusal means, given the evidence so far.
    public enum Verdict: Sendable, Equatable {
        /// Not enough evidence against the channel: the answer stays one delivery's.
        case notEnoughEvidence
        /// The channel's credentials were accepted within the window: the refusal is the subscription's.
        case credentialsWork
        /// Enough distinct subscriptions and origins were refused: the channel is at fault.
        case channelAtFault(subscriptions: Int, origins: Int)
    }

    private struct Refusal: Sendable, Equatable {
        var subscription: UUID
        var origin: String
        var at: Date
    }

    public let policy: Policy
    /// Oldest first, at most one per subscription.
    private var refusals: [Refusal] = []
    private var lastAcceptance: Date?

    public init(policy: Policy) {
        self.policy = policy
    }

    /// Refusals currently counted (for tests and logs).
    public var trackedRefusals: Int { refusals.count }

    /// The channel's credentials were accepted at `origin` (any 2xx).
    public mutating func recordAcceptance(at time: Date) {
        if lastAcceptance.map({ $0 < time }) ?? true { lastAcceptance = time }
    }

    /// A suspect refusal of `subscription` by `origin` (scheme, host and port only).
    public mutating func recordRefusal(subscription: UUID, origin: String, at time: Date) -> Verdict {
        let horizon = time.addingTimeInterval(-policy.window.inSeconds)
        refusals.removeAll { $0.at < horizon || $0.subscription == subscription }
        if let accepted = lastAcceptance, accepted >= horizon { return .credentialsWork }
        refusals.append(Refusal(subscription: subscription, origin: origin, at: time))
        if refusals.count > policy.maximumTracked { refusals.removeFirst(refusals.count - policy.maximumTracked) }
        let origins = Set(refusals.map(\.origin)).count
        if refusals.count >= policy.distinctSubscriptions, origins >= policy.distinctOrigins {
            return .channelAtFault(subscriptions: refusals.count, origins: origins)
        }
        return .notEnoughEvidence
    }

    /// The outcome to record for `answer`, updating the evidence: an acceptance is remembered; a suspect
    /// refusal becomes a `channelError` (reason unchanged, detail gaining `refused_subscriptions` and
    /// `refused_origins`) when the evidence is enough, a failure invalidating the subscription when the
    /// credentials demonstrably work and the answer asks for it, else stays as classified. `origin` is
    /// evaluated for a suspect refusal only (every answer is judged; few are refusals).
    public mutating func judge(
        _ answer: ProviderAnswer, subscription: UUID, origin: @autoclosure () -> String, at time: Date
    ) -> DeliveryOutcome {
        if case .sent = answer.outcome {
            recordAcceptance(at: time)
            return answer.outcome
        }
        guard answer.suspectsChannel, case .failed(let reason, let detail, _) = answer.outcome else { return answer.outcome }
        switch recordRefusal(subscription: subscription, origin: origin(), at: time) {
        case .notEnoughEvidence:
            return answer.outcome
        case .credentialsWork:
            return answer.invalidatesWhenCredentialsWork
                ? .failed(reason: reason, detail: detail, invalidateSubscription: true) : answer.outcome
        case .channelAtFault(let subscriptions, let origins):
            var members = detail.objectValue ?? [:]
            members["refused_subscriptions"] = .int(Int64(subscriptions))
            members["refused_origins"] = .int(Int64(origins))
            return .channelError(reason: reason, detail: .object(members))
        }
    }
}
