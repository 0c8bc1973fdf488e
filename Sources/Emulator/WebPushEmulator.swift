import Foundation
import PushCrypto
import Synchronization

/// One push message the Web Push emulator accepted (answered 201), with its decrypted plaintext.
public struct WebPushAcceptedMessage: Sendable, Hashable {
    public var receivedAt: Date
    public var subscriptionID: String
    /// The `location` answered: `https://<authority>/wpush-message/<uuid>`.
    public var location: String
    public var ttl: Int
    public var urgency: String?
    public var topic: String?
    /// The VAPID token's `sub` claim.
    public var subject: String
    /// The decrypted body (UTF-8 JSON).
    public var plaintext: [UInt8]

    /// One JSON-lines record: `{"at", "provider": "webpush", "subscription", "location", "ttl", "urgency"?,
    /// "topic"?, "sub", "payload": <the plaintext as JSON>}`, keys sorted, no trailing newline.
    public var jsonLine: String {
        var record: [String: Any] = [
            "at": ISO8601DateFormatter.string(from: receivedAt, timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "provider": "webpush", "subscription": subscriptionID, "location": location, "ttl": ttl, "sub": subject,
        ]
        if let urgency { record["urgency"] = urgency }
        if let topic { record["topic"] = topic }
        record["payload"] = (try? JSONSerialization.jsonObject(with: Data(plaintext))) ?? String(decoding: plaintext, as: UTF8.self)
        let data = (try? JSONSerialization.data(withJSONObject: record, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// A Web Push service (RFC 8030) with VAPID (RFC 8292) and message encryption (RFC 8291), for subscriptions
/// ``WebPushEmulatorSubscriptions`` derives from its seed. Checks, in order:
///
/// 1. `:method` POST (405); `:path` `/wpush/<id>`, `id` a valid subscription id (404).
/// 2. `authorization: vapid t=<JWT>, k=<key>` (RFC 8292 §3; 401 when missing or malformed): header `alg`
///    `ES256`, the signature verifies with `k`, `aud` equals `https://<:authority>` (`:443` dropped), `exp`
///    an integer in the future and at most 24 h ahead (RFC 8292 §2), `sub` a `mailto:` or `https:` URI;
///    anything else 401. (Real services differ between 401 and 403; 403 is a convention here.)
/// 3. `ttl` a non-negative integer (400, RFC 8030 §5.2); `urgency`, when present, one of `very-low`, `low`,
///    `normal`, `high` (400, RFC 8030 §5.3); `topic`, when present, valid (``isValidTopic(_:)``, 400, RFC 8030
///    §5.4); `content-encoding: aes128gcm` (415, RFC 8291 §4).
/// 4. Body at most 4096 bytes (413, RFC 8030 §7.2); decrypts with the subscription's key (400); the
///    plaintext is JSON (400; an emulator rule: pushizo always sends JSON); a Declarative Web Push message
///    (one with `web_push`) has the form Safari parses (``DeclarativeWebPushCheck``, 400; an emulator rule too).
/// 5. Subscription-id conventions (docs/emulator.md): the id's prefix picks an answer.
///
/// Else 201 with `location`. Error bodies are `{"code": <status>, "errno": <n>, "message": "..."}`
/// (Mozilla autopush's shape).
public final class WebPushEmulator: EmulatedProvider {
    /// The route prefix.
    public static let pathPrefix = "/wpush/"
    /// The longest VAPID token lifetime accepted, in seconds (RFC 8292 §2: 24 hours).
    public static let maximumTokenLifetime: Double = 86_400
    /// The `retry-after` seconds answered with a 429.
    public static let retryAfterSeconds = 1
    /// The `retry-after` seconds answered with a 406, as Microsoft's push service throttles.
    public static let throttleRetryAfterSeconds = 900

    private let subscriptions: WebPushEmulatorSubscriptions
    private let now: @Sendable () -> Date
    private let onAccept: (@Sendable (WebPushAcceptedMessage) -> Void)?

    private struct State {
        var accepted: AcceptedRecords<WebPushAcceptedMessage>
        var statusCounts: [Int: Int] = [:]
        var unavailableOnce: Set<String> = []
        var keys: [String: WebPushEmulatorSubscription] = [:]
        /// Tokens whose signature verified, with their `k`: one token serves many requests (RFC 8292 §2).
        var verifiedTokens: [String: [UInt8]] = [:]
        /// How many requests each distinct token carried (tests check reuse).
        var tokenUses: [String: Int] = [:]
    }

    private let state: Mutex<State>

    /// - Parameters:
    ///   - seed: the seed subscriptions are derived from (``WebPushEmulatorSubscriptions``).
    ///   - retainLimit: how many accepted messages ``acceptedMessages`` keeps (the most recent).
    ///   - now: the clock for `exp` checks.
    ///   - onAccept: called (outside the lock) for every accepted message; must not block for long.
    public init(seed: String, retainLimit: Int = 10_000, now: @escaping @Sendable () -> Date = Date.init,
                onAccept: (@Sendable (WebPushAcceptedMessage) -> Void)? = nil)
    {
        self.subscriptions = WebPushEmulatorSubscriptions(seed: seed)
        self.state = Mutex(State(accepted: AcceptedRecords(retainLimit: retainLimit)))
        self.now = now
        self.onAccept = onAccept
    }

    /// How many requests were answered 201.
    public var acceptedCount: Int { state.withLock { $0.accepted.count } }
    /// The most recent accepted messages, oldest first.
    public var acceptedMessages: [WebPushAcceptedMessage] { state.withLock { $0.accepted.recent } }
    /// How many responses were sent per status code.
    public var statusCounts: [Int: Int] { state.withLock { $0.statusCounts } }
    /// How many requests each distinct VAPID token (JWT) authorized.
    public var vapidTokenUses: [String: Int] { state.withLock { $0.tokenUses } }

    public func handle(_ request: EmulatorRequest) -> EmulatorResponse {
        let current = now()
        let response: EmulatorResponse
        var accepted: WebPushAcceptedMessage?
        switch evaluate(request, at: current) {
        case .reject(let status, let message, let headers):
            response = Self.error(status, message, headers: headers)
        case .accept(let message):
            accepted = message
            response = EmulatorResponse(status: 201, headers: [EmulatorHeader("location", message.location), EmulatorHeader("ttl", String(message.ttl))])
        }
        state.withLock { state in
            state.statusCounts[response.status, default: 0] += 1
            if let accepted { state.accepted.append(accepted) }
        }
        if let accepted { onAccept?(accepted) }
        return response
    }

    private enum Verdict {
        case reject(Int, String, [EmulatorHeader] = [])
        case accept(WebPushAcceptedMessage)
    }

    private func evaluate(_ request: EmulatorRequest, at current: Date) -> Verdict {
        guard request.method == "POST" else { return .reject(405, "method not allowed") }
        guard request.path.hasPrefix(Self.pathPrefix) else { return .reject(404, "no such subscription") }
        let id = String(request.path.dropFirst(Self.pathPrefix.count))
        guard WebPushEmulatorSubscriptions.isValidID(id), let subscription = subscription(id) else {
            return .reject(404, "no such subscription")
        }
        var authority = request.authority.lowercased()
        if authority.hasSuffix(":443") { authority.removeLast(4) }
        let origin = "https://\(authority)"
        let subject: String
        switch checkVAPID(request.header("authorization"), audience: origin, at: current) {
        case .failure(let refusal): return .reject(401, refusal.message)
        case .success(let sub): subject = sub
        }
        guard let ttlText = request.header("ttl"), let ttl = Int(ttlText), ttl >= 0 else {
            return .reject(400, "the ttl header is missing or not a non-negative integer")
        }
        if let urgency = request.header("urgency"), !Self.urgencies.contains(urgency) {
            return .reject(400, "the urgency header must be very-low, low, normal or high")
        }
        if let topic = request.header("topic"), !Self.isValidTopic(topic) {
            return .reject(400, "the topic header must be at most 32 characters of the URL-safe base64 alphabet and decode as base64url")
        }
        guard request.header("content-encoding")?.lowercased() == "aes128gcm" else {
            return .reject(415, "content-encoding must be aes128gcm")
        }
        guard request.body.count <= 4096 else { return .reject(413, "the body is over 4096 bytes") }
        guard let plaintext = try? WebPushEncryption.decrypt(
            body: request.body, userAgentPrivateKey: subscription.privateKey, authSecret: subscription.authSecret)
        else {
            return .reject(400, "the body does not decrypt with the subscription's keys")
        }
        guard (try? JSONSerialization.jsonObject(with: Data(plaintext))) != nil else {
            return .reject(400, "the plaintext is not JSON")
        }
        if let problem = DeclarativeWebPushCheck.problem(in: plaintext) {
            return .reject(400, "not a valid Declarative Web Push message: \(problem)")
        }
        if let convention = idConvention(id) { return convention }
        return .accept(WebPushAcceptedMessage(
            receivedAt: current, subscriptionID: id, location: "\(origin)/wpush-message/\(UUID().uuidString.lowercased())",
            ttl: ttl, urgency: request.header("urgency"), topic: request.header("topic"), subject: subject,
            plaintext: plaintext))
    }

    /// RFC 8030 §5.3's `urgency` values.
    public static let urgencies: Set<String> = ["very-low", "low", "normal", "high"]

    /// RFC 8030 §5.4: 1...32 characters of the URL-safe base64 alphabet; and a length that is not 1 mod 4,
    /// since Apple's service refuses a topic that does not decode as base64url (the strictest service wins).
    public static func isValidTopic(_ topic: String) -> Bool {
        let bytes = Array(topic.utf8)
        return (1...32).contains(bytes.count) && bytes.count % 4 != 1 && bytes.allSatisfy {
            ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2d || $0 == 0x5f
        }
    }

    private func subscription(_ id: String) -> WebPushEmulatorSubscription? {
        if let known = state.withLock({ $0.keys[id] }) { return known }
        guard let derived = try? subscriptions.subscription(id: id) else { return nil }
        state.withLock { state in
            if state.keys.count >= 65_536 { state.keys.removeAll(keepingCapacity: true) }
            state.keys[id] = derived
        }
        return derived
    }

    /// The token's `sub`, or why it is refused.
    private func checkVAPID(_ header: String?, audience: String, at current: Date) -> Result<String, VAPIDRefusal> {
        guard let header, !header.isEmpty else { return .failure(.init("missing VAPID authorization")) }
        guard let (token, publicKey) = Self.parseAuthorization(header) else {
            return .failure(.init("the authorization header is not vapid t=..., k=..."))
        }
        guard let parts = try? JSONWebToken.decode(token),
              let jwtHeader = try? JSONSerialization.jsonObject(with: Data(parts.header)) as? [String: Any],
              jwtHeader["alg"] as? String == "ES256",
              let claims = try? JSONSerialization.jsonObject(with: Data(parts.claims)) as? [String: Any]
        else {
            return .failure(.init("the VAPID token is not an ES256 JWT"))
        }
        let known = state.withLock { $0.verifiedTokens[token] }
        if known != publicKey {
            guard let key = try? P256PublicKey(x963: publicKey), key.verifyES256(signature: parts.signature, for: parts.signingInput) else {
                return .failure(.init("the VAPID signature does not verify with k"))
            }
            state.withLock { state in
                if state.verifiedTokens.count >= 1024 { state.verifiedTokens.removeAll(keepingCapacity: true) }
                state.verifiedTokens[token] = publicKey
            }
        }
        guard claims["aud"] as? String == audience else { return .failure(.init("the VAPID aud is not this push service's origin")) }
        guard let exp = (claims["exp"] as? NSNumber).flatMap({ Int64(exactly: $0.doubleValue) }) else {
            return .failure(.init("the VAPID exp is not an integer"))
        }
        let seconds = Double(exp) - current.timeIntervalSince1970
        guard seconds > 0 else { return .failure(.init("the VAPID token expired")) }
        guard seconds <= Self.maximumTokenLifetime else { return .failure(.init("the VAPID exp is more than 24 hours ahead")) }
        guard let sub = claims["sub"] as? String, sub.hasPrefix("mailto:") || sub.hasPrefix("https://") else {
            return .failure(.init("the VAPID sub is not a mailto: or https: URI"))
        }
        state.withLock { state in
            if state.tokenUses.count >= 1024 { state.tokenUses.removeAll(keepingCapacity: true) }
            state.tokenUses[token, default: 0] += 1
        }
        return .success(sub)
    }

    /// `vapid t=<jwt>, k=<base64url key>` (RFC 8292 §3; either order, case-insensitive names) -> the token
    /// and the 65-byte key; `nil` when malformed. Kept here so the emulator does not share the client's parser.
    static func parseAuthorization(_ value: String) -> (String, [UInt8])? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard value.utf8.count <= 4096, trimmed.lowercased().hasPrefix("vapid ") else { return nil }
        var token: String?
        var key: [UInt8]?
        for part in trimmed.dropFirst(6).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            guard let equals = pair.firstIndex(of: "=") else { return nil }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let content = pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            switch name {
            case "t" where token == nil: token = content
            case "k" where key == nil: key = Base64URL.decode(content)
            default: return nil
            }
        }
        guard let token, !token.isEmpty, let key, key.count == 65, key[0] == 4 else { return nil }
        return (token, key)
    }

    private struct VAPIDRefusal: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    /// The documented subscription-id conventions (docs/emulator.md), by the id's first four characters.
    private func idConvention(_ id: String) -> Verdict? {
        switch id.prefix(4) {
        case "e400": return .reject(400, "emulated bad request")
        case "e401": return .reject(401, "emulated unauthorized")
        case "e403": return .reject(403, "emulated forbidden")
        case "e404": return .reject(404, "emulated: subscription not found")
        case "e410": return .reject(410, "emulated: subscription gone")
        case "e413": return .reject(413, "emulated: payload too large")
        case "e429":
            // Once per subscription id, so a retry after `retry-after` goes through.
            let first = state.withLock { $0.unavailableOnce.insert(id).inserted }
            return first ? .reject(429, "emulated: too many requests", [EmulatorHeader("retry-after", String(Self.retryAfterSeconds))]) : nil
        case "e406":
            // Microsoft's push service (WNS) throttles with 406 Not Acceptable and a Retry-After; once per id.
            let first = state.withLock { $0.unavailableOnce.insert(id).inserted }
            return first
                ? .reject(406, "emulated: throttle limit exceeded", [EmulatorHeader("retry-after", String(Self.throttleRetryAfterSeconds))])
                : nil
        case "e500": return .reject(500, "emulated internal error")
        case "e503":
            let first = state.withLock { $0.unavailableOnce.insert(id).inserted }
            return first ? .reject(503, "emulated: unavailable once") : nil
        case "e599": return .reject(503, "emulated: always unavailable")
        default: return nil
        }
    }

    static func error(_ status: Int, _ message: String, headers: [EmulatorHeader]) -> EmulatorResponse {
        let errno = 100 + status % 100
        let object: [String: Any] = ["code": status, "errno": errno, "message": message]
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return EmulatorResponse(
            status: status, headers: [EmulatorHeader("content-type", "application/json")] + headers, body: Array(body))
    }
}
