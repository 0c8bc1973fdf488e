import DeliveryCore
import Foundation
import PushCrypto
import Synchronization
import UUIDText

/// A provider-token signing key the APNs emulator trusts: the Team ID and Key ID a JWT must name, and the
/// public half of the `.p8` key.
public struct APNsEmulatorKey: Sendable {
    public var teamID: String
    public var keyID: String
    public var publicKey: P256PublicKey

    public init(teamID: String, keyID: String, publicKey: P256PublicKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.publicKey = publicKey
    }
}

/// One request the emulator accepted (answered 200), as recorded for inspection.
public struct APNsAcceptedNotification: Sendable, Hashable {
    public var receivedAt: Date
    public var apnsID: String
    public var deviceToken: String
    public var topic: String
    public var pushType: String
    public var priority: String?
    public var expiration: String?
    public var collapseID: String?
    /// The payload exactly as received (UTF-8 JSON).
    public var payload: [UInt8]

    /// One JSON-lines record: `{"at": RFC 3339 with ms, "apns_id", "token", "topic", "push_type",
    /// "priority"?, "expiration"?, "collapse_id"?, "payload": <the payload as JSON>}`, keys sorted,
    /// no trailing newline. The payload is written as received (it parsed as a JSON object before it was
    /// accepted); one with a line break between its tokens is written again compactly, so the record stays one line.
    ///
    /// Written directly rather than through `JSONSerialization`: the bench's latency runs log every request,
    /// and building the record through Foundation was half of the emulator's CPU, taken from the processes
    /// being measured on the same machine.
    public var jsonLine: String {
        var line: [UInt8] = []
        line.reserveCapacity(payload.count + 256)
        func member(_ key: String, _ value: String?, first: Bool = false) {
            guard let value else { return }
            if !first { line.append(UInt8(ascii: ",")) }
            JSONValue.appendString(key, to: &line)
            line.append(UInt8(ascii: ":"))
            JSONValue.appendString(value, to: &line)
        }
        line.append(UInt8(ascii: "{"))
        member("apns_id", apnsID, first: true)
        member("at", Self.timestampFormatter.string(from: receivedAt))
        member("collapse_id", collapseID)
        member("expiration", expiration)
        line.append(contentsOf: #","payload":"#.utf8)
        if payload.contains(where: { $0 == 0x0A || $0 == 0x0D }),
            let parsed = try? JSONSerialization.jsonObject(with: Data(payload)),
            let compact = try? JSONSerialization.data(withJSONObject: parsed, options: [.sortedKeys, .withoutEscapingSlashes])
        {
            line.append(contentsOf: compact)
        } else {
            line.append(contentsOf: payload)
        }
        member("priority", priority)
        member("push_type", pushType)
        member("token", deviceToken)
        member("topic", topic)
        line.append(UInt8(ascii: "}"))
        return String(decoding: line, as: UTF8.self)
    }

    nonisolated(unsafe) private static let timestampFormatter: ISO8601DateFormatter = {
        // ISO8601DateFormatter is documented thread-safe for formatting once configured.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()
}

/// The APNs provider API's behaviour (Apple: "Sending notification requests to APNs", "Handling
/// notification responses from APNs", "Establishing a token-based connection to APNs"), without
/// networking. Checks, in order, each failing with Apple's status and `{"reason": ...}`:
///
/// 1. `:method` POST (405 `MethodNotAllowed`); `:path` `/3/device/<token>` (404 `BadPath`, 400
///    `MissingDeviceToken`); the token 64...200 hex characters, even length (400 `BadDeviceToken`).
/// 2. A TLS client certificate, when the connection presented one (Apple: "Establishing a certificate-based
///    connection to APNs"): verified against the server's client CA and within its validity (403
///    `BadCertificate`), naming this emulator's environment when it names any (403 `BadCertificateEnvironment`),
///    later covering the `apns-topic` (400 `TopicDisallowed`); the provider token is then not checked. Otherwise
///    `authorization: bearer <JWT>` (403 `MissingProviderToken`): compact JWS, header `alg` `ES256` and a
///    known `kid`, claims `iss` equal to that key's team and an integer `iat`, a valid signature (403
///    `InvalidProviderToken`); `iat` older than one hour (403 `ExpiredProviderToken`).
/// 3. Headers: `apns-topic` (400 `MissingTopic`), `apns-push-type` one of Apple's types (400
///    `InvalidPushType`), the topic's suffix fitting the push type (`.voip` for `voip`,
///    `.push-type.liveactivity` for `liveactivity`, `.location-query`, `.voip-ptt`, `.complication`,
///    `.pushkit.fileprovider`, `.push-type.widgets`; none for `mdm`: 400 `InvalidPushType` without it, 400
///    `TopicDisallowed` for another type's suffix), `apns-priority` 1, 5 or 10 and not 10 for `background` (400 `BadPriority`),
///    `apns-id` a UUID (400 `BadMessageId`), `apns-expiration` an integer (400 `BadExpirationDate`),
///    `apns-collapse-id` at most 64 bytes (400 `BadCollapseId`), none of these repeated (400
///    `DuplicateHeaders`).
/// 4. Body: at most 4096 bytes, 5120 for `voip` (413 `PayloadTooLarge`); non-empty with an `aps` object, or a
///    non-empty object for `mdm` and `fileprovider` (``pushTypesWithoutAPS``) (400 `PayloadEmpty`); JSON (400
///    `BadPayload`, an emulator-only reason: Apple does not document one).
/// 5. Device-token conventions (docs/emulator.md): the first four hex digits pick an answer.
///
/// Everything else is accepted: 200 with `apns-id` and no body. Every answer, errors included, carries
/// `apns-id`: the request's when it is a UUID, else a new lower-case UUID (Apple: "If you don't specify an
/// apns-id field in your request, APNs creates a new UUID and returns it in this header"). There is no
/// `apns-unique-id`: Apple sends it only in the development environment, and the emulator answers as
/// production does.
public final class APNsEmulator: EmulatedProvider {
    /// Apple's `apns-push-type` values.
    public static let pushTypes: Set<String> = [
        "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets",
    ]
    /// Provider tokens older than this many seconds are `ExpiredProviderToken` (Apple: one hour).
    public static let tokenLifetime: Double = 3600

    private let keys: [String: APNsEmulatorKey]
    /// The environment this emulator plays (a certificate must name it when it names any).
    private let environment: ApplePushCertificate.Environment
    private let now: @Sendable () -> Date
    private let onAccept: (@Sendable (APNsAcceptedNotification) -> Void)?

    private struct State {
        var accepted: AcceptedRecords<APNsAcceptedNotification>
        var statusCounts: [Int: Int] = [:]
        /// apns-ids (or tokens, when a request has none) already answered 503 once.
        var unavailableOnce: Set<String> = []
        /// Provider tokens whose signature already verified, with their key's team and `iat`: clients reuse
        /// one token for up to an hour, so this saves an ECDSA verification per request (APNs caches too).
        var verifiedTokens: [String: (keyID: String, issuedAt: Int64)] = [:]
        /// Distinct provider tokens that verified, per Key ID (the first `maximumRememberedTokens` kept).
        var providerTokens: [String: Set<String>] = [:]
        /// Tokens answered `ExpiredProviderToken` whatever their age (``expireProviderTokens()``).
        var forcedExpired: Set<String> = []
        /// Fingerprints of client certificates accepted.
        var certificates: Set<String> = []
    }

    /// Distinct provider tokens remembered per key (memory bound; a client making more is broken anyway).
    public static let maximumRememberedTokens = 10_000

    private let state: Mutex<State>

    /// The Live Activity broadcast channels this emulator holds, with the broadcasts it accepted on them.
    public let broadcastChannels = APNsEmulatedChannels()

    /// - Parameters:
    ///   - keys: the signing keys to trust, looked up by `kid`.
    ///   - retainLimit: how many accepted requests ``acceptedNotifications`` keeps (the most recent).
    ///   - now: the clock for `iat` checks and `timestamp`s.
    ///   - onAccept: called (outside the lock) for every accepted request, e.g. to append
    ///     ``APNsAcceptedNotification/jsonLine`` to a file. It must not block for long.
    ///   - environment: the APNs environment played, for certificate-based connections (production: Apple's
    ///     `api.push.apple.com`).
    public init(keys: [APNsEmulatorKey], retainLimit: Int = 10_000, now: @escaping @Sendable () -> Date = Date.init,
                environment: ApplePushCertificate.Environment = .production,
                onAccept: (@Sendable (APNsAcceptedNotification) -> Void)? = nil)
    {
        self.environment = environment
        self.keys = Dictionary(keys.map { ($0.keyID, $0) }, uniquingKeysWith: { _, last in last })
        self.state = Mutex(State(accepted: AcceptedRecords(retainLimit: retainLimit)))
        self.now = now
        self.onAccept = onAccept
    }

    /// How many requests were answered 200.
    public var acceptedCount: Int { state.withLock { $0.accepted.count } }

    /// The most recent accepted requests (at most `retainLimit`), oldest first.
    public var acceptedNotifications: [APNsAcceptedNotification] { state.withLock { $0.accepted.recent } }

    /// How many distinct provider tokens signed with `keyID` verified here (expired ones included): a fleet
    /// sharing its token shows 1 per key and token lifetime.
    public func distinctProviderTokens(keyID: String) -> Int {
        state.withLock { $0.providerTokens[keyID]?.count ?? 0 }
    }

    /// From now on, every provider token seen so far is refused with 403 `ExpiredProviderToken` (as if its
    /// hour had passed); tokens made afterwards are accepted.
    public func expireProviderTokens() {
        state.withLock { state in
            for tokens in state.providerTokens.values { state.forcedExpired.formUnion(tokens) }
        }
    }

    /// How many responses were sent per status code.
    public var statusCounts: [Int: Int] { state.withLock { $0.statusCounts } }

    public func handle(_ request: EmulatorRequest) -> EmulatorResponse {
        let current = now()
        // Broadcast channels have their own paths (channel management, broadcasts): ``broadcastChannels``.
        if let answer = broadcastChannels.handle(request, at: current, checkToken: { [self] in
            checkProviderToken($0, at: $1).map { verdict in
                guard case .reject(let status, let reason, _) = verdict else { return (403, "InvalidProviderToken") }
                return (status, reason)
            }
        }) {
            state.withLock { $0.statusCounts[answer.status, default: 0] += 1 }
            return answer
        }
        let fields = APNsHeaderFields(request.headers)
        // Apple returns `apns-id` on every response, errors included: the request's, else a new UUID.
        let responseID = fields[.apnsID].flatMap { CanonicalUUIDText.parse($0) == nil ? nil : $0 } ?? UUID().uuidString.lowercased()
        let response: EmulatorResponse
        var accepted: APNsAcceptedNotification?
        switch evaluate(request, fields: fields, at: current, apnsID: responseID) {
        case .reject(let status, let reason, let timestamp):
            response = Self.error(status, reason, timestamp: timestamp, apnsID: responseID)
        case .accept(let notification):
            accepted = notification
            response = EmulatorResponse(status: 200, headers: [EmulatorHeader("apns-id", notification.apnsID)])
        }
        state.withLock { state in
            state.statusCounts[response.status, default: 0] += 1
            if let accepted { state.accepted.append(accepted) }
        }
        if let accepted { onAccept?(accepted) }
        return response
    }

    private enum Verdict {
        case reject(Int, String, timestamp: Date? = nil)
        case accept(APNsAcceptedNotification)
    }

    /// - Parameters:
    ///   - fields: the request's judged headers.
    ///   - responseID: the `apns-id` the answer carries: the request's exactly when that is a canonical UUID.
    private func evaluate(
        _ request: EmulatorRequest, fields: APNsHeaderFields, at current: Date, apnsID responseID: String
    ) -> Verdict {
        guard request.method == "POST" else { return .reject(405, "MethodNotAllowed") }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { return .reject(404, "BadPath") }
        let token = String(request.path.dropFirst(prefix.count))
        guard !token.isEmpty else { return .reject(400, "MissingDeviceToken") }
        guard APNsDeviceToken.isWellFormed(token) else {
            return .reject(400, "BadDeviceToken")
        }

        // Certificate-based connections carry no provider token (Apple: "Establishing a certificate-based
        // connection to APNs"); the certificate is judged instead.
        var certificate: ApplePushCertificate?
        if let presented = request.clientCertificate {
            switch checkCertificate(presented, at: current) {
            case .success(let apple): certificate = apple
            case .failure(let rejection): return rejection.verdict
            }
        }
        if request.clientCertificate == nil, let failure = checkProviderToken(fields[.authorization], at: current) {
            return failure
        }

        if fields.duplicated { return .reject(400, "DuplicateHeaders") }
        guard let topic = fields[.topic], !topic.isEmpty else { return .reject(400, "MissingTopic") }
        if let certificate, !certificate.allows(topic: topic) { return .reject(400, "TopicDisallowed") }
        guard let pushType = fields[.pushType], Self.pushTypes.contains(pushType) else {
            return .reject(400, "InvalidPushType")
        }
        if let mismatch = Self.checkTopicPairing(topic: topic, pushType: pushType) { return mismatch }
        let priority = fields[.priority]
        if let priority {
            guard ["1", "5", "10"].contains(priority) else { return .reject(400, "BadPriority") }
            if pushType == "background", priority == "10" { return .reject(400, "BadPriority") }
        }
        let apnsID = fields[.apnsID]
        // Parsed once, for the response's id: a request id the answer does not carry was not a UUID.
        if let apnsID, apnsID != responseID { return .reject(400, "BadMessageId") }
        let expiration = fields[.expiration]
        if let expiration, Int64(expiration) == nil { return .reject(400, "BadExpirationDate") }
        let collapseID = fields[.collapseID]
        if let collapseID, collapseID.utf8.count > 64 { return .reject(400, "BadCollapseId") }

        guard request.body.count <= (pushType == "voip" ? 5120 : 4096) else { return .reject(413, "PayloadTooLarge") }
        guard !request.body.isEmpty else { return .reject(400, "PayloadEmpty") }
        // A strict RFC 8259 parser (DeliveryCore's; the worker builds payloads with a writer, never this parser):
        // Foundation's `JSONSerialization` and its bridging to `Any` were a third of the emulator's CPU per request.
        guard case .object(let payload)? = try? JSONValue(validatingShallowly: request.body) else {
            return .reject(400, "BadPayload")
        }
        if !Self.pushTypesWithoutAPS.contains(pushType) {
            guard case .object? = payload["aps"] else { return .reject(400, "PayloadEmpty") }
        } else if payload.isEmpty {
            return .reject(400, "PayloadEmpty")
        }

        if let convention = tokenConvention(token, apnsID: apnsID, at: current) {
            return convention
        }
        return .accept(APNsAcceptedNotification(
            receivedAt: current, apnsID: responseID, deviceToken: token, topic: topic,
            pushType: pushType, priority: priority, expiration: expiration, collapseID: collapseID, payload: request.body))
    }

    /// The topic suffix each push type needs after the bundle id (Apple, "Sending notification requests to
    /// APNs", `apns-push-type`); the other types use the bare bundle id.
    public static let topicSuffixes: [String: String] = [
        "voip": ".voip", "liveactivity": ".push-type.liveactivity", "complication": ".complication",
        "fileprovider": ".pushkit.fileprovider", "location": ".location-query", "pushtotalk": ".voip-ptt",
        "widgets": ".push-type.widgets",
    ]

    /// The push types whose payload Apple documents without `aps`: `mdm` (`{"mdm":"<PushMagic>"}`, "Sending MDM
    /// commands to a device") and `fileprovider` (`{"container-identifier", "domain"?}`, "Using push
    /// notifications to signal changes"). Every other type's payload needs an `aps` dictionary.
    public static let pushTypesWithoutAPS: Set<String> = ["mdm", "fileprovider"]

    /// The push type / topic pairing Apple requires: a push type with a suffix needs a topic ending in it
    /// (400 `InvalidPushType`: the push type is not valid for the topic), and a topic ending in another type's
    /// suffix refuses every other push type (400 `TopicDisallowed`: e.g. an alert to `<bundle>.voip`, which
    /// would otherwise reach a PushKit token). APNs answers such requests from the certificate's or token's
    /// topics; the emulator knows no bundle ids, so it judges by the suffix alone.
    private static func checkTopicPairing(topic: String, pushType: String) -> Verdict? {
        if let suffix = topicSuffixes[pushType] {
            return topic.hasSuffix(suffix) && topic.count > suffix.count ? nil : .reject(400, "InvalidPushType")
        }
        for suffix in topicSuffixes.values where topic.hasSuffix(suffix) { return .reject(400, "TopicDisallowed") }
        return nil
    }

    private struct Rejection: Error {
        var verdict: Verdict
    }

    /// The certificate's Apple profile when it may push here: 403 `BadCertificate` when it did not verify against
    /// the emulator's client CA, is not DER or is outside its validity; 403 `BadCertificateEnvironment` when it
    /// names environments and not this one.
    private func checkCertificate(_ presented: EmulatorClientCertificate, at current: Date) -> Result<ApplePushCertificate, Rejection> {
        guard presented.verified, let facts = try? X509CertificateFacts(der: presented.der),
              facts.notBefore <= current, current < facts.notAfter
        else {
            return .failure(Rejection(verdict: .reject(403, "BadCertificate")))
        }
        let apple = ApplePushCertificate(facts)
        guard apple.serves(environment) else { return .failure(Rejection(verdict: .reject(403, "BadCertificateEnvironment"))) }
        state.withLock { state in
            if state.certificates.count < Self.maximumRememberedTokens { state.certificates.insert(facts.fingerprint) }
        }
        return .success(apple)
    }

    /// Distinct client certificates (SHA-256 fingerprints) that pushed here.
    public var certificateFingerprints: Set<String> { state.withLock { $0.certificates } }

    /// `nil` when the provider token is acceptable, else the rejection.
    private func checkProviderToken(_ authorization: String?, at current: Date) -> Verdict? {
        guard let authorization, !authorization.isEmpty else { return .reject(403, "MissingProviderToken") }
        // The scheme is case-insensitive (RFC 9110 §11.1); compared as bytes (`count` would walk grapheme clusters).
        let scheme = "bearer ".utf8
        guard authorization.utf8.count > scheme.count,
              zip(authorization.utf8, scheme).allSatisfy({ byte, wanted in (byte >= 65 && byte <= 90 ? byte | 0x20 : byte) == wanted })
        else {
            return .reject(403, "InvalidProviderToken")
        }
        // Optional whitespace around the credentials is SP / HTAB (RFC 9110 §5.6.3): trimmed byte by byte, not
        // with Foundation's Unicode `CharacterSet` (a bridged NSString per request, the emulator's largest cost).
        let jwt = String(Substring(authorization.utf8.dropFirst(scheme.count)).trimmingOptionalWhitespace())
        if let known = state.withLock({ $0.verifiedTokens[jwt] }), keys[known.keyID] != nil {
            return isExpired(jwt, known.issuedAt, at: current) ? .reject(403, "ExpiredProviderToken") : nil
        }
        guard let parts = try? JSONWebToken.decode(jwt),
              let header = try? JSONSerialization.jsonObject(with: Data(parts.header)) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: Data(parts.claims)) as? [String: Any],
              header["alg"] as? String == "ES256",
              let keyID = header["kid"] as? String, let key = keys[keyID],
              claims["iss"] as? String == key.teamID,
              let issuedAt = (claims["iat"] as? NSNumber).flatMap({ Int64(exactly: $0.doubleValue) }),
              key.publicKey.verifyES256(signature: parts.signature, for: parts.signingInput)
        else {
            return .reject(403, "InvalidProviderToken")
        }
        state.withLock { state in
            if state.verifiedTokens.count >= 1024 { state.verifiedTokens.removeAll(keepingCapacity: true) }
            state.verifiedTokens[jwt] = (keyID, issuedAt)
            if state.providerTokens[keyID, default: []].count < Self.maximumRememberedTokens {
                state.providerTokens[keyID, default: []].insert(jwt)
            }
        }
        return isExpired(jwt, issuedAt, at: current) ? .reject(403, "ExpiredProviderToken") : nil
    }

    private func isExpired(_ jwt: String, _ issuedAt: Int64, at current: Date) -> Bool {
        current.timeIntervalSince1970 - Double(issuedAt) > Self.tokenLifetime
            || state.withLock { !$0.forcedExpired.isEmpty && $0.forcedExpired.contains(jwt) }
    }

    /// The documented device-token conventions (docs/emulator.md), by the token's first four hex digits (all
    /// decimal digits, so letter case cannot matter). `0503` fails once per `apns-id` (else per token).
    private func tokenConvention(_ token: String, apnsID: String?, at current: Date) -> Verdict? {
        switch token.prefix(4) {
        case "0400": return .reject(400, "BadDeviceToken")
        case "0403": return .reject(400, "DeviceTokenNotForTopic")
        case "0410": return .reject(410, "Unregistered", timestamp: current)
        case "0411": return .reject(410, "ExpiredToken", timestamp: current)
        case "0413": return .reject(413, "PayloadTooLarge")
        case "0429": return .reject(429, "TooManyRequests")
        case "0500": return .reject(500, "InternalServerError")
        case "0503":
            let key = apnsID?.lowercased() ?? "token:\(token.lowercased())"
            let first = state.withLock { $0.unavailableOnce.insert(key).inserted }
            return first ? .reject(503, "ServiceUnavailable") : nil
        case "0599": return .reject(503, "ServiceUnavailable")
        default: return nil
        }
    }

    /// Apple's error answer ("Handling notification responses from APNs"): headers `content-type:
    /// application/json` and `apns-id`, body `{"reason": "<Reason>"}` plus `"timestamp"` (ms since epoch) on 410.
    static func error(_ status: Int, _ reason: String, timestamp: Date?, apnsID: String) -> EmulatorResponse {
        var body = #"{"reason":"\#(reason)""#
        if let timestamp { body += #","timestamp":\#(Int64((timestamp.timeIntervalSince1970 * 1000).rounded(.down)))"# }
        body += "}"
        return EmulatorResponse(
            status: status, headers: [EmulatorHeader("content-type", "application/json"), EmulatorHeader("apns-id", apnsID)],
            body: Array(body.utf8))
    }
}

/// The request headers APNs judges, found in one pass over the request's headers with whether any of them came
/// twice (400 `DuplicateHeaders`). A lookup per name was a scan of every header per name, twice (once to count).
private struct APNsHeaderFields {
    enum Field: Int, CaseIterable {
        case topic, pushType, priority, apnsID, expiration, collapseID, authorization

        var name: String {
            switch self {
            case .topic: "apns-topic"
            case .pushType: "apns-push-type"
            case .priority: "apns-priority"
            case .apnsID: "apns-id"
            case .expiration: "apns-expiration"
            case .collapseID: "apns-collapse-id"
            case .authorization: "authorization"
            }
        }
    }

    private var values = [String?](repeating: nil, count: Field.allCases.count)
    /// One of the fields appeared more than once.
    private(set) var duplicated = false

    init(_ headers: [EmulatorHeader]) {
        for header in headers {
            guard let field = Field.allCases.first(where: { header.isNamed($0.name) }) else { continue }
            if values[field.rawValue] == nil { values[field.rawValue] = header.value } else { duplicated = true }
        }
    }

    /// The first value of `field`, if it came.
    subscript(field: Field) -> String? { values[field.rawValue] }
}
