import DeliveryCore
import Foundation
import HTTP2
import Providers
import UUIDText

/// Why a Huawei OAuth 2.0 access token could not be obtained from the channel's `token_uri` (Huawei, "Client
/// Credentials"). Never contains the client secret or a token.
struct HuaweiTokenFetchError: Error, CustomStringConvertible, Sendable {
    enum Failure: Sendable {
        /// The token endpoint could not be reached.
        case transport(HTTP2Error)
        /// The endpoint answered; ``HuaweiClientCredentials/tokenAnswer(status:body:)`` read it as refused or
        /// unavailable (`{"status", "error"?, "sub_error"?}`).
        case answered(HuaweiClientCredentials.TokenAnswer)
    }

    var failure: Failure
    var origin: HTTP2Origin

    var description: String {
        switch failure {
        case .transport(let error): "HuaweiTokenFetchError: token endpoint \(origin): \(error)"
        case .answered(let answer): "HuaweiTokenFetchError: token endpoint \(origin) answered \(answer)"
        }
    }

    /// The outcome for the deliveries that needed the token: an endpoint that refused the credentials pauses the
    /// channel (`access_token_failed`); one that failed for now (a 5xx, its rate limiting) is retried at no
    /// attempt's cost (`provider_unreachable`: nothing was sent); a transport failure is read as any other, an
    /// endpoint the egress policy refuses pausing the channel (`token_uri` is the channel's choice).
    var outcome: DeliveryOutcome {
        switch failure {
        case .transport(let error):
            return ProviderTransport.channelEndpointOutcome(ProviderTransport.outcome(for: error, origin: "token_uri"))
        case .answered(.refused(let detail)):
            return .channelError(reason: .accessTokenFailed, detail: ["token_endpoint": detail])
        case .answered(.unavailable(let detail)):
            return .retry(reason: .providerUnreachable, detail: ["token_endpoint": detail])
        case .answered(.token):
            // Not thrown for a token; kept total.
            return .retry(reason: .providerUnreachable, detail: [:])
        }
    }
}

/// Huawei Push Kit, server API v1 (Huawei, "Sending Messages"; docs/huawei.md), for `huawei` channels.
///
/// - Channel settings (``HuaweiClientCredentials``: `app_id`, `client_secret`, optional `client_id` and
///   `token_uri`) are parsed once per app and cached until the row's JSON or `endpoint` changes; settings that
///   do not parse pause that app's channel (`invalid_channel_settings`), nothing else.
/// - One access token per OAuth 2.0 client (client ID + token endpoint + secret), shared by every app and every worker of
///   the fleet naming it (``SharedProviderTokens``, docs/provider-tokens.md): minted by POSTing the
///   client-credentials grant (RFC 6749 §4.4) to `token_uri` once fleet-wide, replaced `refreshAhead` seconds
///   before `expires_in` runs out (``ProviderTokenPolicy/huawei(refreshAhead:)``), and once after Push Kit refused
///   it (`80200003`, or a 401 without a code), the refused deliveries then sent once more (``PlannedBatch``).
/// - Requests go through the shared ``HTTP2Client`` to the channel's `endpoint` when set, else
///   `https://push-api.cloud.huawei.com`. The transport is the same seam as every provider's
///   (``route(_:channel:)``); whether Huawei's own hosts negotiate `h2` is an open question (docs/huawei.md,
///   "HTTP version").
/// - Push Kit's answers are read by ``HuaweiResponseClassifier`` against the channel's evidence (a token
///   answered `80300007` invalidates its subscription once the channel is proven by accepted sends).
public final class HuaweiSender: AccessTokenSender {
    public let provider = Provider.huawei
    /// Push Kit's production origin.
    public static let defaultOrigin = HTTP2Origin(scheme: .https, host: HuaweiRequestFactory.host, port: 443)

    struct Channel: AccessTokenChannel {
        var origin: HTTP2Origin
        var credentials: HuaweiClientCredentials
        /// The channel's requests and the reading of their answers.
        var plan: HuaweiRequestPlan
        var tokenURI: (origin: HTTP2Origin, path: String)
        /// The shared token: its owner (the client fingerprinted, the sealing key derived) and this sender's policy.
        var tokenKey: ProviderTokenKey
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``).
        var tenant: HTTP2Tenant

        func plannedAnswer(_ response: PushResponse, now: Date, resent: Bool) -> PlannedAnswer {
            plan.judge(response, now: now, resent: resent)
        }
    }

    let client: HTTP2Client
    /// Paces deliveries withdrawn from a busy origin (``OriginPacing``).
    let pacer: OriginPacer
    private let egressPolicy: EgressPolicy
    let requestTimeout: Duration
    let channels: ChannelCache<Channel>
    let tokens: SharedProviderTokens
    private let tokenPolicy: ProviderTokenPolicy
    /// Users' parsed tags, for messages whose texts use placeholders.
    let userTags = UserTagsCache()

    /// - Parameters:
    ///   - egressPolicy: which endpoints may be used; checked here before a request is built.
    ///   - requestTimeout: how long a request (a send or a token fetch) may take before it is abandoned.
    ///   - bounds: the cache sizes (tests use small ones).
    ///   - tokens: the fleet's shared tokens (nil: tokens of this sender alone, bounded by `bounds`).
    ///   - tokenPolicy: when access tokens are replaced.
    init(
        client: HTTP2Client, requestTimeout: Duration, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds = .standard, tokens: SharedProviderTokens? = nil, tokenPolicy: ProviderTokenPolicy = .huawei()
    ) {
        channels = ChannelCache(capacity: bounds.channels)
        self.tokens = tokens ?? SharedProviderTokens(coordinate: nil, logger: logger, capacity: bounds.googleTokenCaches)
        self.tokenPolicy = tokenPolicy
        self.egressPolicy = egressPolicy
        self.client = client
        self.requestTimeout = requestTimeout
        pacer = OriginPacer(requestTimeout: requestTimeout)
    }

    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        await PlannedBatch.send(self, batch: batch, context: context, completed: completed)
    }

    func plannedChannel(for item: BatchedSend) -> Result<Channel, PlanRefusal> {
        do {
            return .success(try channel(for: item.delivery))
        } catch {
            // The app's configuration is at fault: pause the channel, leave the subscription alone.
            return .failure(PlanRefusal(outcome: .channelError(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")])))
        }
    }

    func token(for channel: Channel) async -> Result<String, PlanRefusal> {
        let (client, timeout, tokenURI, tenant, credentials) = (client, requestTimeout, channel.tokenURI, channel.tenant, channel.credentials)
        do {
            return .success(try await tokens.token(for: channel.tokenKey.credential, policy: channel.tokenKey.policy) {
                let fetched = try await Self.fetchToken(
                    credentials, origin: tokenURI.origin, path: tokenURI.path, client: client, timeout: timeout, tenant: tenant)
                let fetchedAt = Date()
                return MintedProviderToken(
                    token: fetched.accessToken, issuedAt: fetchedAt, expiresAt: fetchedAt.addingTimeInterval(Double(fetched.expiresIn)))
            })
        } catch let error as HuaweiTokenFetchError {
            return .failure(PlanRefusal(outcome: error.outcome))
        } catch {
            return .failure(PlanRefusal(outcome: .channelError(reason: .accessTokenFailed, detail: ["error": .string("\(error)")])))
        }
    }

    func plannedRequest(for item: BatchedSend, channel: Channel, token: String?, now: Date) -> PlannedRequest {
        let huaweiDelivery = DeliveryRendering.huaweiDelivery(
            for: item.delivery, message: item.message, appID: channel.plan.appID, userTags: userTags)
        return channel.plan.request(for: huaweiDelivery, accessToken: token ?? "")
    }

    func channel(for delivery: ClaimedDelivery) throws -> Channel {
        try channels.channel(for: delivery) { settingsJSON, endpoint in
            let credentials: HuaweiClientCredentials
            do {
                credentials = try HuaweiClientCredentials(settings: try JSONValue(parsing: settingsJSON))
            } catch let error as ProviderConfigurationError {
                throw error
            } catch {
                throw ProviderConfigurationError(code: .invalidValue, key: "settings", message: "are not a JSON object")
            }
            var origin = Self.defaultOrigin
            if let endpoint, !endpoint.isEmpty {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            }
            let tokenOrigin = try ChannelEndpoint.origin(credentials.tokenURI, field: "token_uri", policy: egressPolicy)
            return Channel(
                origin: origin, credentials: credentials,
                plan: HuaweiRequestPlan(appID: credentials.appID, usesChannelEndpoint: origin != Self.defaultOrigin),
                tokenURI: (tokenOrigin, ChannelEndpoint.requestPath(of: credentials.tokenURI)),
                tokenKey: ProviderTokenKey(credential: try ProviderTokenCredential(huawei: credentials), policy: tokenPolicy),
                evidence: ChannelEvidence(policy: .singleOrigin),
                tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID)))
        }
    }

    /// `POST token_uri` with the client-credentials grant (``HuaweiClientCredentials/tokenRequestBody()``), the
    /// answer read by ``HuaweiClientCredentials/tokenAnswer(status:body:)``. `tenant` is the app whose delivery
    /// needs the token.
    /// - Throws: ``HuaweiTokenFetchError``.
    static func fetchToken(
        _ credentials: HuaweiClientCredentials, origin: HTTP2Origin, path: String, client: HTTP2Client, timeout: Duration,
        tenant: HTTP2Tenant
    ) async throws -> (accessToken: String, expiresIn: Int) {
        let response: HTTP2Response
        do {
            response = try await client.send(
                HTTP2Request(
                    method: "POST", path: path,
                    headers: [HTTP2Header("content-type", "application/x-www-form-urlencoded")],
                    body: credentials.tokenRequestBody(), timeout: timeout, tenant: tenant),
                to: origin)
        } catch let error as HTTP2Error {
            throw HuaweiTokenFetchError(failure: .transport(error), origin: origin)
        }
        let answer = HuaweiClientCredentials.tokenAnswer(status: response.status, body: response.body)
        guard case .token(let accessToken, let expiresIn) = answer else {
            throw HuaweiTokenFetchError(failure: .answered(answer), origin: origin)
        }
        return (accessToken, expiresIn)
    }
}
