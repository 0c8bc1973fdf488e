import Foundation
import PushCrypto
import Synchronization

/// The APNs provider token (an ES256 JWT) of one team + key, shared by every connection and request
/// (Apple: "Establishing a token-based connection to APNs"). Apple rejects tokens older than one hour
/// (`ExpiredProviderToken`) and answers `TooManyProviderTokenUpdates` to a provider that refreshes more
/// often than every 20 minutes, so the token is reused for `refreshInterval` and never replaced sooner than
/// `minimumRefreshInterval` after it was made.
///
/// Thread-safe: the state lives in a `Mutex`; signing happens under it so concurrent callers at expiry
/// make one token, not many.
public final class APNsTokenManager: Sendable {
    public let teamID: String
    public let keyID: String
    private let privateKey: P256PrivateKey
    private let refreshInterval: Double
    private let minimumRefreshInterval: Double
    private let now: @Sendable () -> Date
    private let onNewToken: (@Sendable () -> Void)?

    private struct State {
        var token: String?
        var issuedAt: Date = .distantPast
        var invalidated = false
    }

    private let state = Mutex(State())

    /// - Parameters:
    ///   - refreshInterval: seconds a token is reused (default 3000 s = 50 min, inside Apple's 60 min).
    ///   - minimumRefreshInterval: seconds that must pass between two tokens even after ``invalidate()``
    ///     (default 1200 s = 20 min, Apple's `TooManyProviderTokenUpdates` floor).
    ///   - now: the clock (injectable for tests).
    ///   - onNewToken: called after each token is made (for metrics).
    public init(teamID: String, keyID: String, privateKey: P256PrivateKey, refreshInterval: Double = 3000,
                minimumRefreshInterval: Double = 1200, now: @escaping @Sendable () -> Date = Date.init,
                onNewToken: (@Sendable () -> Void)? = nil)
    {
        self.onNewToken = onNewToken
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
        self.refreshInterval = refreshInterval
        self.minimumRefreshInterval = minimumRefreshInterval
        self.now = now
    }

    /// A manager for `credentials`' team and key.
    public convenience init(credentials: APNsCredentials, now: @escaping @Sendable () -> Date = Date.init) {
        self.init(teamID: credentials.teamID, keyID: credentials.keyID, privateKey: credentials.privateKey, now: now)
    }

    /// The current token (without the `bearer ` prefix): header `{"alg":"ES256","kid":keyID}`, claims
    /// `{"iss":teamID,"iat":<whole UNIX seconds>}`. The same string until `refreshInterval` has passed
    /// (or, after ``invalidate()``, until `minimumRefreshInterval` has passed since it was made).
    /// - Throws: `CryptoError` `.signingFailed` when OpenSSL cannot sign.
    public func bearerToken() throws -> String {
        let current = now()
        return try state.withLock { state in
            if let token = state.token {
                let age = current.timeIntervalSince(state.issuedAt)
                let limit = state.invalidated ? minimumRefreshInterval : refreshInterval
                // A clock that went backwards (age < 0) keeps the token: it cannot be older than it was.
                if age < limit { return token }
            }
            let issuedAt = Date(timeIntervalSince1970: current.timeIntervalSince1970.rounded(.down))
            let token = try JSONWebToken.signES256(
                header: ["kid": .string(keyID)],
                claims: ["iss": .string(teamID), "iat": .int(Self.wholeSeconds(issuedAt.timeIntervalSince1970))],
                key: privateKey)
            state = State(token: token, issuedAt: issuedAt, invalidated: false)
            onNewToken?()
            return token
        }
    }

    /// `seconds` as a whole `Int64` without trapping on a broken clock: NaN gives 0, values beyond the
    /// `Int64` range give its nearest end.
    static func wholeSeconds(_ seconds: Double) -> Int64 {
        if seconds.isNaN { return 0 }
        return Int64(exactly: seconds.rounded(.down)) ?? (seconds > 0 ? .max : .min)
    }

    /// Marks the token as rejected (APNs `ExpiredProviderToken` / `InvalidProviderToken`): the next
    /// ``bearerToken()`` makes a new one as soon as `minimumRefreshInterval` has passed since the current
    /// one was made (at once if it already has).
    public func invalidate() {
        state.withLock { $0.invalidated = true }
    }
}
