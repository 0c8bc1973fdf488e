import DeliveryCore
import Foundation
import HTTP2
import Providers
import PushCrypto
import Synchronization
import UUIDText

/// The settings of an app's `webpush` channel (`app_channels.settings`):
/// `{"vapid_private_key": "<PKCS#8 PEM of a P-256 key>", "subject": "mailto:..." | "https://...",
/// "declarative"?: "apple" | "always" | "never"}` (RFC 8292 §2.1 for the subject, §3.2 for the key;
/// ``WebPushDeclarativePolicy`` for `declarative`, `apple` when absent).
public struct WebPushChannelSettings: Sendable {
    public var privateKey: P256PrivateKey
    public var subject: VAPIDSubject
    /// Which subscriptions get the Declarative Web Push form.
    public var declarative: WebPushDeclarativePolicy

    /// - Throws: ``WebPushChannelSettingsError`` naming the missing or invalid member; the message never
    ///   contains the key.
    public init(settings: JSONValue) throws(WebPushChannelSettingsError) {
        guard let object = settings.objectValue else { throw .init("the settings are not a JSON object") }
        guard case .string(let pem)? = object["vapid_private_key"], !pem.isEmpty else {
            throw .init("vapid_private_key is missing (a PKCS#8 PEM of a P-256 key)")
        }
        guard case .string(let subject)? = object["subject"] else {
            throw .init("subject is missing (a mailto: or https: URI)")
        }
        do {
            declarative = try WebPushDeclarativePolicy(settings: object)
        } catch {
            throw .init(error.description)
        }
        do {
            privateKey = try P256PrivateKey(pem: pem)
        } catch {
            throw .init("vapid_private_key is not a PKCS#8 PEM of a P-256 key")
        }
        do {
            self.subject = try VAPIDSubject(subject)
        } catch {
            throw .init("subject: \(error.message)")
        }
    }
}

/// Why a `webpush` channel's settings were refused. The message never contains the private key.
public struct WebPushChannelSettingsError: Error, CustomStringConvertible, Sendable {
    public var message: String
    init(_ message: String) { self.message = message }
    public var description: String { "invalid webpush channel settings: \(message)" }
}

/// Web Push (RFC 8030) with message encryption (RFC 8291) and VAPID (RFC 8292).
///
/// The push service is the subscription's endpoint URL (`subscriptions.token`), so the channel's `endpoint`
/// column is not used: requests go to the endpoint's origin over the shared ``HTTP2Client``, which keeps
/// one pool per origin. One ``VAPIDTokenManager`` per key (shared by apps with the same key), which caches
/// one token per push-service origin. Channel settings are parsed once and cached until the row's JSON
/// changes. Every cache is bounded (``CacheBounds``, ``VAPIDTokenManager/maximumCachedOrigins``).
///
/// A 400/401/403 from one push service about one subscription fails that delivery only; the channel
/// pauses on the evidence of ``ChannelFaultEvidence/Policy/webPush`` (several subscriptions at several
/// origins refused, none accepted, within the window).
public final class WebPushSender: PlannedBatchSender {
    public let provider = Provider.webpush

    struct Channel: Sendable {
        var settings: WebPushChannelSettings
        /// The ``tokenManagers`` key: the public key's fingerprint and the subject.
        var tokenManagerKey: String
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
        var tenant: HTTP2Tenant
    }

    private let client: HTTP2Client
    /// Paces deliveries withdrawn from a busy push service (``OriginPacing``).
    let pacer: OriginPacer
    private let egressPolicy: EgressPolicy
    let requestTimeout: Duration
    /// Every channel's requests: the endpoint checked against ``egressPolicy`` before anything is rendered.
    let plan: WebPushRequestPlan
    private let logger: Logger
    let channels: ChannelCache<Channel>
    /// Plaintexts rendered once per notification, language and campaign (filled per device with its msgId).
    let renders: RenderCache<Result<PayloadTemplate?, WebPushRequestError>> = .payloadTemplates()
    /// Users' parsed tags, for messages whose texts use placeholders.
    let userTags = UserTagsCache()
    let tokenManagers: SharedInstances<VAPIDTokenManager>

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

    /// - Parameter bounds: the cache sizes (tests use small ones).
    init(
        client: HTTP2Client, requestTimeout: Duration, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds
    ) {
        channels = ChannelCache(capacity: bounds.channels)
        tokenManagers = SharedInstances(capacity: bounds.vapidTokenManagers)
        self.egressPolicy = egressPolicy
        plan = WebPushSender.plan(egressPolicy: egressPolicy)
        self.client = client
        self.requestTimeout = requestTimeout
        pacer = OriginPacer(requestTimeout: requestTimeout)
        self.logger = logger
    }

    /// Sends `batch` through ``PlannedBatch`` (see ``ProviderSender/send(batch:context:completed:)``).
    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        await PlannedBatch.send(self, batch: batch, context: context, completed: completed)
    }

    var subscriberChosenOrigins: Bool { true }

    func plannedChannel(for item: BatchedSend) -> Result<Channel, PlanRefusal> {
        do {
            return .success(try channel(for: item.delivery))
        } catch {
            // The app's configuration is at fault: pause the channel, leave the subscription alone.
            return .failure(PlanRefusal(outcome: .channelError(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")])))
        }
    }

    /// VAPID tokens are signed here per push-service origin (``VAPIDTokenManager``), not fetched per batch.
    func tokenKey(of channel: Channel) -> ProviderTokenKey? { nil }

    func token(for channel: Channel) async -> Result<String, PlanRefusal> { .success("") }

    func text(of token: String) -> String { token }

    func reportRefused(_ token: String, for channel: Channel) {}

    func plannedRequest(for item: BatchedSend, channel: Channel, token: String?, now: Date) -> PlannedRequest {
        let delivery = item.delivery
        var webDelivery = DeliveryRendering.webPushDelivery(for: delivery, message: item.message, now: now, userTags: userTags)
        webDelivery.declarative = channel.settings.declarative
        // The two forms of one notification are different payloads: each is rendered once and kept apart.
        let form = webDelivery.declarative.requestsDeclarativeForm(endpoint: webDelivery.endpoint) ? "declarative" : "flat"
        let renderKey = DeliveryRendering.renderKey(for: delivery, message: item.message, variant: "\(provider.rawValue) \(form)")
        return plan.request(
            for: webDelivery, p256dh: delivery.webP256DH, auth: delivery.webAuth, vapid: tokenManager(for: channel)
        ) { () throws(WebPushRequestError) in
            try self.renders.payload(
                key: renderKey, msgID: webDelivery.msgID,
                render: { () throws(WebPushRequestError) in try WebPushRequestFactory.plaintext(for: webDelivery) },
                template: { () throws(WebPushRequestError) in try WebPushRequestFactory.plaintextTemplate(for: webDelivery) })
        }
    }

    /// The push service's origin: a capability-free host:port (the path, which is the secret, never appears).
    func route(_ destination: PushDestination, channel: Channel) -> (client: HTTP2Client, origin: HTTP2Origin) {
        guard case .pushService(let host, let port) = destination else {
            preconditionFailure("a Web Push plan sends to a push service only")
        }
        return (client, HTTP2Origin(scheme: .https, host: host, port: port))
    }

    func tenant(of channel: Channel) -> HTTP2Tenant { channel.tenant }

    func judge(
        _ response: PushResponse, of item: BatchedSend, channel: Channel, origin: HTTP2Origin, token: String?, resent: Bool
    ) -> BatchVerdict {
        // Retry-After counts from the answer's arrival (RFC 9110 §10.2.3), not from when the delivery was decided,
        // on PostgreSQL's clock (docs/clocks.md): it becomes the next attempt's `run_at`.
        let answered = item.delivery.judgedNow()
        switch plan.judge(response, now: answered) {
        case .tokenRefused: return .tokenRefused
        case .judged(let answer):
            return .outcome(channel.evidence.judge(answer, subscription: item.delivery.subscriptionID, origin: origin.description, now: answered))
        }
    }

    /// The endpoint is the subscriber's, not the channel's: a transport failure is the delivery's.
    func transportOutcome(_ outcome: DeliveryOutcome, channel: Channel) -> DeliveryOutcome { outcome }

    /// The Web Push plan under `egressPolicy`: a literal forbidden address (in any spelling) is refused before
    /// anything is signed or the client asked; a name is checked by the client once resolved, against the same
    /// policy.
    static func plan(egressPolicy: EgressPolicy) -> WebPushRequestPlan {
        WebPushRequestPlan(refusedEndpoint: ProviderTransport.forbiddenEndpoint) { host in
            checkedHost(host, policy: egressPolicy)
        }
    }

    /// `host` as the egress policy reads it (``EgressHost``: a name, or an address in its canonical text, so
    /// `0x7f.1` is `127.0.0.1`); `nil` when the policy refuses it.
    static func checkedHost(_ host: String, policy: EgressPolicy) -> String? {
        guard let parsed = try? policy.check(host: host) else { return nil }
        switch parsed {
        case .name(let name): return name
        case .address(let address): return address.description
        }
    }

    /// The endpoint with its host as the egress policy reads it (``EgressHost``: a name, or an address in its
    /// canonical text, so `0x7f.1` is `127.0.0.1`), so the connection, `:authority` and the VAPID `aud` name
    /// the same host; `nil` when the policy refuses the host (an invalid spelling or a forbidden literal).
    static func checkedEndpoint(_ endpoint: WebPushEndpoint, policy: EgressPolicy) -> WebPushEndpoint? {
        guard let host = checkedHost(endpoint.host, policy: policy) else { return nil }
        var checked = endpoint
        checked.host = host
        return checked
    }

    func cachedChannel(for delivery: ClaimedDelivery) -> Channel? { channels.cachedChannel(for: delivery) }

    func channel(for delivery: ClaimedDelivery) throws -> Channel {
        try channels.channel(for: delivery) { settingsJSON, _ in
            let settings: WebPushChannelSettings
            do {
                settings = try WebPushChannelSettings(settings: try JSONValue(parsing: settingsJSON))
            } catch let error as WebPushChannelSettingsError {
                throw error
            } catch {
                throw WebPushChannelSettingsError("the settings are not valid JSON")
            }
            let fingerprint = Base64URL.encode(SHA256.hash(Array(settings.privateKey.publicKey.x963Representation)))
            return Channel(
                settings: settings, tokenManagerKey: "\(fingerprint) \(settings.subject.value)",
                evidence: ChannelEvidence(policy: .webPush), tenant: HTTP2Tenant(CanonicalUUIDText.format(delivery.appID)))
        }
    }

    /// One manager per key + subject, so apps sharing a key share its per-origin tokens (looked up per send,
    /// so an evicted manager is not kept alive by the channel cache).
    private func tokenManager(for channel: Channel) -> VAPIDTokenManager {
        tokenManagers.value(forKey: channel.tokenManagerKey) {
            VAPIDTokenManager(privateKey: channel.settings.privateKey, subject: channel.settings.subject)
        }
    }
}
