import DeliveryCore
import Foundation
import HTTP2
import Providers
import PushCrypto
import Synchronization
import UUIDText

/// The settings of an app's `fcm` channel (`app_channels.settings`): the Google service-account JSON
/// (Firebase: "Authorize send requests"; fields `project_id`, `client_email`, `private_key`, `token_uri`,
/// optional `private_key_id`, `type`), either nested as `{"service_account": {...}}` or with its fields at
/// the top level, and optionally `project_quota_per_minute` at the top level (docs/fcm.md, "Project quota").
public struct FCMChannelSettings: Sendable {
    public var account: GoogleServiceAccount
    /// `project_quota_per_minute`: the Firebase project's quota of messages per minute the fleet keeps to
    /// (Firebase: "Throttling and quotas"), a whole number in ``projectQuotaRange``; nil when absent or JSON
    /// `null` (Firebase's default, 600,000, applies).
    public var projectQuotaPerMinute: Int?
    /// The values `project_quota_per_minute` may take: those `pushizo_fcm_channel_quota` (migration 0034) applies.
    public static let projectQuotaRange: ClosedRange<Int64> = 1...1_000_000_000

    /// - Throws: ``FCMChannelSettingsError`` naming the missing or invalid member; never the key's text.
    public init(settingsJSON: String) throws(FCMChannelSettingsError) {
        guard let settings = try? JSONValue(parsing: settingsJSON), let object = settings.objectValue else {
            throw FCMChannelSettingsError("the settings are not a JSON object")
        }
        // Anything else would be a quota nobody applies: the charge falls back to Firebase's default for such a
        // value, so the channel would send at up to 600,000 a minute while its settings say less.
        if let quota = object["project_quota_per_minute"], !quota.isNull {
            guard let whole = quota.int64Value, Self.projectQuotaRange.contains(whole) else {
                throw FCMChannelSettingsError(
                    "project_quota_per_minute is not a whole number from 1 to 1,000,000,000 (messages per minute)")
            }
            projectQuotaPerMinute = Int(whole)
        }
        let accountJSON: [UInt8]
        if let nested = object["service_account"] {
            guard nested.objectValue != nil else { throw FCMChannelSettingsError("service_account is not a JSON object") }
            accountJSON = nested.serialized()
        } else {
            accountJSON = settings.serialized()
        }
        do {
            account = try GoogleServiceAccount(json: accountJSON)
        } catch {
            // GoogleAuthError messages name keys, never the private key's text.
            throw FCMChannelSettingsError(error.message)
        }
    }
}

/// Why an `fcm` channel's settings were refused. The message never contains the private key.
public struct FCMChannelSettingsError: Error, CustomStringConvertible, Sendable {
    public var message: String
    init(_ message: String) { self.message = message }
    public var description: String { "invalid fcm channel settings: \(message)" }
}

/// Why an OAuth 2.0 access token could not be obtained from the service account's `token_uri`.
/// Never contains the assertion or a token.
public struct FCMTokenFetchError: Error, CustomStringConvertible, Sendable {
    /// An extensible error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The token endpoint could not be reached (the underlying `HTTP2Error` is kept).
        public static let transport = Code("transport")
        /// The token endpoint answered with a status other than 200.
        public static let refused = Code("refused")
        /// The 200 answer is not a usable token (see `GoogleServiceAccount.parseTokenResponse`).
        public static let invalidResponse = Code("invalid_response")
        public var description: String { name }
    }

    public var code: Code
    public var message: String
    /// The transport error, for ``Code/transport``.
    public var transportError: HTTP2Error?

    public var description: String { "FCMTokenFetchError(\(code)): \(message)" }
}

/// FCM HTTP v1 (Firebase: "Send a message using FCM HTTP v1 API").
///
/// - Channel settings are parsed once per app and cached until the row's JSON or `endpoint` changes.
/// - One access token per service account (client email + key id + token URI + public key), shared by every
///   app and every worker of the fleet using that account (``SharedProviderTokens``, docs/provider-tokens.md;
///   caches bounded, ``CacheBounds``); it is fetched by POSTing the JWT-bearer grant (RFC 7523 §2.1) to
///   `token_uri` over the shared ``HTTP2Client`` (Google's token endpoint speaks HTTP/2).
/// - The send goes to the channel's `endpoint` when set, else `https://fcm.googleapis.com`.
/// - A 401 the classifier says needs a new token (``FCMResponseClassifier/requiresNewAccessToken(_:)``)
///   replaces that token once fleet-wide (or adopts the replacement another worker made) and the refused
///   deliveries are sent once more, as a batch (``PlannedBatch``).
/// - A subscription refused with `THIRD_PARTY_AUTH_ERROR` is held (``CredentialHolds``, 5 minutes per worker):
///   its pushes wait without a request, and the channel's other subscriptions are sent as usual.
/// - With ``chargeProjects``, each batch first charges its Firebase projects' fleet-wide buckets, once for the
///   whole batch (Firebase "Throttling and quotas": a quota of messages per project and minute); the sends their
///   buckets cannot cover are held back unsent (``FCMProjectAdmission``), the others go out as usual.
public final class FCMSender: AccessTokenSender {
    public let provider = Provider.fcm
    /// FCM's production origin.
    public static let defaultOrigin = HTTP2Origin(scheme: .https, host: FCMRequestFactory.host, port: 443)

    struct Channel: AccessTokenChannel {
        var origin: HTTP2Origin
        var settings: FCMChannelSettings
        /// The channel's requests and the reading of their answers.
        var plan: FCMRequestPlan
        var tokenURI: (origin: HTTP2Origin, path: String)
        /// The shared token: its owner (the account fingerprinted, the sealing key derived) and this sender's
        /// policy.
        var tokenKey: ProviderTokenKey
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
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
    private let logger: Logger
    let channels: ChannelCache<Channel>
    let tokens: SharedProviderTokens
    private let tokenPolicy: ProviderTokenPolicy
    /// `message.data` rendered once per notification, language and campaign (given each device's msgId).
    let renders = RenderCache<Result<[String: String], FCMRequestError>>(cost: { result in
        guard case .success(let data) = result else { return 256 }
        return FCMRequestFactory.payloadSize(of: data)
    })
    /// Users' parsed tags, for messages whose texts use placeholders.
    let userTags = UserTagsCache()
    /// Charges the batch's projects (``FCMProjectQuotaStore/charge(on:asks:at:)`` on a pooled connection): sends
    /// wanted per project in, grants out. Nil: no project quota (every send goes out).
    let chargeProjects: (@Sendable ([(project: String, sends: Int)]) async throws -> [FCMProjectGrant])?
    /// How long the sends of a project whose charge failed (the database unreachable) wait before they come back.
    static let unchargedRetry: TimeInterval = 1

    /// - Parameter egressPolicy: which endpoints may be used (the same policy the client enforces on resolved
    ///   addresses); checked here before a request is built.
    /// - Parameter requestTimeout: how long a request (a send or a token fetch) may take before it is abandoned.
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
    ///   - tokenPolicy: when access tokens are replaced.
    ///   - chargeProjects: the projects' fleet-wide buckets (nil: none).
    init(
        client: HTTP2Client, requestTimeout: Duration, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds, tokens: SharedProviderTokens? = nil, tokenPolicy: ProviderTokenPolicy = .fcm(),
        chargeProjects: (@Sendable ([(project: String, sends: Int)]) async throws -> [FCMProjectGrant])? = nil
    ) {
        self.chargeProjects = chargeProjects
        channels = ChannelCache(capacity: bounds.channels)
        self.tokens = tokens ?? SharedProviderTokens(coordinate: nil, logger: logger, capacity: bounds.googleTokenCaches)
        self.tokenPolicy = tokenPolicy
        self.egressPolicy = egressPolicy
        self.client = client
        self.requestTimeout = requestTimeout
        pacer = OriginPacer(requestTimeout: requestTimeout)
        self.logger = logger
    }

    /// Sends `batch` through ``PlannedBatch`` (see ``ProviderSender/send(batch:context:completed:)``), after one
    /// charge of its projects' buckets when ``chargeProjects`` is set: what they do not admit is completed at once
    /// as held (``FCMProjectAdmission/heldOutcome(until:)``), the rest is sent.
    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        guard let chargeProjects, let first = batch.first else {
            await PlannedBatch.send(self, batch: batch, context: context, completed: completed)
            return
        }
        let projects = batch.map { try? channel(for: $0.delivery).plan.projectID }
        let asks = FCMProjectAdmission.asks(projects: projects)
        var grants: [FCMProjectGrant] = []
        if !asks.isEmpty {
            do {
                grants = try await chargeProjects(asks)
            } catch {
                logger.warning("fcm project quota: the charge failed; the batch's sends wait", ["error": "\(error)"])
            }
        }
        let admission = FCMProjectAdmission(
            projects: projects, grants: grants, retry: first.delivery.judgedNow().addingTimeInterval(Self.unchargedRetry))
        for held in admission.held { completed(held.index, FCMProjectAdmission.heldOutcome(until: held.until)) }
        guard !admission.admitted.isEmpty else { return }
        if admission.held.isEmpty {
            await PlannedBatch.send(self, batch: batch, context: context, completed: completed)
            return
        }
        let admitted = admission.admitted
        await PlannedBatch.send(self, batch: admitted.map { batch[$0] }, context: context) { index, outcome in
            completed(admitted[index], outcome)
        }
    }

    func plannedChannel(for item: BatchedSend) -> Result<Channel, PlanRefusal> {
        let channel: Channel
        do {
            channel = try self.channel(for: item.delivery)
        } catch {
            // The app's configuration is at fault: pause the channel, leave the subscription alone.
            return .failure(PlanRefusal(outcome: .channelError(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")])))
        }
        // A subscription FCM refused with THIRD_PARTY_AUTH_ERROR waits out its hold without a request: the
        // credential that carries its pushes is wrong, and sending again before the hold ends would only be
        // refused again (docs/provider-answers.md).
        let delivery = item.delivery
        if let held = channel.evidence.heldOutcome(subscription: delivery.subscriptionID, now: delivery.judgedNow()) {
            return .failure(PlanRefusal(outcome: held))
        }
        return .success(channel)
    }

    func token(for channel: Channel) async -> Result<String, PlanRefusal> {
        let (client, timeout, tokenURI, tenant, account) = (client, requestTimeout, channel.tokenURI, channel.tenant, channel.settings.account)
        do {
            return .success(try await tokens.token(for: channel.tokenKey.credential, policy: channel.tokenKey.policy) {
                let assertion = try account.assertion(issuedAt: Date())
                let fetched = try await Self.fetchToken(
                    assertion: assertion, origin: tokenURI.origin, path: tokenURI.path, client: client, timeout: timeout,
                    tenant: tenant)
                let fetchedAt = Date()
                return MintedProviderToken(
                    token: fetched.accessToken, issuedAt: fetchedAt, expiresAt: fetchedAt.addingTimeInterval(Double(fetched.expiresIn)))
            })
        } catch let error as FCMTokenFetchError {
            if let transport = error.transportError {
                // token_uri is the channel's choice: a refused address there is its configuration at fault.
                return .failure(PlanRefusal(
                    outcome: ProviderTransport.channelEndpointOutcome(ProviderTransport.outcome(for: transport, origin: "token_uri"))))
            }
            return .failure(PlanRefusal(outcome: .channelError(reason: .accessTokenFailed, detail: ["error": .string(error.message)])))
        } catch {
            return .failure(PlanRefusal(outcome: .channelError(reason: .accessTokenFailed, detail: ["error": .string("\(error)")])))
        }
    }

    func plannedRequest(for item: BatchedSend, channel: Channel, token: String?, now: Date) -> PlannedRequest {
        let fcmDelivery = DeliveryRendering.fcmDelivery(
            for: item.delivery, message: item.message, projectID: channel.plan.projectID, now: now, userTags: userTags)
        let renderKey = DeliveryRendering.renderKey(for: item.delivery, message: item.message, variant: provider.rawValue)
        return channel.plan.request(for: fcmDelivery, accessToken: token ?? "") { () throws(FCMRequestError) in
            if let renderKey,
                let shared = self.renders.value(for: renderKey, build: {
                    Result { () throws(FCMRequestError) in try FCMRequestFactory.data(for: fcmDelivery) }
                }),
                let data = FCMRequestFactory.data(try shared.get(), msgID: fcmDelivery.msgID)
            {
                return data
            }
            return try FCMRequestFactory.data(for: fcmDelivery)
        }
    }

    func channel(for delivery: ClaimedDelivery) throws -> Channel {
        try channels.channel(for: delivery) { settingsJSON, endpoint in
            let settings = try FCMChannelSettings(settingsJSON: settingsJSON)
            var origin = Self.defaultOrigin
            if let endpoint, !endpoint.isEmpty {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            }
            _ = try ChannelEndpoint.origin(settings.account.tokenURI, field: "token_uri", policy: egressPolicy)
            let tokenURI = try Self.tokenEndpoint(settings.account.tokenURI)
            return Channel(
                origin: origin, settings: settings,
                plan: FCMRequestPlan(projectID: settings.account.projectID, usesChannelEndpoint: origin != Self.defaultOrigin),
                tokenURI: tokenURI,
                tokenKey: ProviderTokenKey(credential: try ProviderTokenCredential(fcm: settings.account), policy: tokenPolicy), evidence: ChannelEvidence(policy: .singleOrigin),
                tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID)))
        }
    }

    /// `token_uri` split into the origin and the request path (with any query).
    static func tokenEndpoint(_ uri: String) throws(FCMChannelSettingsError) -> (origin: HTTP2Origin, path: String) {
        guard let origin = try? HTTP2Origin(parsing: uri), URLComponents(string: uri) != nil else {
            throw FCMChannelSettingsError("token_uri is not an https URL")
        }
        return (origin, ChannelEndpoint.requestPath(of: uri))
    }

    /// `POST token_uri` with the JWT-bearer grant; the answer parsed by `GoogleServiceAccount.parseTokenResponse`.
    /// `tenant` is the app whose delivery needs the token (``HTTP2Request/tenant``).
    /// - Throws: ``FCMTokenFetchError``.
    static func fetchToken(
        assertion: String, origin: HTTP2Origin, path: String, client: HTTP2Client, timeout: Duration, tenant: HTTP2Tenant
    ) async throws -> (accessToken: String, expiresIn: Int) {
        let response: HTTP2Response
        do {
            response = try await client.send(
                HTTP2Request(
                    method: "POST", path: path,
                    headers: [HTTP2Header("content-type", "application/x-www-form-urlencoded")],
                    body: GoogleServiceAccount.tokenRequestBody(assertion: assertion), timeout: timeout, tenant: tenant),
                to: origin)
        } catch let error as HTTP2Error {
            throw FCMTokenFetchError(code: .transport, message: "token endpoint \(origin): \(error)", transportError: error)
        }
        guard response.status == 200 else {
            // Google's OAuth error body is `{"error": "<code>", "error_description": "..."}`; keep the code only.
            let code = (try? JSONValue(parsing: response.body))?["error"]?.stringValue
                .flatMap { $0.utf8.count <= 64 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil }
            throw FCMTokenFetchError(
                code: .refused,
                message: "token endpoint \(origin) answered \(response.status)\(code.map { " (\($0))" } ?? "")")
        }
        do {
            return try GoogleServiceAccount.parseTokenResponse(response.body)
        } catch {
            throw FCMTokenFetchError(code: .invalidResponse, message: error.message)
        }
    }
}
