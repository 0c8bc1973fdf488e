import Foundation
import Synchronization

/// The OAuth2 access token of one Google service account, shared by every FCM send of that account.
///
/// - Cached until `refreshAhead` seconds before it expires (default 300 s; never more than half the
///   token's lifetime, so a short-lived token is not refreshed on every call).
/// - One refresh in flight: however many callers ask while the token is missing or due, one `fetch` runs
///   and all of them get its result. If it fails, callers still get the old token while it has not
///   expired, else the fetch's error; the next call tries again.
/// - ``invalidate(rejectedToken:)`` after FCM answers 401 `UNAUTHENTICATED`
///   (``FCMResponseClassifier/requiresNewAccessToken(_:)``), then ask again and retry the send once.
///
/// Thread-safe: state lives in a `Mutex`; the fetch runs in a `Task` outside the lock.
public final class GoogleAccessTokenCache: Sendable {
    /// Exchanges a signed assertion for `(access token, lifetime in seconds)` at the account's `token_uri`
    /// (the worker does the HTTP; see ``GoogleServiceAccount/tokenRequestBody(assertion:)`` and
    /// ``GoogleServiceAccount/parseTokenResponse(_:)``).
    public typealias Fetch = @Sendable (_ assertion: String) async throws -> (accessToken: String, expiresIn: Int)

    public let account: GoogleServiceAccount
    private let fetch: Fetch
    private let refreshAhead: Double
    private let now: @Sendable () -> Date

    private struct Cached {
        var token: String
        var expiresAt: Date
        var refreshAt: Date
    }

    private struct State {
        var cached: Cached?
        var inFlight: Task<Cached, any Error>?
        /// Bumped by `invalidate`, so a fetch that started before it cannot overwrite a newer decision.
        var generation = 0
    }

    private let state = Mutex(State())

    /// - Parameters:
    ///   - refreshAhead: seconds before expiry a token is replaced (default 300 = 5 min).
    ///   - now: the clock (injectable for tests).
    public init(account: GoogleServiceAccount, refreshAhead: Double = 300, now: @escaping @Sendable () -> Date = Date.init,
                fetch: @escaping Fetch)
    {
        self.account = account
        self.fetch = fetch
        self.refreshAhead = refreshAhead.isFinite ? max(refreshAhead, 0) : 300
        self.now = now
    }

    /// A valid access token (without `Bearer `): the cached one when it is not yet due, else the result of
    /// the one fetch in flight.
    /// - Throws: `GoogleAuthError` `.signingFailed`, or whatever `fetch` throws (every waiter of that fetch
    ///   without an unexpired old token gets the same error).
    public func accessToken() async throws -> String {
        let current = now()
        enum Step { case ready(String), wait(Task<Cached, any Error>, fallback: String?) }
        let step: Step = state.withLock { state in
            if let cached = state.cached, current < cached.refreshAt { return .ready(cached.token) }
            // A token that is due but not expired still works if the refresh fails.
            let fallback = state.cached.flatMap { current < $0.expiresAt ? $0.token : nil }
            if let inFlight = state.inFlight { return .wait(inFlight, fallback: fallback) }
            let generation = state.generation
            let task = Task { [self] in try await self.refresh(generation: generation) }
            state.inFlight = task
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

    /// Drops the cached token so the next ``accessToken()`` fetches a new one. With `rejectedToken`, only
    /// when the cached token is that one: fifty sends refused with the same old token cause one refresh,
    /// and a token fetched meanwhile is kept.
    public func invalidate(rejectedToken: String? = nil) {
        state.withLock { state in
            if let rejectedToken, state.cached?.token != rejectedToken { return }
            state.cached = nil
            state.generation += 1
        }
    }

    private func refresh(generation: Int) async throws -> Cached {
        do {
            let assertion = try account.assertion(issuedAt: now())
            let (token, expiresIn) = try await fetch(assertion)
            let fetchedAt = now()
            let lifetime = Double(max(expiresIn, 1))
            let cached = Cached(token: token, expiresAt: fetchedAt.addingTimeInterval(lifetime),
                                refreshAt: fetchedAt.addingTimeInterval(lifetime - min(refreshAhead, lifetime / 2)))
            state.withLock { state in
                state.inFlight = nil
                if state.generation == generation { state.cached = cached }
            }
            return cached
        } catch {
            state.withLock { $0.inFlight = nil }
            throw error
        }
    }
}
