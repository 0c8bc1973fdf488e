import DeliveryCore
import Foundation
import Providers
import Synchronization

/// The provider tokens of this worker, shared with the fleet through `provider_tokens`
/// (docs/provider-tokens.md): one APNs provider token per team + key, one FCM access token per service
/// account, however many workers send with it.
///
/// - Each worker keeps the current token of every credential it uses in memory (an ``LRUCache`` of
///   `capacity` credentials) and uses it without asking the database until it is due
///   (``ProviderTokenPolicy/refreshAt(_:)``) or the provider refused it (``reportRejected(_:for:)``).
/// - The claim of a batch reads, beside it and without a lock, the rows of the tokens its requests carry that
///   are not ready in memory (``prefetch(_:reading:)``), and adopts those another worker made that may be sent
///   as they are; it never mints, so a slow mint for one app never holds up a claim.
/// - Then one task per credential in this process (single flight) asks the database: under a
///   transaction-scoped advisory lock on the credential's fingerprint it adopts the row's token, or mints a
///   new one and replaces the row conditionally on the generation it read (``ProviderTokenStore``). The
///   others in the fleet, waiting on the same lock, then adopt that token.
/// - The database unavailable (or another worker's mint holding the lock past `lockTimeout`): the
///   worker keeps its unexpired token, or mints one of its own, logs it (a warning per credential a minute),
///   and asks the database again after `localRetry`, offering that token to the fleet when the
///   row has none usable. A database blip therefore never stops sending; it may cost one extra token per
///   worker.
/// - With no `coordinate` (tests, `preview`) every token is local.
///
/// The database work is the store's (``ProviderTokenStore``, through ``coordinator(database:)``), reached through one
/// narrow closure: the delivery stage holds no connection.
final class SharedProviderTokens: Sendable {
    typealias Mint = @Sendable () async throws -> MintedProviderToken

    /// What a refresh asks the fleet's store: the credential, the policy, the token the provider refused (if
    /// any), this worker's own token to offer when the row has none usable, and how long to wait for another
    /// worker's mint (PostgreSQL's `lock_timeout`).
    struct Coordination: Sendable {
        var credential: ProviderTokenCredential
        var policy: ProviderTokenPolicy
        var rejected: String?
        var offered: SharedProviderToken?
        var lockTimeout: Duration
        var now: @Sendable () -> Date
    }

    /// Adopts the fleet's token for a credential, or mints one with `mint` and shares it
    /// (``ProviderTokenStore/coordinate(on:credential:policy:rejected:offered:lockTimeout:now:mint:)``).
    /// - Throws: ``ProviderTokenStore/MintFailure`` wrapping `mint`'s error; the database's errors otherwise.
    typealias Coordinate = @Sendable (_ coordination: Coordination, _ mint: @escaping Mint) async throws -> SharedProviderToken

    private let coordinate: Coordinate?
    private let logger: Logger
    /// Where the tokens this worker makes (and fails to make) are counted.
    private let metrics: WorkerMetrics?
    private let lockTimeout: Duration
    private let localRetry: Duration
    private let now: @Sendable () -> Date
    private let fallbackLog = LogRateLimiter(interval: .seconds(60))

    private struct Entry {
        var current: SharedProviderToken?
        /// `current` came from (or was written to) the database.
        var shared = false
        /// A local token is offered to the database again from then on.
        var retryDatabaseAt = Date.distantPast
        /// The last token the provider refused (it is `current`, or was).
        var refused: String?
        var inFlight: Task<SharedProviderToken, any Error>?

        /// The token to send with at `now` without asking anyone: a shared one not yet due, a local one until
        /// the database is asked again, a refused one too young to replace (nobody in the fleet replaces it
        /// either); `nil` when the database is to be asked.
        func ready(_ policy: ProviderTokenPolicy, at now: Date) -> String? {
            guard let token = current else { return nil }
            if refused == token.token {
                // Refused but too young to replace (APNs' floor): nobody in the fleet replaces it either.
                return policy.mayReplace(token, at: now) ? nil : token.token
            }
            if shared { return policy.isFresh(token, at: now) ? token.token : nil }
            return now < retryDatabaseAt && policy.isUnexpired(token, at: now) ? token.token : nil
        }

        /// Makes `token` the current one. The refused token stays remembered: a read of an older row must not
        /// bring it back (``adopt(_:policy:at:)``).
        mutating func replace(with token: SharedProviderToken, shared: Bool, retryDatabaseAt: Date) {
            current = token
            self.shared = shared
            self.retryDatabaseAt = retryDatabaseAt
        }

        /// Takes `row`, the fleet's token as a read without the lock found it (another worker wrote it), when it
        /// may be sent as it is: not due (``ProviderTokenPolicy/isFresh(_:at:)``, the test ``ready(_:at:)`` makes
        /// of a shared token), not the token the provider last refused here, and not older than the shared token
        /// in hand (by generation, while that one is unexpired: a row deleted after its expiry starts again at
        /// 1). Never mints, never writes.
        /// - Returns: whether `row` became the current token.
        mutating func adopt(_ row: SharedProviderToken, policy: ProviderTokenPolicy, at now: Date) -> Bool {
            guard row.token != refused, policy.isFresh(row, at: now) else { return false }
            if shared, let current, current.generation >= row.generation, policy.isUnexpired(current, at: now) {
                return false
            }
            replace(with: row, shared: true, retryDatabaseAt: .distantPast)
            return true
        }
    }

    private let entries: Mutex<LRUCache<String, Entry>>

    /// - Parameters:
    ///   - coordinate: how tokens are shared with the fleet; nil keeps every token in this process.
    ///   - capacity: credentials kept in memory (least recently used dropped).
    ///   - lockTimeout: how long to wait for another worker's mint of the same credential before falling back
    ///     to a local token (PostgreSQL `lock_timeout`).
    ///   - localRetry: how long a local token is used before the database is asked again.
    ///   - metrics: counts each token this worker makes and each failure to make one (adopted tokens are not
    ///     counted: across the fleet the counters add up to the tokens made).
    init(
        coordinate: Coordinate?, logger: Logger, capacity: Int = 4096, lockTimeout: Duration = .seconds(35), localRetry: Duration = .seconds(30),
        now: @escaping @Sendable () -> Date = Date.init, metrics: WorkerMetrics? = nil
    ) {
        self.coordinate = coordinate
        self.logger = logger
        self.metrics = metrics
        self.lockTimeout = lockTimeout
        self.localRetry = localRetry
        self.now = now
        entries = Mutex(LRUCache(capacity: max(capacity, 1)))
    }

    /// Credentials currently held in memory.
    var count: Int { entries.withLock { $0.count } }

    /// Reads, in one round trip by `read` on the caller's thread (the claim's database connection, so the read
    /// needs no hand-off of its own), the fleet's current tokens of `keys` that are not ready in memory and not
    /// being refreshed, and adopts those another worker made that may be used as they are
    /// (``Entry/adopt(_:policy:at:)``). Nothing is read when every token is ready. It never mints and never
    /// writes: a token missing, due or refused is left to ``token(for:policy:mint:)``, which replaces it under
    /// the credential's lock; a failed read is left to it too.
    /// - Parameter read: the rows of these credentials that open with their sealing key, by fingerprint
    ///   (``ProviderTokenStore/current(on:_:)``).
    func prefetch(_ keys: [ProviderTokenKey], reading read: ([ProviderTokenCredential]) throws -> [String: SharedProviderToken]) {
        guard !keys.isEmpty else { return }
        let asked = now()
        let unready = entries.withLock { cache in
            keys.filter { key in
                guard let entry = cache.value(forKey: key.credential.fingerprint) else { return true }
                return entry.inFlight == nil && entry.ready(key.policy, at: asked) == nil
            }
        }
        guard !unready.isEmpty, let rows = try? read(unready.map(\.credential)), !rows.isEmpty else { return }
        let current = now()
        entries.withLock { cache in
            for key in unready {
                guard let row = rows[key.credential.fingerprint] else { continue }
                var entry = cache.value(forKey: key.credential.fingerprint) ?? Entry()
                if entry.adopt(row, policy: key.policy, at: current) { _ = cache.insert(entry, forKey: key.credential.fingerprint) }
            }
        }
    }

    /// Records that the provider refused `token` (APNs `ExpiredProviderToken`, FCM 401 `UNAUTHENTICATED`): the
    /// next ``token(for:policy:mint:)`` replaces it fleet-wide, unless it is no longer the current one.
    func reportRejected(_ token: String, for credential: ProviderTokenCredential) {
        entries.withLock { cache in
            guard var entry = cache.value(forKey: credential.fingerprint), entry.current?.token == token else { return }
            entry.refused = token
            _ = cache.insert(entry, forKey: credential.fingerprint)
        }
    }

    /// The token to send with now (without `bearer `).
    /// - Throws: whatever `mint` throws when no unexpired token is at hand (e.g. `FCMTokenFetchError`,
    ///   `CryptoError`); database errors are never thrown (the token is minted locally instead).
    func token(for credential: ProviderTokenCredential, policy: ProviderTokenPolicy, mint: @escaping Mint) async throws -> String {
        let current = now()
        enum Step { case ready(String), wait(Task<SharedProviderToken, any Error>, fallback: String?) }
        let step: Step = entries.withLock { cache in
            var entry = cache.value(forKey: credential.fingerprint) ?? Entry()
            if let ready = entry.ready(policy, at: current) { return .ready(ready) }
            let fallback = entry.current.flatMap {
                entry.refused != $0.token && policy.isUnexpired($0, at: current) ? $0.token : nil
            }
            if let inFlight = entry.inFlight { return .wait(inFlight, fallback: fallback) }
            let rejected = entry.refused
            let offered = entry.shared ? nil : entry.current
            let task = Task { [self] in
                try await self.refresh(credential, policy: policy, rejected: rejected, offered: offered, mint: mint)
            }
            entry.inFlight = task
            _ = cache.insert(entry, forKey: credential.fingerprint)
            return .wait(task, fallback: fallback)
        }
        switch step {
        case .ready(let token):
            return token
        case .wait(let task, let fallback):
            do {
                return try await task.value.token
            } catch {
                if let fallback { return fallback }
                throw error
            }
        }
    }

    /// The one refresh in flight for `credential`: the database's decision, else a local one.
    private func refresh(
        _ credential: ProviderTokenCredential, policy: ProviderTokenPolicy, rejected: String?,
        offered: SharedProviderToken?, mint uncounted: @escaping Mint
    ) async throws -> SharedProviderToken {
        let mint: Mint = { [metrics] in
            do {
                let minted = try await uncounted()
                metrics?.tokenRefreshed(provider: credential.kind.provider, succeeded: true)
                return minted
            } catch {
                metrics?.tokenRefreshed(provider: credential.kind.provider, succeeded: false)
                throw error
            }
        }
        var result: SharedProviderToken?
        var shared = false
        var databaseError: (any Error)?
        if let coordinate {
            do {
                result = try await coordinate(
                    Coordination(
                        credential: credential, policy: policy, rejected: rejected, offered: offered,
                        lockTimeout: lockTimeout, now: now),
                    mint)
                shared = true
            } catch let failure as ProviderTokenStore.MintFailure {
                try finish(credential, failure: failure.underlying)
            } catch {
                databaseError = error
            }
        }
        if result == nil {
            // Local: the same decision as the database would make, about this worker's own token.
            let local = entries.withLock { $0.value(forKey: credential.fingerprint)?.current }
            let current = now()
            if let local, policy.isUnexpired(local, at: current), policy.isFresh(local, at: current) || coordinate != nil,
                local.token != rejected || !policy.mayReplace(local, at: current)
            {
                // This worker's unexpired token (while the database is away, a due one is kept until it expires).
                result = local
            } else {
                do {
                    let minted = try await mint()
                    result = SharedProviderToken(token: minted.token, generation: 0, issuedAt: minted.issuedAt, expiresAt: minted.expiresAt)
                } catch {
                    try finish(credential, failure: error)
                }
            }
            if let databaseError, fallbackLog.allow(credential.fingerprint) {
                logger.warning(
                    "provider token: the database could not coordinate it; using a token of this worker alone",
                    ["credential": credential.fingerprint, "kind": credential.kind.rawValue, "error": "\(databaseError)"])
            }
        }
        let token = result!
        let retryAt = now().addingTimeInterval(localRetry.inSeconds)
        entries.withLock { cache in
            var entry = cache.value(forKey: credential.fingerprint) ?? Entry()
            entry.inFlight = nil
            // Without a database every token is this worker's alone and follows the policy as a shared one does.
            let shared = shared || coordinate == nil
            entry.replace(with: token, shared: shared, retryDatabaseAt: shared ? .distantPast : retryAt)
            _ = cache.insert(entry, forKey: credential.fingerprint)
        }
        return token
    }

    /// Ends a refresh whose mint failed: the next call tries again.
    private func finish(_ credential: ProviderTokenCredential, failure: any Error) throws -> Never {
        entries.withLock { cache in
            guard var entry = cache.value(forKey: credential.fingerprint) else { return }
            entry.inFlight = nil
            _ = cache.insert(entry, forKey: credential.fingerprint)
        }
        throw failure
    }
}
