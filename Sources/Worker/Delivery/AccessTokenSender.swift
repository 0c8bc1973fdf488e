import DeliveryCore
import Foundation
import HTTP2
import Providers

/// An app's channel whose requests carry the fleet's shared OAuth 2.0 access token and go to one origin (FCM's
/// service account, Huawei's client credentials), as an ``AccessTokenSender`` keeps it.
protocol AccessTokenChannel: Sendable {
    /// Where the channel's requests go: its `endpoint` override, else the provider's host.
    var origin: HTTP2Origin { get }
    /// The shared token: its credential and the sender's policy.
    var tokenKey: ProviderTokenKey { get }
    var evidence: ChannelEvidence { get }
    /// The app, as its requests' tenant (``HTTP2Request/tenant``).
    var tenant: HTTP2Tenant { get }
    /// The provider's answer through the channel's request plan (``FCMRequestPlan/judge(_:now:resent:)``,
    /// ``HuaweiRequestPlan/judge(_:now:resent:)``).
    func plannedAnswer(_ response: PushResponse, now: Date, resent: Bool) -> PlannedAnswer
}

/// A provider sender whose requests carry one shared OAuth 2.0 access token per credential (docs/provider-tokens.md)
/// to a single origin per channel: the parts of ``PlannedBatchSender`` that FCM and Huawei Push Kit do alike.
protocol AccessTokenSender: PlannedBatchSender where PlannedChannel: AccessTokenChannel, Token == String {
    /// The HTTP/2 client every request of the sender goes through.
    var client: HTTP2Client { get }
    var tokens: SharedProviderTokens { get }
    var channels: ChannelCache<PlannedChannel> { get }
    /// The provider's own origin (a channel with another origin chose it).
    static var defaultOrigin: HTTP2Origin { get }
}

extension AccessTokenSender {
    func tokenKey(of channel: PlannedChannel) -> ProviderTokenKey? { channel.tokenKey }

    func text(of token: String) -> String { token }

    /// Expired or revoked token: replaced only while it is still current, so concurrent refusals (in this worker
    /// and across the fleet) refresh once.
    func reportRefused(_ token: String, for channel: PlannedChannel) {
        tokens.reportRejected(token, for: channel.tokenKey.credential)
    }

    func route(_ destination: PushDestination, channel: PlannedChannel) -> (client: HTTP2Client, origin: HTTP2Origin) {
        (client, channel.origin)
    }

    func tenant(of channel: PlannedChannel) -> HTTP2Tenant { channel.tenant }

    func judge(
        _ response: PushResponse, of item: BatchedSend, channel: PlannedChannel, origin: HTTP2Origin, token: String?,
        resent: Bool
    ) -> BatchVerdict {
        // Retry-After counts from the answer's arrival (RFC 9110 §10.2.3), not from when the delivery was decided,
        // on PostgreSQL's clock (docs/clocks.md): it becomes the next attempt's `run_at`.
        let answered = item.delivery.judgedNow()
        switch channel.plannedAnswer(response, now: answered, resent: resent) {
        case .tokenRefused: return .tokenRefused
        case .judged(let answer):
            return .outcome(channel.evidence.judge(answer, subscription: item.delivery.subscriptionID, origin: origin.description, now: answered))
        }
    }

    /// An endpoint the channel chose (an `endpoint` override) that cannot be used pauses the channel.
    func transportOutcome(_ outcome: DeliveryOutcome, channel: PlannedChannel) -> DeliveryOutcome {
        channel.origin == Self.defaultOrigin ? outcome : ProviderTransport.channelEndpointOutcome(outcome)
    }

    func cachedChannel(for delivery: ClaimedDelivery) -> PlannedChannel? { channels.cachedChannel(for: delivery) }
}
