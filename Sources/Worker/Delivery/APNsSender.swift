import DeliveryCore
import Foundation
import HTTP2
import Providers
import PushCrypto
import Synchronization
import UUIDText

/// APNs over HTTP/2 with token-based authentication (Apple: "Establishing a token-based connection to APNs").
///
/// One provider token per team + key id + key material, shared by every app, connection and worker of the
/// fleet using that key (``SharedProviderTokens``, docs/provider-tokens.md), reused by every request and
/// replaced about every 50 minutes, never sooner than 20 minutes after the previous one. The key material is
/// part of the identity: two tenants naming the same team and key ids with different keys never share (or
/// spoil) each other's tokens. Channel settings are parsed once and cached until the row's JSON
/// changes, so a corrected key takes effect without a restart. Both caches are bounded (``CacheBounds``).
///
/// Answers naming the credential (any 403) pause the channel at once; `DeviceTokenNotForTopic` and
/// `BadPath` pause it only on the evidence of ``ChannelFaultEvidence/Policy/singleOrigin``.
public final class APNsSender: ProviderSender {
    public let provider = Provider.apns
    /// Apple's production and development hosts ("Sending notification requests to APNs").
    public static let productionOrigin = HTTP2Origin(scheme: .https, host: "api.push.apple.com", port: 443)
    public static let sandboxOrigin = HTTP2Origin(scheme: .https, host: "api.sandbox.push.apple.com", port: 443)

    struct Channel: Sendable {
        var credentials: APNsCredentials
        /// The shared token's owner: team, key id and public key fingerprinted, the sealing key derived.
        var tokenCredential: ProviderTokenCredential
        var origin: HTTP2Origin?
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
        var tenant: HTTP2Tenant
    }

    /// An app's APNs channel: token-based (``Channel``) or certificate-based (``CertificateChannel``).
    enum AnyChannel: Sendable {
        case token(Channel)
        case certificate(CertificateChannel)
    }

    /// Request-building errors caused by the app's channel settings rather than by the message.
    static let channelRequestErrors: Set<DeliveryReason> = [.missingTopic, .invalidTopic, .invalidProviderToken]

    let client: HTTP2Client
    /// Paces deliveries withdrawn from a busy origin (``OriginPacing``), for the token and certificate paths.
    let pacer: OriginPacer
    private let egressPolicy: EgressPolicy
    let requestTimeout: Duration
    private let logger: Logger
    let channels: ChannelCache<AnyChannel>
    /// One HTTP/2 client (TLS context and connection pool) per client certificate, for certificate channels.
    let certificateClients: CertificateClients?
    let tokens: SharedProviderTokens
    private let tokenPolicy: ProviderTokenPolicy
    /// Bodies rendered once per notification, language and campaign (filled per device with its msgId).
    let renders: RenderCache<Result<PayloadTemplate?, APNsRequestError>> = .payloadTemplates()
    /// Users' parsed tags, for messages whose texts use placeholders.
    let userTags = UserTagsCache()

    /// - Parameter egressPolicy: which endpoints may be used (the same policy the client enforces on resolved
    ///   addresses); checked here before a request is built.
    /// - Parameter requestTimeout: seconds before a request is abandoned (and retried later).
    public convenience init(
        client: HTTP2Client, requestTimeout: Double, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly
    ) {
        self.init(
            client: client, requestTimeout: requestTimeout, logger: logger, egressPolicy: egressPolicy,
            bounds: .standard)
    }

    /// - Parameters:
    ///   - bounds: the cache sizes (tests use small ones).
    ///   - tokens: the fleet's shared tokens (nil: tokens of this sender alone, bounded by `bounds`).
    ///   - tokenPolicy: when tokens are replaced (Apple's intervals unless a test shortens them).
    init(
        client: HTTP2Client, requestTimeout: Double, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds, tokens: SharedProviderTokens? = nil, tokenPolicy: ProviderTokenPolicy = .apns(),
        certificateClients: CertificateClients? = nil
    ) {
        channels = ChannelCache(capacity: bounds.channels)
        self.certificateClients = certificateClients
        self.tokens = tokens ?? SharedProviderTokens(coordinate: nil, logger: logger, capacity: bounds.apnsTokenManagers)
        self.tokenPolicy = tokenPolicy
        self.egressPolicy = egressPolicy
        self.client = client
        self.requestTimeout = .milliseconds(Int64(requestTimeout * 1000))
        pacer = OriginPacer(requestTimeout: requestTimeout)
        self.logger = logger
    }

    public func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
        let channel: Channel
        do {
            switch try self.channel(for: delivery) {
            case .token(let token): channel = token
            case .certificate(let certificate): return await send(delivery, message: message, now: now, certificate: certificate)
            }
        } catch {
            return Self.invalidChannelSettings(error)
        }
        return await send(delivery, message: message, now: now, token: channel, refused: nil)
    }

    /// A token-based channel's exchange for one delivery: the fleet's provider token, the request, the
    /// answer; an answer refusing the token (``APNsResponseClassifier/requiresNewProviderToken(_:)``) replaces it
    /// and sends once more with the new one.
    /// - Parameter refused: an answer that already refused `token` for this delivery (a batch's), so the
    ///   exchange starts at the resend: sent again only when the token has been replaced since.
    func send(
        _ delivery: ClaimedDelivery, message: NotificationMessage, now: Date, token channel: Channel,
        refused alreadyRefused: (response: PushResponse, token: String)?
    ) async -> DeliveryOutcome {
        let origin = channel.origin ?? Self.origin(forEnvironment: delivery.apnsEnvironment)
        let apnsDelivery = DeliveryRendering.apnsDelivery(
            for: delivery, message: message, topic: channel.credentials.topic, now: now, userTags: userTags)
        let renderKey = DeliveryRendering.renderKey(for: delivery, message: message, variant: provider.rawValue)
        // The answer refusing the first provider token, and that token.
        var refused = alreadyRefused
        while true {
            let bearer: String
            do {
                bearer = try await token(for: channel)
            } catch {
                return .channelError(reason: .providerTokenFailed, detail: ["error": .string("\(error)")])
            }
            if let refused, refused.token == bearer {
                // Not replaced (too young for Apple's 20-minute floor): the refusal stands.
                return judge(refused.response, channel: channel, delivery: delivery, origin: origin)
            }
            let request: PushRequest
            switch makeRequest(apnsDelivery, renderKey: renderKey, authorization: APNsProviderAuthorization(bearerToken: bearer)) {
            case .success(let made): request = made
            case .failure(let failure): return failure.outcome
            }
            let pushResponse: PushResponse
            switch await ProviderTransport.send(
                request, to: origin, client: client, timeout: requestTimeout, tenant: channel.tenant, pacer: pacer)
            {
            case .success(let response): pushResponse = response
            case .failure(let failure): return transportOutcome(failure, channel: channel)
            }
            if APNsResponseClassifier.requiresNewProviderToken(pushResponse) {
                // Replaced once fleet-wide (or adopted when another worker already did); when the token changed,
                // this push is sent again once with it. A token too young to replace pauses the channel.
                tokens.reportRejected(bearer, for: channel.tokenCredential)
                if refused == nil {
                    refused = (pushResponse, bearer)
                    continue
                }
            }
            return judge(pushResponse, channel: channel, delivery: delivery, origin: origin)
        }
    }

    /// A configuration error of the app's channel: the channel pauses, the subscription is left alone.
    static func invalidChannelSettings(_ error: any Error) -> DeliveryOutcome {
        .channelError(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")])
    }

    /// The fleet's current provider token for a token-based channel (minted here when there is none).
    /// - Throws: what minting or the shared store throws (the caller pauses the channel:
    ///   `provider_token_failed`).
    func token(for channel: Channel) async throws -> String {
        let credentials = channel.credentials
        return try await tokens.token(for: channel.tokenCredential, policy: tokenPolicy) {
            let signed = try APNsTokenManager.sign(
                teamID: credentials.teamID, keyID: credentials.keyID, privateKey: credentials.privateKey, issuedAt: Date())
            return MintedProviderToken(token: signed.token, issuedAt: signed.issuedAt, expiresAt: signed.expiresAt)
        }
    }

    /// The request for one delivery with `authorization`, its payload shared through ``renders`` when `renderKey`
    /// allows; a request-building error as the outcome to record (the channel's settings at fault pause the
    /// channel, the message's fail the delivery).
    func makeRequest(
        _ apnsDelivery: APNsDelivery, renderKey: RenderKey?, authorization: APNsProviderAuthorization
    ) -> Result<PushRequest, ProviderTransport.Failure> {
        do throws(APNsRequestError) {
            return .success(try APNsRequestFactory.makeRequest(apnsDelivery, authorization: authorization) { () throws(APNsRequestError) in
                try renders.payload(
                    key: renderKey, msgID: apnsDelivery.msgID,
                    render: { () throws(APNsRequestError) in try APNsRequestFactory.payload(for: apnsDelivery) },
                    template: { () throws(APNsRequestError) in try APNsRequestFactory.payloadTemplate(for: apnsDelivery) })
            })
        } catch {
            // The channel's settings, not this push, are at fault: pause the channel, keep the delivery.
            if Self.channelRequestErrors.contains(error.reason) {
                return .failure(.init(outcome: .channelError(reason: error.reason, detail: ["error": .string(error.detail)])))
            }
            return .failure(.init(outcome: .failed(reason: error.reason, detail: ["error": .string(error.detail)])))
        }
    }

    /// A transport failure's outcome: an endpoint the channel chose (an `endpoint` override) that cannot be
    /// used pauses the channel instead of failing the delivery.
    func transportOutcome(_ failure: ProviderTransport.Failure, channel: Channel) -> DeliveryOutcome {
        channel.origin == nil ? failure.outcome : ProviderTransport.channelEndpointOutcome(failure.outcome)
    }

    func judge(_ response: PushResponse, channel: Channel, delivery: ClaimedDelivery, origin: HTTP2Origin) -> DeliveryOutcome {
        // PostgreSQL's clock (docs/clocks.md): a Retry-After or a hold becomes the next attempt's `run_at`.
        let answered = delivery.judgedNow()
        let answer = APNsResponseClassifier.answer(response, subscriptionTokenUpdatedAt: delivery.tokenUpdatedAt, now: answered)
        return channel.evidence.judge(answer, subscription: delivery.subscriptionID, origin: origin.description, now: answered)
    }

    /// Apple's host for a subscription's `apns_environment` (`sandbox`, else production).
    public static func origin(forEnvironment environment: String?) -> HTTP2Origin {
        environment == "sandbox" ? sandboxOrigin : productionOrigin
    }

    func channel(for delivery: ClaimedDelivery) throws -> AnyChannel {
        try channels.channel(for: delivery) { settingsJSON, endpoint in
            let settings = try JSONValue(parsing: settingsJSON)
            var origin: HTTP2Origin?
            if let endpoint, !endpoint.isEmpty {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            }
            if APNsCertificateCredentials.isCertificateSettings(settings) {
                return .certificate(CertificateChannel(
                    credentials: try APNsCertificateCredentials(settings: settings), origin: origin,
                    evidence: ChannelEvidence(policy: .singleOrigin), tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID))))
            }
            let credentials = try APNsCredentials(settings: settings)
            return .token(Channel(
                credentials: credentials, tokenCredential: try ProviderTokenCredential(apns: credentials),
                origin: origin, evidence: ChannelEvidence(policy: .singleOrigin),
                tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID))))
        }
    }
}
