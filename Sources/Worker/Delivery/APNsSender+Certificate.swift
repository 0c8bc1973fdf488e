import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Providers
import PushCrypto
import Synchronization

extension APNsSender {
    /// A certificate-based channel: the parsed certificate and key, the topic, the origin override, the evidence.
    struct CertificateChannel: Sendable {
        var credentials: APNsCertificateCredentials
        var origin: HTTP2Origin?
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
        var tenant: HTTP2Tenant
    }

    /// Certificate-based APNs (Apple: "Establishing a certificate-based connection to APNs"): the request has no
    /// `authorization` header and goes over a connection whose TLS handshake presented the app's certificate
    /// (``CertificateClients``: one pool per certificate). Checked before anything is sent, each a channel error
    /// that pauses the channel (the app's configuration is at fault, not the device):
    /// `certificate_expired` (past `notAfter`), `bad_certificate_environment` (the certificate does not name
    /// the environment of Apple's host the subscription needs; unknowable with an `endpoint` override) and
    /// `topic_not_in_certificate` (the request's `apns-topic` is not among the certificate's topics, e.g. a
    /// `.voip` topic on a certificate without VoIP). A Live Activity push fails alone as `push_type_unsupported`
    /// without a request: Apple accepts those only over token-based authentication (Apple Developer Forums,
    /// thread 712499, "Certificate-based authentication is not supported for these APNs pushes"), and the
    /// channel's other pushes are fine. Apple's answers are judged as for token channels (any 403,
    /// `BadCertificate` and `BadCertificateEnvironment` included, pauses the channel).
    func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date, certificate channel: CertificateChannel)
        async -> DeliveryOutcome
    {
        guard let certificateClients else {
            return .channelError(
                reason: .invalidChannelSettings,
                detail: ["error": "certificate-based APNs channels are not enabled in this sender"])
        }
        let credentials = channel.credentials
        let certificate = credentials.identity.certificate
        if certificate.notAfter <= now {
            return .channelError(
                reason: .certificateExpired,
                detail: [
                    "error": .string("the APNs client certificate expired at \(certificate.notAfter) (renew it in the developer portal)"),
                    "certificate": .string(certificate.fingerprint),
                ])
        }
        if channel.origin == nil {
            let environment: ApplePushCertificate.Environment = delivery.apnsEnvironment == "sandbox" ? .development : .production
            guard credentials.apple.serves(environment) else {
                return .channelError(
                    reason: .badCertificateEnvironment,
                    detail: [
                        "error": .string("the APNs client certificate is not valid for the \(environment.rawValue) environment the subscription needs"),
                        "certificate": .string(certificate.fingerprint),
                    ])
            }
        }
        if message.apnsPushType == .liveActivity {
            return .failed(
                reason: .pushTypeUnsupported,
                detail: [
                    "provider": .string(provider.rawValue), "apns_push_type": .string(APNsPushType.liveActivity.rawValue),
                    "note": "APNs accepts Live Activity pushes over token-based (.p8) authentication only; this app's APNs channel uses a certificate",
                ])
        }
        let origin = channel.origin ?? Self.origin(forEnvironment: delivery.apnsEnvironment)
        let apnsDelivery = DeliveryRendering.apnsDelivery(for: delivery, message: message, topic: credentials.topic, now: now)
        let request: PushRequest
        do {
            request = try APNsRequestFactory.makeCertificateRequest(apnsDelivery)
        } catch {
            if Self.channelRequestErrors.contains(error.reason) {
                return .channelError(reason: error.reason, detail: ["error": .string(error.detail)])
            }
            return .failed(reason: error.reason, detail: ["error": .string(error.detail)])
        }
        if let topic = request.headers.first(where: { $0.name == "apns-topic" })?.value, !credentials.apple.allows(topic: topic) {
            return .channelError(
                reason: .topicNotInCertificate,
                detail: [
                    "error": .string("apns-topic `\(topic)` is not among the certificate's topics (\(credentials.apple.topics.joined(separator: ", ")))"),
                    "certificate": .string(certificate.fingerprint),
                ])
        }
        let client = certificateClients.client(for: credentials.identity)
        switch await ProviderTransport.send(
            request, to: origin, client: client, timeout: requestTimeout, tenant: channel.tenant, pacer: pacer)
        {
        case .success(let response):
            let answered = delivery.judgedNow()
            let answer = APNsResponseClassifier.answer(response, subscriptionTokenUpdatedAt: delivery.tokenUpdatedAt, now: answered)
            return channel.evidence.judge(answer, subscription: delivery.subscriptionID, origin: origin.description, now: answered)
        case .failure(let failure):
            return channel.origin == nil ? failure.outcome : ProviderTransport.channelEndpointOutcome(failure.outcome)
        }
    }

    /// One ``HTTP2Client`` per client certificate (by SHA-256 fingerprint), each with a TLS context of its own
    /// holding that certificate and key (`SSL_CTX_use_certificate` / `SSL_CTX_use_PrivateKey`) and its own pool:
    /// apps sharing a certificate share its connections; different certificates never share one (APNs binds a
    /// connection to the certificate of its handshake). At most `capacity` clients are kept (least recently
    /// used shut down gracefully: its in-flight requests finish). The soonest `notAfter` among the kept
    /// certificates is published as `pushizo_credential_expiry_timestamp_seconds{kind="apns_certificate"}`.
    final class CertificateClients: Sendable {
        private struct Entry: Sendable {
            var client: HTTP2Client
            var notAfter: Date
        }

        private let entries: Mutex<LRUCache<String, Entry>>
        private let makeClient: @Sendable (TLSClientConfiguration.ClientIdentity) -> HTTP2Client
        private let expiry: GaugeFamily?

        /// The label value of the expiry gauge.
        static let expiryKind = "apns_certificate"

        /// - Parameters:
        ///   - capacity: certificates whose client is kept.
        ///   - expiry: the gauge `pushizo_credential_expiry_timestamp_seconds` (label `kind`), or nil.
        ///   - makeClient: a client presenting the identity (the worker's trust roots and pool limits).
        init(
            capacity: Int, expiry: GaugeFamily? = nil,
            makeClient: @escaping @Sendable (TLSClientConfiguration.ClientIdentity) -> HTTP2Client
        ) {
            entries = Mutex(LRUCache(capacity: capacity))
            self.makeClient = makeClient
            self.expiry = expiry
        }

        /// Clients currently kept.
        var count: Int { entries.withLock { $0.count } }

        /// The client presenting `identity`, made on first use.
        func client(for identity: ClientCertificateIdentity) -> HTTP2Client {
            let fingerprint = identity.certificate.fingerprint
            var evicted: HTTP2Client?
            let client = entries.withLock { entries -> HTTP2Client in
                if let entry = entries.value(forKey: fingerprint) { return entry.client }
                let client = makeClient(.pem(certificateChain: identity.certificateChainPEM, privateKey: identity.privateKeyPEM))
                evicted = entries.insert(Entry(client: client, notAfter: identity.certificate.notAfter), forKey: fingerprint)?.client
                // Published under the lock: two first uses at once must not leave the gauge at the earlier one's
                // view of the set (last writer wins, with a stale minimum).
                if let soonest = entries.values.map(\.notAfter).min() {
                    expiry?.replaceAll([LabelValues(Self.expiryKind): soonest.timeIntervalSince1970])
                }
                return client
            }
            if let evicted { Task { await evicted.shutdown() } }
            return client
        }

        /// Shuts every client down (the worker's stop).
        func shutdown() async {
            let clients = entries.withLock { entries in
                let clients = entries.values.map(\.client)
                entries.removeAll { _ in true }
                return clients
            }
            for client in clients { await client.shutdown() }
        }
    }
}
