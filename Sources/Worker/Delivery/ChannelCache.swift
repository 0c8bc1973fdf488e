import DeliveryCore
import Foundation
import PushCrypto
import Synchronization

/// How many entries the senders keep per tenant-chosen key. Each cache is an ``LRUCache``: past its bound
/// the least recently used entry is dropped and rebuilt on its next use (a parse, a signature, an access
/// token fetch), so a tenant creating many apps, keys or push-service origins costs CPU, never unbounded
/// memory. docs/security.md lists the bounds.
struct CacheBounds: Sendable {
    /// Parsed channels per provider sender (one per app with a channel of that provider).
    var channels = 4096
    /// APNs credentials (team + key id + key) whose shared provider token a sender keeps in memory, when it
    /// has no fleet-wide ``SharedProviderTokens`` of its own.
    var apnsTokenManagers = 4096
    /// Google service accounts whose shared access token a sender keeps in memory, likewise.
    var googleTokenCaches = 4096
    /// VAPID token managers (one per key + subject), each caching at most
    /// `VAPIDTokenManager.maximumCachedOrigins` tokens.
    var vapidTokenManagers = 1024
    /// APNs client certificates whose HTTP/2 client (TLS context and connection pool) a sender keeps: one per
    /// certificate in use, shut down gracefully when dropped.
    var apnsCertificateClients = 256

    /// The bounds the worker runs with.
    static let standard = CacheBounds()
}

/// An app's parsed channel (credentials, origin, fault evidence) per app, reused until the row's `settings`
/// JSON or `endpoint` changes, so a corrected key takes effect without a restart (and with fresh evidence)
/// and nothing is parsed per delivery. Shared by every provider sender; at most `capacity` apps are kept
/// (least recently used dropped). Settings of up to ``maximumTextBytes`` are remembered as text (comparing
/// them costs less than hashing them for every delivery); larger ones by SHA-256, so a large settings
/// document costs its digest only.
final class ChannelCache<Channel: Sendable>: Sendable {
    /// The largest settings JSON, in UTF-8 bytes, remembered as text rather than by digest.
    static var maximumTextBytes: Int { 8192 }

    /// What a cached channel was built from: the settings JSON itself, or its SHA-256 when large.
    private enum Settings: Equatable, Sendable {
        case text(String)
        case digest([UInt8])

        init(_ json: String) {
            self = json.utf8.count <= ChannelCache.maximumTextBytes ? .text(json) : .digest(SHA256.hash(Array(json.utf8)))
        }
    }

    private struct Entry: Sendable {
        var settings: Settings
        var endpoint: String?
        var channel: Channel
    }

    private let entries: Mutex<LRUCache<UUID, Entry>>

    init(capacity: Int = CacheBounds.standard.channels) {
        entries = Mutex(LRUCache(capacity: capacity))
    }

    /// Apps currently cached.
    var count: Int { entries.withLock { $0.count } }

    /// The cached channel for the delivery's app, or the one `build` makes from the row's settings JSON
    /// (`{}` when the row has none) and endpoint. Every caller gets the one cached instance, even when several
    /// built one at the same time.
    /// - Throws: whatever `build` throws; nothing is cached then.
    func channel(for delivery: ClaimedDelivery, build: (_ settingsJSON: String, _ endpoint: String?) throws -> Channel)
        throws -> Channel
    {
        let settingsJSON = delivery.channelSettingsJSON ?? "{}"
        let settings = Settings(settingsJSON)
        if let cached = cached(delivery, settings: settings) { return cached }
        // Built outside the lock (a PEM parse or a signature); concurrent first uses of an app may each build
        // one, and the first stored wins for all of them: a channel carries state (fault evidence) that every
        // delivery of the app must share.
        let built = try build(settingsJSON, delivery.channelEndpoint)
        return entries.withLock { cache in
            if let raced = cache.value(forKey: delivery.appID), raced.settings == settings,
                raced.endpoint == delivery.channelEndpoint
            {
                return raced.channel
            }
            _ = cache.insert(Entry(settings: settings, endpoint: delivery.channelEndpoint, channel: built), forKey: delivery.appID)
            return built
        }
    }

    /// The cached channel for the delivery's app when it was built from the row's current settings and
    /// endpoint; `nil` otherwise. Never builds: for callers that must not parse credentials (the claim's
    /// thread, which serves every app).
    func cachedChannel(for delivery: ClaimedDelivery) -> Channel? {
        cached(delivery, settings: Settings(delivery.channelSettingsJSON ?? "{}"))
    }

    private func cached(_ delivery: ClaimedDelivery, settings: Settings) -> Channel? {
        guard let entry = entries.withLock({ $0.value(forKey: delivery.appID) }), entry.settings == settings,
            entry.endpoint == delivery.channelEndpoint
        else { return nil }
        return entry.channel
    }
}

/// One value per key, built on first use and kept in an ``LRUCache`` of `capacity` keys: the senders'
/// token managers and access-token caches, shared by every app using the same key.
final class SharedInstances<Value: Sendable>: Sendable {
    private let entries: Mutex<LRUCache<String, Value>>

    init(capacity: Int) {
        entries = Mutex(LRUCache(capacity: capacity))
    }

    /// Keys currently held.
    var count: Int { entries.withLock { $0.count } }

    /// The value for `key`, made by `make` (under the lock, so one value per key) when missing.
    func value(forKey key: String, make: () -> Value) -> Value {
        entries.withLock { entries in
            if let value = entries.value(forKey: key) { return value }
            let value = make()
            entries.insert(value, forKey: key)
            return value
        }
    }
}

/// The fault evidence of one cached channel (``ChannelFaultEvidence`` behind a lock): fed every provider
/// answer, it turns a suspect refusal into a channel pause only on enough evidence. It also holds the
/// subscriptions a credential that carries only some of the channel's pushes was refused for
/// (``CredentialHolds``), so their pushes wait without a request while the rest of the channel is sent.
final class ChannelEvidence: Sendable {
    private struct State: Sendable {
        var evidence: ChannelFaultEvidence
        var holds: CredentialHolds
    }

    private let state: Mutex<State>

    init(policy: ChannelFaultEvidence.Policy, holds: CredentialHolds.Policy = .standard) {
        state = Mutex(State(evidence: ChannelFaultEvidence(policy: policy), holds: CredentialHolds(policy: holds)))
    }

    /// See ``ChannelFaultEvidence/judge(_:subscription:origin:at:)`` (`origin` evaluated for a suspect
    /// refusal only); a ``ProviderFault/partialCredential`` answer holds the subscription instead
    /// (``CredentialHolds/judge(_:subscription:at:)``) and is no evidence about the channel either way.
    func judge(_ answer: ProviderAnswer, subscription: UUID, origin: @autoclosure () -> String, now: Date) -> DeliveryOutcome {
        state.withLock { state in
            if answer.fault == .partialCredential { return state.holds.judge(answer, subscription: subscription, at: now) }
            return state.evidence.judge(answer, subscription: subscription, origin: origin(), at: now)
        }
    }

    /// The outcome of a push to a held subscription, to be recorded without sending it; `nil` when the
    /// subscription is not held (``CredentialHolds/heldOutcome(for:at:)``).
    func heldOutcome(subscription: UUID, now: Date) -> DeliveryOutcome? {
        state.withLock { $0.holds.heldOutcome(for: subscription, at: now) }
    }
}
