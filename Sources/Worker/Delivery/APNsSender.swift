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
public final class APNsSender: PlannedBatchSender {
    public let provider = Provider.apns
    /// Apple's production and development hosts ("Sending notification requests to APNs").
    public static let productionOrigin = HTTP2Origin(scheme: .https, host: "api.push.apple.com", port: 443)
    public static let sandboxOrigin = HTTP2Origin(scheme: .https, host: "api.sandbox.push.apple.com", port: 443)

    struct Channel: Sendable {
        var credentials: APNsCredentials
        /// The channel's requests and the reading of their answers.
        var plan: APNsRequestPlan
        /// The shared token: its owner (team, key id and public key fingerprinted, the sealing key derived) and
        /// this sender's policy.
        var tokenKey: ProviderTokenKey
        var origin: HTTP2Origin?
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
        var tenant: HTTP2Tenant
    }

    /// An app's APNs channel: token-based (``Channel``) or certificate-based (``CertificateChannel``).
    /// Indirect: each delivery of a batch carries its channel through the send (its member, its outgoing request,
    /// the judging of its answer), and a copy of the boxed case is one retain instead of one per credential,
    /// string and origin field.
    indirect enum AnyChannel: Sendable {
        case token(Channel)
        case certificate(CertificateChannel)
    }

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
    /// - Parameter requestTimeout: how long a request may take before it is abandoned (and retried later).
    public convenience init(
        client: HTTP2Client, requestTimeout: Duration, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly
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
        client: HTTP2Client, requestTimeout: Duration, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds, tokens: SharedProviderTokens? = nil, tokenPolicy: ProviderTokenPolicy = .apns(),
        certificateClients: CertificateClients? = nil
    ) {
        channels = ChannelCache(capacity: bounds.channels)
        self.certificateClients = certificateClients
        self.tokens = tokens ?? SharedProviderTokens(coordinate: nil, logger: logger, capacity: bounds.apnsTokenManagers)
        self.tokenPolicy = tokenPolicy
        self.egressPolicy = egressPolicy
        self.client = client
        self.requestTimeout = requestTimeout
        pacer = OriginPacer(requestTimeout: requestTimeout)
        self.logger = logger
    }

    /// A configuration error of the app's channel: the channel pauses, the subscription is left alone.
    static func invalidChannelSettings(_ error: any Error) -> DeliveryOutcome {
        .channelError(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")])
    }

    /// The fleet's current provider token for a token-based channel (minted here when there is none).
    /// - Throws: what minting or the shared store throws (the caller pauses the channel:
    ///   `provider_token_failed`).
    func token(for channel: Channel) async throws -> String {
        try await Self.token(for: channel.credentials, key: channel.tokenKey, from: tokens)
    }

    /// The fleet's current provider token of `credentials` from `tokens`, minted here when there is none (Apple:
    /// "Establishing a token-based connection to APNs"); shared with the broadcast channels' requests.
    static func token(for credentials: APNsCredentials, key: ProviderTokenKey, from tokens: SharedProviderTokens) async throws -> String {
        try await tokens.token(for: key.credential, policy: key.policy) {
            let signed = try APNsTokenManager.sign(
                teamID: credentials.teamID, keyID: credentials.keyID, privateKey: credentials.privateKey, issuedAt: Date())
            return MintedProviderToken(token: signed.token, issuedAt: signed.issuedAt, expiresAt: signed.expiresAt)
        }
    }

    /// Apple's host for a subscription's `apns_environment` (`sandbox`, else production).
    public static func origin(forEnvironment environment: String?) -> HTTP2Origin {
        origin(of: APNsRequestPlan.appleDestination(environment: environment), channelEndpoint: nil)
    }

    /// The origin of a planned request: the channel's `endpoint` override, else Apple's host.
    static func origin(of destination: PushDestination, channelEndpoint: HTTP2Origin?) -> HTTP2Origin {
        switch destination {
        case .apnsSandbox: sandboxOrigin
        case .channelEndpoint: channelEndpoint ?? productionOrigin
        default: productionOrigin
        }
    }

    func cachedChannel(for delivery: ClaimedDelivery) -> AnyChannel? { channels.cachedChannel(for: delivery) }

    func channel(for delivery: ClaimedDelivery) throws -> AnyChannel {
        try channels.channel(for: delivery) { settingsJSON, endpoint in
            let settings = try JSONValue(parsing: settingsJSON)
            var origin: HTTP2Origin?
            if let endpoint, !endpoint.isEmpty {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            }
            if APNsCertificateCredentials.isCertificateSettings(settings) {
                let credentials = try APNsCertificateCredentials(settings: settings)
                return .certificate(CertificateChannel(
                    credentials: credentials, plan: APNsRequestPlan(certificate: credentials, usesChannelEndpoint: origin != nil),
                    origin: origin, evidence: ChannelEvidence(policy: .singleOrigin),
                    tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID))))
            }
            let credentials = try APNsCredentials(settings: settings)
            return .token(Channel(
                credentials: credentials, plan: APNsRequestPlan(credentials: credentials, usesChannelEndpoint: origin != nil),
                tokenKey: ProviderTokenKey(credential: try ProviderTokenCredential(apns: credentials), policy: tokenPolicy), origin: origin,
                evidence: ChannelEvidence(policy: .singleOrigin), tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID))))
        }
    }
}
