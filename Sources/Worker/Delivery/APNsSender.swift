import DeliveryCore
import Foundation
import HTTP2
import Providers
import PushCrypto
import Synchronization

/// APNs over HTTP/2 with token-based authentication (Apple: "Establishing a token-based connection to APNs").
///
/// One ``APNsTokenManager`` per team + key id + key material, shared by every app and connection using that
/// key, so the provider token is reused by every request and refreshed about every 50 minutes. The key
/// material is part of the identity: two tenants naming the same team and key ids with different keys never
/// share (or spoil) each other's tokens. Channel settings are parsed once and cached until the row's JSON
/// changes, so a corrected key takes effect without a restart. Both caches are bounded (``CacheBounds``).
///
/// Answers naming the credential (any 403) pause the channel at once; `DeviceTokenNotForTopic` and
/// `BadPath` pause it only on the evidence of ``ChannelFaultEvidence/Policy/singleOrigin``.
public final class APNsSender: ProviderSender {
    public let provider = "apns"
    /// Apple's production and development hosts ("Sending notification requests to APNs").
    public static let productionOrigin = HTTP2Origin(scheme: .https, host: "api.push.apple.com", port: 443)
    public static let sandboxOrigin = HTTP2Origin(scheme: .https, host: "api.sandbox.push.apple.com", port: 443)

    struct Channel: Sendable {
        var credentials: APNsCredentials
        /// The ``tokenManagers`` key: team, key id and the public key's fingerprint.
        var tokenManagerKey: String
        var origin: HTTP2Origin?
        var evidence: ChannelEvidence
    }

    /// Request-building errors caused by the app's channel settings rather than by the message.
    static let channelRequestErrors: Set<String> = ["missing_topic", "invalid_topic", "invalid_provider_token"]

    private let client: HTTP2Client
    private let egressPolicy: EgressPolicy
    private let requestTimeout: Duration
    private let logger: Logger
    private let metrics: WorkerMetrics?
    let channels: ChannelCache<Channel>
    let tokenManagers: SharedInstances<APNsTokenManager>

    /// - Parameter egressPolicy: which endpoints may be used (the same policy the client enforces on resolved
    ///   addresses); checked here before a request is built.
    /// - Parameter requestTimeout: seconds before a request is abandoned (and retried later).
    /// - Parameter metrics: where provider tokens made (and failures to make one) are counted.
    public convenience init(
        client: HTTP2Client, requestTimeout: Double, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        metrics: WorkerMetrics? = nil
    ) {
        self.init(
            client: client, requestTimeout: requestTimeout, logger: logger, egressPolicy: egressPolicy,
            bounds: .standard, metrics: metrics)
    }

    /// - Parameter bounds: the cache sizes (tests use small ones).
    init(
        client: HTTP2Client, requestTimeout: Double, logger: Logger, egressPolicy: EgressPolicy = .publicInternetOnly,
        bounds: CacheBounds, metrics: WorkerMetrics? = nil
    ) {
        self.metrics = metrics
        channels = ChannelCache(capacity: bounds.channels)
        tokenManagers = SharedInstances(capacity: bounds.apnsTokenManagers)
        self.egressPolicy = egressPolicy
        self.client = client
        self.requestTimeout = .milliseconds(Int64(requestTimeout * 1000))
        self.logger = logger
    }

    public func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
        let channel: Channel
        do {
            channel = try self.channel(for: delivery)
        } catch {
            // A configuration error of the app's channel: pause it, leave the subscription alone.
            return .channelError(reason: "invalid_channel_settings", detail: ["error": .string("\(error)")])
        }
        let tokenManager = tokenManager(for: channel)
        let request: PushRequest
        do {
            let bearer = try tokenManager.bearerToken()
            let delivery = DeliveryRendering.apnsDelivery(for: delivery, message: message, topic: channel.credentials.topic, now: now)
            request = try APNsRequestFactory.makeRequest(delivery, bearerToken: bearer)
        } catch let error as APNsRequestError {
            // The channel's settings, not this push, are at fault: pause the channel, keep the delivery.
            if Self.channelRequestErrors.contains(error.reason) {
                return .channelError(reason: error.reason, detail: ["error": .string(error.detail)])
            }
            return .failed(reason: error.reason, detail: ["error": .string(error.detail)])
        } catch {
            metrics?.tokenRefreshed(provider: provider, succeeded: false)
            return .channelError(reason: "provider_token_failed", detail: ["error": .string("\(error)")])
        }
        let origin = channel.origin ?? Self.origin(forEnvironment: delivery.apnsEnvironment)
        let pushResponse: PushResponse
        switch await ProviderTransport.send(request, to: origin, client: client, timeout: requestTimeout) {
        case .success(let response): pushResponse = response
        case .failure(let failure):
            return channel.origin == nil ? failure.outcome : ProviderTransport.channelEndpointOutcome(failure.outcome)
        }
        if APNsResponseClassifier.requiresNewProviderToken(pushResponse) {
            tokenManager.invalidate()
        }
        let answer = APNsResponseClassifier.answer(pushResponse, subscriptionTokenUpdatedAt: delivery.tokenUpdatedAt)
        return channel.evidence.judge(answer, subscription: delivery.subscriptionID, origin: origin.description, now: Date())
    }

    /// Apple's host for a subscription's `apns_environment` (`sandbox`, else production).
    public static func origin(forEnvironment environment: String?) -> HTTP2Origin {
        environment == "sandbox" ? sandboxOrigin : productionOrigin
    }

    private func channel(for delivery: ClaimedDelivery) throws -> Channel {
        try channels.channel(for: delivery) { settingsJSON, endpoint in
            let credentials = try APNsCredentials(settings: try JSONValue(parsing: settingsJSON))
            var origin: HTTP2Origin?
            if let endpoint, !endpoint.isEmpty {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            }
            let fingerprint = Base64URL.encode(SHA256.hash(Array(credentials.privateKey.publicKey.x963Representation)))
            return Channel(
                credentials: credentials, tokenManagerKey: "\(credentials.teamID).\(credentials.keyID).\(fingerprint)",
                origin: origin, evidence: ChannelEvidence(policy: .singleOrigin))
        }
    }

    /// The shared manager of the channel's key (looked up per send, so an evicted manager is not kept
    /// alive by the channel cache).
    private func tokenManager(for channel: Channel) -> APNsTokenManager {
        tokenManagers.value(forKey: channel.tokenManagerKey) { [metrics] in
            APNsTokenManager(
                teamID: channel.credentials.teamID, keyID: channel.credentials.keyID,
                privateKey: channel.credentials.privateKey,
                onNewToken: { metrics?.tokenRefreshed(provider: "apns", succeeded: true) })
        }
    }
}
