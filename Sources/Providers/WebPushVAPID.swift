import DeliveryCore
import Foundation
import PushCrypto
import Synchronization

/// Why VAPID settings or a VAPID header were refused.
public struct VAPIDError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The `sub` is not a `mailto:` or `https:` URI, or names a refused host.
        public static let invalidSubject = Code("invalid_subject")
        /// The audience is not an `https://host[:port]` origin.
        public static let invalidAudience = Code("invalid_audience")
        /// An `Authorization` header is not `vapid t=<jwt>, k=<key>`.
        public static let invalidHeader = Code("invalid_header")
        /// OpenSSL could not sign.
        public static let signingFailed = Code("signing_failed")
        public var description: String { name }
    }

    public var code: Code
    /// Human-readable; never contains a private key or a token.
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "VAPIDError(\(code)): \(message)" }
}

/// The VAPID `sub` claim (RFC 8292 §2.1): a contact URI for the application server, `mailto:` or `https:`.
///
/// Validated at check time so a channel cannot be saved with a contact push services reject: the scheme
/// must be `mailto` (one address `local@domain`) or `https` (with a host), and the host must not be
/// `localhost` (or under `.localhost`) nor end in `.local`, `.invalid` or `.test` (special-use names,
/// RFC 6761 / RFC 6762: no push service operator can reach them; Apple's push service refuses them).
public struct VAPIDSubject: Sendable, Hashable, CustomStringConvertible {
    /// The URI exactly as given (after trimming surrounding whitespace).
    public let value: String

    /// The longest subject accepted, in bytes.
    public static let maximumLength = 512
    /// Host suffixes refused (checked case-insensitively, after a trailing dot is removed).
    public static let refusedSuffixes = [".local", ".invalid", ".test", ".localhost"]
    /// Whole host names refused.
    public static let refusedHosts: Set<String> = ["localhost", "local", "invalid", "test"]

    /// - Throws: `VAPIDError` `.invalidSubject` naming what is wrong.
    public init(_ text: String) throws(VAPIDError) {
        func invalid(_ why: String) -> VAPIDError { VAPIDError(code: .invalidSubject, message: "the VAPID subject \(why)") }
        let value = text.trimmingCharacters(in: .whitespaces)
        guard !value.isEmpty else { throw invalid("is empty") }
        guard value.utf8.count <= Self.maximumLength else { throw invalid("is longer than \(Self.maximumLength) bytes") }
        guard HTTPFieldValue.isVisibleASCII(value) else { throw invalid("must be visible ASCII (percent-encode anything else)") }
        let lower = value.lowercased()
        let host: String
        if lower.hasPrefix("mailto:") {
            let address = String(value.dropFirst("mailto:".count).prefix { $0 != "?" })
            let parts = address.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, !address.contains(",") else {
                throw invalid("must be mailto: with one address user@domain")
            }
            host = String(parts[1])
        } else if lower.hasPrefix("https:") {
            guard let components = URLComponents(string: value), let parsedHost = components.host, !parsedHost.isEmpty else {
                throw invalid("must be an https: URL with a host")
            }
            guard components.user == nil, components.password == nil else { throw invalid("must not carry user info") }
            host = parsedHost
        } else {
            throw invalid("must be a mailto: or https: URI (RFC 8292 §2.1)")
        }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name.hasPrefix("[") { name = String(name.dropFirst().dropLast()) }
        guard !name.isEmpty, !Self.refusedHosts.contains(name), !Self.refusedSuffixes.contains(where: { name.hasSuffix($0) }) else {
            throw invalid("names a host push services refuse (localhost, .local, .invalid, .test)")
        }
        self.value = value
    }

    public var description: String { value }
}

/// VAPID `Authorization` headers (RFC 8292 §3): `vapid t=<ES256 JWT>, k=<base64url 65-byte public key>`,
/// one token per push-service origin, reused until it is near expiry.
///
/// Token: header `{"alg":"ES256","typ":"JWT"}` (RFC 8292 §2), claims `{"aud": origin, "exp": <whole UNIX
/// seconds>, "sub": subject}` serialized with sorted keys. `exp` is `floor(now) + lifetime`, `lifetime` at
/// most 12 h (RFC 8292 §2 allows 24 h; 12 h leaves room for skewed clocks at the push service).
///
/// Thread-safe: the cache lives in a `Mutex` and signing happens under it, so concurrent senders for one
/// origin make one token.
public final class VAPIDTokenManager: Sendable {
    /// The longest token lifetime accepted, in seconds (12 h).
    public static let maximumLifetime: Double = 43_200
    /// How many origins keep a cached token (least recently used dropped past it; its next request signs a
    /// new token). Real subscriptions use a handful of push services, so 64 only binds against a flood of
    /// subscriber-chosen origins: one manager holds at most 64 tokens of about 400 bytes.
    public static let maximumCachedOrigins = 64

    public let subject: VAPIDSubject
    private let privateKey: P256PrivateKey
    /// `k=`: the application server's public key, base64url of the 65-byte uncompressed point.
    public let publicKeyBase64URL: String
    private let lifetime: Double
    private let refreshMargin: Double
    private let now: @Sendable () -> Date

    private struct Entry {
        var token: String
        var expiresAt: Double
    }

    private let cache = Mutex(LRUCache<String, Entry>(capacity: VAPIDTokenManager.maximumCachedOrigins))

    /// Origins holding a cached token (at most ``maximumCachedOrigins``).
    public var cachedOrigins: Int { cache.withLock { $0.count } }

    /// - Parameters:
    ///   - privateKey: the app's VAPID key pair (P-256).
    ///   - lifetime: seconds from signing to `exp` (default and maximum 43,200 = 12 h; clamped to 60...12 h).
    ///   - refreshMargin: a cached token with fewer seconds than this left is replaced (default 3600 = 1 h;
    ///     clamped below `lifetime`).
    ///   - now: the clock (injectable for tests).
    public init(privateKey: P256PrivateKey, subject: VAPIDSubject, lifetime: Double = 43_200, refreshMargin: Double = 3600,
                now: @escaping @Sendable () -> Date = Date.init)
    {
        self.privateKey = privateKey
        self.subject = subject
        self.publicKeyBase64URL = Base64URL.encode(privateKey.publicKey.x963Representation)
        let lifetime = lifetime.isFinite ? min(max(lifetime, 60), Self.maximumLifetime) : Self.maximumLifetime
        self.lifetime = lifetime
        self.refreshMargin = refreshMargin.isFinite ? min(max(refreshMargin, 0), lifetime / 2) : lifetime / 2
        self.now = now
    }

    /// The `Authorization` header value for a push service at `origin` (``WebPushEndpoint/origin``).
    /// - Throws: `VAPIDError` `.invalidAudience`, `.signingFailed`.
    public func authorization(origin: String) throws(VAPIDError) -> String {
        "vapid t=\(try token(origin: origin)), k=\(publicKeyBase64URL)"
    }

    /// The header value for `endpoint`'s origin.
    public func authorization(for endpoint: WebPushEndpoint) throws(VAPIDError) -> String {
        try authorization(origin: endpoint.origin)
    }

    /// The JWT for `origin`: the cached one while more than `refreshMargin` seconds are left, else a new one.
    /// - Throws: `VAPIDError` `.invalidAudience` unless `origin` is `https://host[:port]` (lower-case,
    ///   visible ASCII, no path); `.signingFailed`.
    public func token(origin: String) throws(VAPIDError) -> String {
        guard Self.isOrigin(origin) else {
            throw VAPIDError(code: .invalidAudience, message: "the VAPID audience must be an https://host[:port] origin")
        }
        let current = now().timeIntervalSince1970
        let issued = current.isFinite ? current.rounded(.down) : 0
        let result: Result<String, VAPIDError> = cache.withLock { cache in
            if let entry = cache.value(forKey: origin), entry.expiresAt - issued > refreshMargin { return .success(entry.token) }
            let expiresAt = issued + lifetime
            let claims: [String: JWTValue] = [
                "aud": .string(origin), "exp": .int(APNsTokenManager.wholeSeconds(expiresAt)), "sub": .string(subject.value),
            ]
            let token: String
            do {
                token = try JSONWebToken.signES256(header: ["typ": "JWT"], claims: claims, key: privateKey)
            } catch {
                return .failure(VAPIDError(code: .signingFailed, message: "could not sign the VAPID token: \(error)"))
            }
            if !cache.contains(origin), cache.count >= Self.maximumCachedOrigins {
                // Stale tokens go first, then the least recently used one.
                cache.removeAll { $0.expiresAt - issued <= refreshMargin }
            }
            cache.insert(Entry(token: token, expiresAt: expiresAt), forKey: origin)
            return .success(token)
        }
        return try result.get()
    }

    /// `true` for `https://host` or `https://host:port` with a lower-case visible-ASCII host.
    static func isOrigin(_ origin: String) -> Bool {
        guard origin.hasPrefix("https://"), origin.utf8.count <= 300, HTTPFieldValue.isVisibleASCII(origin) else { return false }
        let authority = origin.dropFirst("https://".count)
        guard !authority.isEmpty, !authority.contains("/"), !authority.contains("?"), !authority.contains("#"),
              !authority.contains("@"), authority == authority.lowercased()
        else { return false }
        return true
    }

    /// Splits `vapid t=<jwt>, k=<key>` (RFC 8292 §3; parameters in either order, case-insensitive scheme
    /// and names, optional spaces) into the token and the decoded 65-byte public key. For the emulator's
    /// push service and tests; the signature is not checked here.
    /// - Throws: `VAPIDError` `.invalidHeader`.
    public static func parseAuthorization(_ value: String) throws(VAPIDError) -> (token: String, publicKey: [UInt8]) {
        func invalid(_ why: String) -> VAPIDError { VAPIDError(code: .invalidHeader, message: "the Authorization header \(why)") }
        guard value.utf8.count <= 4096 else { throw invalid("is too long") }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("vapid ") else { throw invalid("is not the vapid scheme") }
        var token: String?
        var key: String?
        for part in trimmed.dropFirst("vapid ".count).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            guard let equals = pair.firstIndex(of: "=") else { throw invalid("has a parameter without '='") }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let content = pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            switch name {
            case "t" where token == nil: token = content
            case "k" where key == nil: key = content
            default: throw invalid("has an unknown or repeated parameter")
            }
        }
        guard let token, !token.isEmpty else { throw invalid("has no t= token") }
        guard let key, let decoded = Base64URL.decode(key), decoded.count == 65, decoded[0] == 4 else {
            throw invalid("has no k= 65-byte P-256 public key")
        }
        return (token, decoded)
    }
}
