import DeliveryCore
import Foundation
import HTTP2
import Providers

/// APNs's part of ``PlannedBatch``: token-based channels share one provider token per credential, certificate
/// channels carry none and go through their certificate's own client (``CertificateClients``).
extension APNsSender {
    /// Sends `batch` through ``PlannedBatch`` (see ``ProviderSender/send(batch:context:completed:)``).
    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        await PlannedBatch.send(self, batch: batch, context: context, completed: completed)
    }

    func plannedChannel(for item: BatchedSend) -> Result<AnyChannel, PlanRefusal> {
        let channel: AnyChannel
        do {
            channel = try self.channel(for: item.delivery)
        } catch {
            return .failure(PlanRefusal(outcome: Self.invalidChannelSettings(error)))
        }
        if case .certificate = channel, certificateClients == nil {
            return .failure(PlanRefusal(outcome: .channelError(
                reason: .invalidChannelSettings, detail: ["error": "certificate-based APNs channels are not enabled in this sender"])))
        }
        return .success(channel)
    }

    func tokenKey(of channel: AnyChannel) -> ProviderTokenKey? {
        guard case .token(let token) = channel else { return nil }
        return token.tokenKey
    }

    /// A provider token with its `authorization` field, built once per fetch so a batch's requests share one
    /// string and the HTTP/2 client compares rather than checks it.
    struct BearerToken: Sendable {
        var token: String
        var authorization: APNsProviderAuthorization
    }

    func token(for channel: AnyChannel) async -> Result<BearerToken, PlanRefusal> {
        guard case .token(let token) = channel else {
            return .failure(PlanRefusal(outcome: .channelError(
                reason: .invalidChannelSettings, detail: ["error": "a certificate-based APNs channel has no provider token"])))
        }
        do {
            let bearer = try await self.token(for: token)
            return .success(BearerToken(token: bearer, authorization: APNsProviderAuthorization(bearerToken: bearer)))
        } catch {
            return .failure(PlanRefusal(outcome: .channelError(reason: .providerTokenFailed, detail: ["error": .string("\(error)")])))
        }
    }

    func text(of token: BearerToken) -> String { token.token }

    func reportRefused(_ token: BearerToken, for channel: AnyChannel) {
        guard case .token(let tokenChannel) = channel else { return }
        tokens.reportRejected(token.token, for: tokenChannel.tokenKey.credential)
    }

    func plannedRequest(for item: BatchedSend, channel: AnyChannel, token: BearerToken?, now: Date) -> PlannedRequest {
        let plan = channel.plan
        let apnsDelivery = DeliveryRendering.apnsDelivery(
            for: item.delivery, message: item.message, topic: plan.topic, now: now, userTags: userTags)
        let renderKey = DeliveryRendering.renderKey(for: item.delivery, message: item.message, variant: provider.rawValue)
        return plan.request(for: apnsDelivery, authorization: token?.authorization) { () throws(APNsRequestError) in
            try self.renders.payload(
                key: renderKey, msgID: apnsDelivery.msgID,
                render: { () throws(APNsRequestError) in try APNsRequestFactory.payload(for: apnsDelivery) },
                template: { () throws(APNsRequestError) in try APNsRequestFactory.payloadTemplate(for: apnsDelivery) })
        }
    }

    func route(_ destination: PushDestination, channel: AnyChannel) -> (client: HTTP2Client, origin: HTTP2Origin) {
        let origin = Self.origin(of: destination, channelEndpoint: channel.origin)
        guard case .certificate(let certificate) = channel, let certificateClients else { return (client, origin) }
        return (certificateClients.client(for: certificate.credentials.identity), origin)
    }

    func tenant(of channel: AnyChannel) -> HTTP2Tenant { channel.tenant }

    func judge(
        _ response: PushResponse, of item: BatchedSend, channel: AnyChannel, origin: HTTP2Origin, token: BearerToken?, resent: Bool
    ) -> BatchVerdict {
        // PostgreSQL's clock (docs/clocks.md): a Retry-After or a hold becomes the next attempt's `run_at`.
        let answered = item.delivery.judgedNow()
        switch channel.plan.judge(response, subscriptionTokenUpdatedAt: item.delivery.tokenUpdatedAt, now: answered, resent: resent) {
        case .tokenRefused:
            return .tokenRefused
        case .judged(let answer):
            // The replaced token refused too: reported as well, so the next push replaces it again.
            if resent, let token, APNsResponseClassifier.requiresNewProviderToken(response) { reportRefused(token, for: channel) }
            return .outcome(channel.evidence.judge(answer, subscription: item.delivery.subscriptionID, origin: origin.description, now: answered))
        }
    }

    /// A transport failure's outcome: an endpoint the channel chose (an `endpoint` override) that cannot be
    /// used pauses the channel instead of failing the delivery.
    func transportOutcome(_ outcome: DeliveryOutcome, channel: AnyChannel) -> DeliveryOutcome {
        channel.origin == nil ? outcome : ProviderTransport.channelEndpointOutcome(outcome)
    }
}

extension APNsSender.AnyChannel {
    var plan: APNsRequestPlan {
        switch self {
        case .token(let channel): channel.plan
        case .certificate(let channel): channel.plan
        }
    }

    var origin: HTTP2Origin? {
        switch self {
        case .token(let channel): channel.origin
        case .certificate(let channel): channel.origin
        }
    }

    var tenant: HTTP2Tenant {
        switch self {
        case .token(let channel): channel.tenant
        case .certificate(let channel): channel.tenant
        }
    }

    var evidence: ChannelEvidence {
        switch self {
        case .token(let channel): channel.evidence
        case .certificate(let channel): channel.evidence
        }
    }
}
