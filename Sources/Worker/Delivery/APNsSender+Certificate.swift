import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Providers
import PushCrypto
import Synchronization

extension APNsSender {
    /// A certificate-based channel: the parsed certificate and key, the topic, the origin override, the evidence.
    /// Its requests carry no `authorization` field and go over a connection whose TLS handshake presented the
    /// app's certificate (``CertificateClients``: one pool per certificate); what the plan checks before
    /// sending is in ``APNsRequestPlan``.
    struct CertificateChannel: Sendable {
        var credentials: APNsCertificateCredentials
        /// The channel's requests and the reading of their answers.
        var plan: APNsRequestPlan
        var origin: HTTP2Origin?
        var evidence: ChannelEvidence
        /// The app, as its requests' tenant (``HTTP2Request/tenant``): its turns and share at an origin's queue,
        /// and its share of host-name lookups; made once per channel.
        var tenant: HTTP2Tenant
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
