import DeliveryCore
import Foundation
import PushCrypto

/// A provider token as the fleet shares it (docs/provider-tokens.md): the APNs provider token (an ES256 JWT)
/// of one team + key, the OAuth 2.0 access token of one Google service account, or the OAuth 2.0 access token
/// of one Huawei client (client ID + token endpoint).
public struct SharedProviderToken: Sendable, Equatable {
    /// The bearer token itself (without `bearer `).
    public var token: String
    /// Bumped by one each time the shared row is replaced; 0 for a token that never reached the database
    /// (minted locally while it was unavailable).
    public var generation: Int64
    /// When the token was made: the JWT's `iat` (APNs), or when the token endpoint answered (FCM, Huawei).
    public var issuedAt: Date
    /// When the provider stops accepting it: `iat` + 3600 s (APNs), or the answer's `expires_in` after
    /// `issuedAt` (FCM, Huawei).
    public var expiresAt: Date

    public init(token: String, generation: Int64, issuedAt: Date, expiresAt: Date) {
        self.token = token
        self.generation = generation
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// When a shared provider token is used, replaced ahead of its expiry, or replaced after the provider
/// refused it. A value without I/O: the worker asks it under the credential's lock, about the row it read.
///
/// - APNs (Apple: "Establishing a token-based connection to APNs"): a token is reused by every connection
///   for `refreshAfter` seconds (default 3000 = 50 min, inside Apple's 60), and never replaced sooner than
///   `minimumAge` seconds (default 1200 = 20 min) after it was made, even after `ExpiredProviderToken`:
///   Apple answers `TooManyProviderTokenUpdates` to a team whose token changes more often.
/// - FCM (Google: "Using OAuth 2.0 for Server to Server Applications"): an access token is replaced
///   `refreshAhead` seconds before it expires (default 300; at most half its lifetime), or at once after
///   FCM refused it (401 `UNAUTHENTICATED`); there is no minimum age.
/// - Huawei (Huawei, "Client Credentials": reuse the token for its lifetime, at most 1000 tokens per app in 5
///   minutes): as FCM, `refreshAhead` seconds before `expires_in` runs out, or at once after Push Kit refused it
///   (`80200003` "Oauth Token expired", or a 401 without a code).
public struct ProviderTokenPolicy: Sendable, Equatable {
    /// Which provider's tokens, also the `provider_tokens.kind` column.
    public enum Kind: String, Sendable {
        case apns
        case fcm
        case huawei

        /// The provider whose requests carry these tokens.
        public var provider: Provider {
            switch self {
            case .apns: .apns
            case .fcm: .fcm
            case .huawei: .huawei
            }
        }
    }

    /// What to do with the current shared token.
    public enum Decision: Sendable, Equatable {
        /// Use the current token.
        case use
        /// Make a new token and replace the current one (or create the first).
        case mint
    }

    public let kind: Kind
    /// APNs: seconds after `issuedAt` a token is replaced. Unused for FCM and Huawei.
    public let refreshAfter: Double
    /// FCM and Huawei: seconds before `expiresAt` a token is replaced (capped at half the lifetime). Unused for APNs.
    public let refreshAhead: Double
    /// Seconds after `issuedAt` before which a token is never replaced, even when refused.
    public let minimumAge: Double

    /// APNs provider tokens.
    /// - Parameters:
    ///   - refreshAfter: seconds a token is reused (default 3000; values past 3600 are capped there).
    ///   - minimumAge: seconds between two tokens (default 1200, Apple's floor).
    public static func apns(refreshAfter: Double = 3000, minimumAge: Double = 1200) -> ProviderTokenPolicy {
        ProviderTokenPolicy(
            kind: .apns, refreshAfter: Self.finite(refreshAfter, or: 3000, maximum: 3600), refreshAhead: 0,
            minimumAge: Self.finite(minimumAge, or: 1200, maximum: 3600))
    }

    /// FCM access tokens.
    /// - Parameter refreshAhead: seconds before expiry a token is replaced (default 300).
    public static func fcm(refreshAhead: Double = 300) -> ProviderTokenPolicy {
        ProviderTokenPolicy(
            kind: .fcm, refreshAfter: 0, refreshAhead: Self.finite(refreshAhead, or: 300, maximum: 86_400), minimumAge: 0)
    }

    /// Huawei Push Kit access tokens (OAuth 2.0 client credentials).
    /// - Parameter refreshAhead: seconds before expiry a token is replaced (default 300).
    public static func huawei(refreshAhead: Double = 300) -> ProviderTokenPolicy {
        ProviderTokenPolicy(
            kind: .huawei, refreshAfter: 0, refreshAhead: Self.finite(refreshAhead, or: 300, maximum: 86_400), minimumAge: 0)
    }

    private static func finite(_ value: Double, or fallback: Double, maximum: Double) -> Double {
        value.isFinite ? min(max(value, 0), maximum) : fallback
    }

    private init(kind: Kind, refreshAfter: Double, refreshAhead: Double, minimumAge: Double) {
        self.kind = kind
        self.refreshAfter = refreshAfter
        self.refreshAhead = refreshAhead
        self.minimumAge = minimumAge
    }

    /// When `token` is due for replacement (never after its expiry).
    public func refreshAt(_ token: SharedProviderToken) -> Date {
        switch kind {
        case .apns:
            return min(token.issuedAt.addingTimeInterval(refreshAfter), token.expiresAt)
        case .fcm, .huawei:
            let lifetime = max(token.expiresAt.timeIntervalSince(token.issuedAt), 0)
            return token.expiresAt.addingTimeInterval(-min(refreshAhead, lifetime / 2))
        }
    }

    /// Whether `token` may be used at `now` without asking anyone: not yet due.
    public func isFresh(_ token: SharedProviderToken, at now: Date) -> Bool {
        now < refreshAt(token)
    }

    /// Whether the provider still accepts `token` at `now` (a due token still works while the refresh fails).
    public func isUnexpired(_ token: SharedProviderToken, at now: Date) -> Bool {
        now < token.expiresAt
    }

    /// Whether `token` is old enough to be replaced at `now` (APNs' 20-minute floor). A clock that went
    /// backwards (negative age) keeps the token.
    public func mayReplace(_ token: SharedProviderToken, at now: Date) -> Bool {
        now.timeIntervalSince(token.issuedAt) >= minimumAge || now >= token.expiresAt
    }

    /// The decision about the current token (`nil`: none yet) at `now`, for a caller that saw the provider
    /// refuse `rejected` (`nil`: no refusal, the caller's copy is merely due or missing).
    ///
    /// The replacement is conditional on the refused token still being current: when fifty callers report
    /// the same refused token, the first replaces it and the other forty-nine find a different token and
    /// use it. A refused or due token younger than `minimumAge` is kept (APNs: Apple would refuse a new one
    /// with `TooManyProviderTokenUpdates`; the sends wait for their retry).
    public func decide(current: SharedProviderToken?, rejected: String?, at now: Date) -> Decision {
        guard let current else { return .mint }
        if let rejected, current.token == rejected {
            return mayReplace(current, at: now) ? .mint : .use
        }
        if isFresh(current, at: now) { return .use }
        return mayReplace(current, at: now) ? .mint : .use
    }
}

/// Who a shared provider token belongs to: the SHA-256 fingerprint of the credential's identity (kind,
/// team or account, key id, public key: never the private key), and the key that seals the token in the
/// database. The sealing key is derived from the private key (HKDF-SHA256, RFC 5869, over its PKCS#8 DER
/// text), so a reader of `provider_tokens` who cannot read the credential learns nothing usable, and a row
/// written for another key (a rotated key kept under the same key id, a row copied between credentials)
/// fails to open and is never adopted. `description` shows the fingerprint only.
public struct ProviderTokenCredential: Sendable, CustomStringConvertible {
    public let kind: ProviderTokenPolicy.Kind
    /// Base64url (no padding) SHA-256 over the credential's public identity; the `provider_tokens` key.
    public let fingerprint: String
    private let sealingKey: [UInt8]

    /// An APNs team + key: fingerprint over `apns`, Team ID, Key ID and the public key (X9.63).
    /// - Throws: `CryptoError` when the key cannot be derived (OpenSSL failure).
    public init(apns credentials: APNsCredentials) throws {
        try self.init(
            kind: .apns,
            identity: [Provider.apns.rawValue, credentials.teamID, credentials.keyID, Base64URL.encode(credentials.privateKey.publicKey.x963Representation)],
            privateKeyPEM: credentials.privateKey.pkcs8PEM)
    }

    /// A Google service account: fingerprint over `fcm`, `client_email`, `private_key_id`, `token_uri` and
    /// the public key (PEM).
    /// - Throws: `CryptoError` when the key cannot be derived (OpenSSL failure).
    public init(fcm account: GoogleServiceAccount) throws {
        try self.init(
            kind: .fcm,
            identity: [Provider.fcm.rawValue, account.clientEmail, account.privateKeyID ?? "", account.tokenURI, account.privateKey.publicKey.pem],
            privateKeyPEM: account.privateKey.pkcs8PEM)
    }

    /// A Huawei OAuth 2.0 client: fingerprint over `huawei`, the client ID, the token endpoint and a verifier of
    /// the client secret (HKDF-SHA256 of the secret, 16 bytes, base64url; never the secret itself). Huawei issues
    /// the token to the client ID, and a client ID is no secret (it is the App ID), so the verifier keeps a channel
    /// that names another app's client with a wrong secret from ever using that app's token: its fingerprint, its
    /// row and its in-memory entry are its own, and its mint is refused. Every channel with the same client
    /// and secret shares one token. The sealing key is derived from the secret too.
    /// - Throws: `CryptoError` when the key cannot be derived (OpenSSL failure).
    public init(huawei credentials: HuaweiClientCredentials) throws {
        let verifier = try HKDFSHA256.deriveKey(
            inputKeyMaterial: Array(credentials.clientSecret.utf8), salt: Array("pushizo huawei client secret".utf8),
            info: Array(credentials.clientID.utf8), length: 16)
        try self.init(
            kind: .huawei,
            identity: [Provider.huawei.rawValue, credentials.clientID, credentials.tokenURI, Base64URL.encode(verifier)],
            privateKeyPEM: credentials.clientSecret)
    }

    /// - Parameter privateKeyPEM: the credential's secret the sealing key is derived from (a private key's PKCS#8
    ///   PEM, or a client secret).
    private init(kind: ProviderTokenPolicy.Kind, identity: [String], privateKeyPEM: String) throws {
        self.kind = kind
        // NUL-separated: no identity part contains a NUL, so distinct identities never hash the same text.
        fingerprint = Base64URL.encode(SHA256.hash(Array(identity.joined(separator: "\u{0}").utf8)))
        sealingKey = try HKDFSHA256.deriveKey(
            inputKeyMaterial: Array(privateKeyPEM.utf8), salt: Array("pushizo provider token".utf8),
            info: Array(fingerprint.utf8), length: 16)
    }

    /// `nonce (12 bytes) || AES-128-GCM(token) || tag (16 bytes)`, a fresh random nonce each time.
    /// - Throws: `CryptoError` when OpenSSL fails.
    public func seal(_ token: String) throws -> [UInt8] {
        let nonce = SecureRandom.bytes(12)
        return nonce + (try AES128GCM.seal(Array(token.utf8), key: sealingKey, nonce: nonce))
    }

    /// The token in `sealed`, or `nil` when it was not sealed by this credential (another key, a damaged
    /// or forged row) or is not visible ASCII.
    public func open(_ sealed: [UInt8]) -> String? {
        guard sealed.count > 12 + 16,
              let plain = try? AES128GCM.open(Array(sealed.dropFirst(12)), key: sealingKey, nonce: Array(sealed.prefix(12)))
        else { return nil }
        let token = String(decoding: plain, as: UTF8.self)
        return !token.isEmpty && token.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) ? token : nil
    }

    public var description: String { "ProviderTokenCredential(\(kind.rawValue), \(fingerprint))" }
}

extension APNsTokenManager {
    /// A new provider token for `teamID` + `keyID` made at `issuedAt` (whole seconds): header
    /// `{"alg":"ES256","kid":keyID}`, claims `{"iss":teamID,"iat":...}`, and its expiry (`iat` + 3600 s,
    /// Apple's lifetime).
    /// - Throws: `CryptoError` `.signingFailed` when OpenSSL cannot sign.
    public static func sign(teamID: String, keyID: String, privateKey: P256PrivateKey, issuedAt: Date) throws
        -> (token: String, issuedAt: Date, expiresAt: Date)
    {
        let iat = wholeSeconds(issuedAt.timeIntervalSince1970)
        let token = try JSONWebToken.signES256(
            header: ["kid": .string(keyID)], claims: ["iss": .string(teamID), "iat": .int(iat)], key: privateKey)
        let issued = Date(timeIntervalSince1970: Double(iat))
        return (token, issued, issued.addingTimeInterval(3600))
    }
}

/// A token a mint made: the bearer token, when it was made and when the provider stops accepting it.
public struct MintedProviderToken: Sendable {
    public var token: String
    public var issuedAt: Date
    public var expiresAt: Date

    public init(token: String, issuedAt: Date, expiresAt: Date) {
        self.token = token
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}
