import DeliveryCore
import Foundation
import PushCrypto
import Synchronization

/// A trusted Google service account of the FCM emulator: its `client_email` and the public half of its key.
public struct FCMEmulatorAccount: Sendable {
    public var clientEmail: String
    public var publicKey: RSAPublicKey
    public init(clientEmail: String, publicKey: RSAPublicKey) {
        self.clientEmail = clientEmail
        self.publicKey = publicKey
    }
}

/// One message the FCM emulator accepted (answered 200).
public struct FCMAcceptedMessage: Sendable, Hashable {
    public var receivedAt: Date
    public var projectID: String
    /// `projects/<project>/messages/<id>`.
    public var name: String
    public var token: String
    public var data: [String: String]
    /// The `android` block as compact sorted JSON text (`{}` when absent).
    public var androidJSON: String
    /// `fcm_options.analytics_label`, when the message had one.
    public var analyticsLabel: String? = nil

    /// One JSON-lines record `{"at", "provider": "fcm", "name", "token", "data", "android", "analytics_label"?}`,
    /// keys sorted.
    public var jsonLine: String {
        var record: [String: Any] = [
            "at": ISO8601DateFormatter.string(from: receivedAt, timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "provider": "fcm", "name": name, "token": token, "data": data,
            "android": (try? JSONSerialization.jsonObject(with: Data(androidJSON.utf8))) ?? [:],
        ]
        if let analyticsLabel { record["analytics_label"] = analyticsLabel }
        let encoded = (try? JSONSerialization.data(withJSONObject: record, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return String(decoding: encoded, as: UTF8.self)
    }
}

/// Google's OAuth 2.0 token endpoint and FCM HTTP v1 `messages:send`, for service accounts configured as
/// ``FCMEmulatorAccount``s.
///
/// `POST /token` (`application/x-www-form-urlencoded`, RFC 7523 §2.1): `grant_type` the JWT-bearer URN;
/// `assertion` an RS256 JWT whose signature verifies with the `iss` account's key, `aud` = `https://<:authority>/token`,
/// `scope` containing `https://www.googleapis.com/auth/firebase.messaging`, integer `iat` within 5 minutes
/// of now and `exp` after now, at most 1 hour after `iat`. Else 400 `{"error": "invalid_grant", ...}`
/// (Google's shape). Success: `{"access_token", "expires_in": <tokenLifetime>, "token_type": "Bearer"}`.
///
/// `POST /v1/projects/{project}/messages:send`: `authorization: Bearer <token>` issued here and not
/// expired (else 401 `UNAUTHENTICATED`); body `{"message": {"token", "data"?, "android"?, "fcm_options"?}}` with every
/// `data` value a string, no reserved key (`from`, `notification`, `message_type`, and `google.` / `gcm.`
/// prefixes; FCM "Set message type"), and a payload of at most 4096 bytes counted as keys + values + 6 per
/// entry + 64 (the worker's rule, docs/fcm.md); `android.collapse_key` a string and `android.direct_boot_ok` a
/// boolean (FCM HTTP v1 `AndroidConfig`), `fcm_options` holding only `analytics_label`, a string matching
/// `^[a-zA-Z0-9-_.~%]{1,50}$` (`FcmOptions`); else 400 `INVALID_ARGUMENT`. Then the registration-token
/// conventions of docs/emulator.md. Errors are FCM's `google.rpc.Status` with a
/// `google.firebase.fcm.v1.FcmError` detail.
public final class FCMEmulator: EmulatedProvider {
    public static let tokenPath = "/token"
    public static let sendPathPrefix = "/v1/projects/"
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// The `retry-after` seconds answered with `QUOTA_EXCEEDED`.
    public static let retryAfterSeconds = 1

    private let accounts: [String: RSAPublicKey]
    private let tokenLifetime: Int
    private let now: @Sendable () -> Date
    private let onAccept: (@Sendable (FCMAcceptedMessage) -> Void)?

    private struct State {
        var tokens: [String: Date] = [:]
        var tokensIssued = 0
        var tokensIssuedByAccount: [String: Int] = [:]
        var accepted: AcceptedRecords<FCMAcceptedMessage>
        var errorCounts: [String: Int] = [:]
        var once: Set<String> = []
    }

    private let state: Mutex<State>

    /// - Parameters:
    ///   - tokenLifetime: seconds an issued access token is valid (`expires_in`; Google uses 3600).
    ///   - now: the clock for `iat`/`exp` and token expiry.
    public init(accounts: [FCMEmulatorAccount], tokenLifetime: Int = 3600, retainLimit: Int = 10_000,
                now: @escaping @Sendable () -> Date = Date.init, onAccept: (@Sendable (FCMAcceptedMessage) -> Void)? = nil)
    {
        self.accounts = Dictionary(accounts.map { ($0.clientEmail, $0.publicKey) }, uniquingKeysWith: { first, _ in first })
        self.tokenLifetime = max(tokenLifetime, 1)
        self.state = Mutex(State(accepted: AcceptedRecords(retainLimit: retainLimit)))
        self.now = now
        self.onAccept = onAccept
    }

    /// How many access tokens were issued.
    public var tokensIssued: Int { state.withLock { $0.tokensIssued } }
    /// How many access tokens were issued to the service account `clientEmail` (each one distinct).
    public func tokensIssued(to clientEmail: String) -> Int { state.withLock { $0.tokensIssuedByAccount[clientEmail] ?? 0 } }
    public var acceptedCount: Int { state.withLock { $0.accepted.count } }
    public var acceptedMessages: [FCMAcceptedMessage] { state.withLock { $0.accepted.recent } }
    /// How many error answers were sent per FCM code (`UNAUTHENTICATED`, `UNREGISTERED`, ...).
    public var errorCounts: [String: Int] { state.withLock { $0.errorCounts } }

    /// Forgets every issued token, so the next sends get 401 `UNAUTHENTICATED` (as if Google revoked them).
    public func revokeAllTokens() { state.withLock { $0.tokens.removeAll() } }

    public func handle(_ request: EmulatorRequest) -> EmulatorResponse {
        guard request.method == "POST" else { return Self.fcmError(405, "INVALID_ARGUMENT", nil, "method not allowed") }
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        if path == Self.tokenPath { return token(request) }
        if path.hasPrefix(Self.sendPathPrefix), path.hasSuffix("/messages:send") {
            let project = String(path.dropFirst(Self.sendPathPrefix.count).dropLast("/messages:send".count))
            let response = send(request, project: project)
            return response
        }
        return Self.fcmError(404, "NOT_FOUND", nil, "no such route")
    }

    // MARK: token endpoint

    private func token(_ request: EmulatorRequest) -> EmulatorResponse {
        let current = now()
        func grantError(_ description: String) -> EmulatorResponse {
            Self.json(400, ["error": "invalid_grant", "error_description": description])
        }
        guard request.header("content-type")?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return Self.json(400, ["error": "invalid_request", "error_description": "content-type must be application/x-www-form-urlencoded"])
        }
        let form = request.formFields
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return Self.json(400, ["error": "unsupported_grant_type", "error_description": "grant_type must be the JWT-bearer URN"])
        }
        guard let assertion = form["assertion"], let parts = try? JSONWebToken.decode(assertion),
              let header = try? JSONSerialization.jsonObject(with: Data(parts.header)) as? [String: Any],
              header["alg"] as? String == "RS256",
              let claims = try? JSONSerialization.jsonObject(with: Data(parts.claims)) as? [String: Any]
        else { return grantError("the assertion is not an RS256 JWT") }
        guard let iss = claims["iss"] as? String, let key = accounts[iss] else { return grantError("unknown iss") }
        guard key.verifyRS256(signature: parts.signature, for: parts.signingInput) else {
            return grantError("Invalid JWT Signature.")
        }
        var authority = request.authority.lowercased()
        if authority.hasSuffix(":443") { authority.removeLast(4) }
        guard claims["aud"] as? String == "https://\(authority)\(Self.tokenPath)" else { return grantError("bad aud") }
        guard let scope = claims["scope"] as? String, scope.split(separator: " ").contains(Substring(Self.scope)) else {
            return grantError("the scope does not include firebase.messaging")
        }
        guard let iat = (claims["iat"] as? NSNumber).flatMap({ Int64(exactly: $0.doubleValue) }),
              let exp = (claims["exp"] as? NSNumber).flatMap({ Int64(exactly: $0.doubleValue) })
        else { return grantError("iat and exp must be integers") }
        let seconds = Int64(current.timeIntervalSince1970)
        guard abs(iat - seconds) <= 300, exp > seconds, exp - iat <= 3600 else {
            return grantError("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
        }
        var bytes = [UInt8](repeating: 0, count: 24)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
        let token = "ya29.emu-" + Base64URL.encode(bytes)
        state.withLock { state in
            if state.tokens.count >= 65_536 { state.tokens = state.tokens.filter { $0.value > current } }
            state.tokens[token] = current.addingTimeInterval(Double(tokenLifetime))
            state.tokensIssued += 1
            state.tokensIssuedByAccount[iss, default: 0] += 1
        }
        return Self.json(200, ["access_token": token, "expires_in": tokenLifetime, "token_type": "Bearer"])
    }

    // MARK: messages:send

    private func send(_ request: EmulatorRequest, project: String) -> EmulatorResponse {
        let current = now()
        let response: EmulatorResponse
        var accepted: FCMAcceptedMessage?
        switch evaluate(request, project: project, at: current) {
        case .reject(let status, let code, let detailCode, let message, let headers):
            response = Self.fcmError(status, code, detailCode, message, headers: headers)
            state.withLock { $0.errorCounts[detailCode ?? code, default: 0] += 1 }
        case .fieldViolation(let field, let message):
            response = Self.badRequest(field: field, message: message)
            state.withLock { $0.errorCounts["INVALID_ARGUMENT", default: 0] += 1 }
        case .accept(let message):
            accepted = message
            response = Self.json(200, ["name": message.name])
            state.withLock { $0.accepted.append(message) }
        }
        if let accepted { onAccept?(accepted) }
        return response
    }

    private enum Verdict {
        /// HTTP status, `error.status`, the FcmError `errorCode` (if any), message, extra headers.
        case reject(Int, String, String?, String, [EmulatorHeader] = [])
        /// 400 `INVALID_ARGUMENT` with a `google.rpc.BadRequest` detail naming the field (no FcmError).
        case fieldViolation(field: String, message: String)
        case accept(FCMAcceptedMessage)
    }

    private func evaluate(_ request: EmulatorRequest, project: String, at current: Date) -> Verdict {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else {
            return .reject(401, "UNAUTHENTICATED", nil, "Request is missing required authentication credential.")
        }
        let bearer = String(authorization.dropFirst(7))
        let expiry = state.withLock { $0.tokens[bearer] }
        guard let expiry, expiry > current else {
            return .reject(401, "UNAUTHENTICATED", nil, "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        }
        guard !project.isEmpty, !project.contains("/") else { return .reject(404, "NOT_FOUND", nil, "unknown project") }
        func invalid(_ message: String) -> Verdict { .reject(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", message) }
        guard let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any],
              let message = body["message"] as? [String: Any]
        else { return invalid("the body is not {\"message\": {...}}") }
        guard let token = message["token"] as? String, !token.isEmpty else { return invalid("message.token is required") }
        for key in message.keys where !["token", "data", "android", "fcm_options"].contains(key) {
            return invalid("unexpected message field \(key) (pushizo sends data-only messages)")
        }
        var data: [String: String] = [:]
        if let raw = message["data"] {
            guard let object = raw as? [String: Any] else { return invalid("message.data is not an object") }
            for (index, key) in object.keys.sorted().enumerated() {
                let value = object[key]!
                guard let text = value as? String else {
                    let field = "message.data[\(index)].value"
                    return .fieldViolation(field: field, message: "Invalid value at '\(field)' (TYPE_STRING), \(Self.jsonText(value))")
                }
                if ["from", "notification", "message_type"].contains(key) || key.hasPrefix("google.") || key.hasPrefix("gcm.") {
                    return invalid("Invalid data payload key: \(key)")
                }
                data[key] = text
            }
        }
        let size = data.reduce(64) { $0 + $1.key.utf8.count + $1.value.utf8.count + 6 }
        guard size <= 4096 else { return invalid("Message is too big (\(size) bytes)") }
        var androidJSON = "{}"
        if let android = message["android"] {
            guard android is [String: Any],
                  let encoded = try? JSONSerialization.data(withJSONObject: android, options: [.sortedKeys, .withoutEscapingSlashes])
            else { return invalid("message.android is not an object") }
            androidJSON = String(decoding: encoded, as: UTF8.self)
        }
        var analyticsLabel: String?
        if message["android"] != nil || message["fcm_options"] != nil {
            // Typed again with DeliveryCore's parser: Foundation's bridging reads `1` as a Bool and `true` as a number.
            let typed = (try? JSONValue(parsing: request.body))?["message"]
            if let verdict = Self.checkOptions(typed, analyticsLabel: &analyticsLabel) { return verdict }
        }
        if let convention = tokenConvention(token) { return convention }
        return .accept(FCMAcceptedMessage(
            receivedAt: current, projectID: project, name: "projects/\(project)/messages/\(UUID().uuidString.lowercased())",
            token: token, data: data, androidJSON: androidJSON, analyticsLabel: analyticsLabel))
    }

    /// FCM HTTP v1's typed checks of the options the worker passes through: `android.collapse_key` a string,
    /// `android.direct_boot_ok` a boolean (`AndroidConfig`), `fcm_options.analytics_label` a string matching
    /// `^[a-zA-Z0-9-_.~%]{1,50}$` and no other `fcm_options` member (`FcmOptions`). A wrong type is Google's
    /// field violation (`Invalid value at 'message.android.direct_boot_ok' (TYPE_BOOL), ...`), an unknown member
    /// `Unknown name`, a label off the pattern a plain 400 `INVALID_ARGUMENT`.
    private static func checkOptions(_ message: JSONValue?, analyticsLabel: inout String?) -> Verdict? {
        func invalid(_ text: String) -> Verdict { .reject(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", text) }
        if let android = message?["android"] {
            if let collapse = android["collapse_key"], collapse.stringValue == nil {
                let field = "message.android.collapse_key"
                return .fieldViolation(field: field, message: "Invalid value at '\(field)' (TYPE_STRING), \(collapse.jsonText)")
            }
            if let directBoot = android["direct_boot_ok"], directBoot.boolValue == nil {
                let field = "message.android.direct_boot_ok"
                return .fieldViolation(field: field, message: "Invalid value at '\(field)' (TYPE_BOOL), \(directBoot.jsonText)")
            }
        }
        guard let options = message?["fcm_options"] else { return nil }
        guard let members = options.objectValue else { return invalid("message.fcm_options is not an object") }
        for key in members.keys where key != "analytics_label" {
            return invalid("Invalid JSON payload received. Unknown name \"\(key)\" at 'message.fcm_options': Cannot find field.")
        }
        guard let labelValue = members["analytics_label"] else { return nil }
        guard let label = labelValue.stringValue else {
            let field = "message.fcm_options.analytics_label"
            return .fieldViolation(field: field, message: "Invalid value at '\(field)' (TYPE_STRING), \(labelValue.jsonText)")
        }
        guard (1...NotificationMessage.maximumFCMAnalyticsLabelLength).contains(label.utf8.count),
              label.utf8.allSatisfy(NotificationMessage.isFCMAnalyticsLabelByte)
        else {
            return invalid("Invalid analytics_label: \(label) (must match ^[a-zA-Z0-9-_.~%]{1,50}$)")
        }
        analyticsLabel = label
        return nil
    }

    /// Registration-token conventions (docs/emulator.md), by the token's prefix.
    private func tokenConvention(_ token: String) -> Verdict? {
        func once() -> Bool { state.withLock { $0.once.insert(token).inserted } }
        if token.hasPrefix("fcm-unregistered") {
            return .reject(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found.")
        }
        if token.hasPrefix("fcm-sender-mismatch") {
            return .reject(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch")
        }
        if token.hasPrefix("fcm-invalid") {
            return .reject(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token")
        }
        if token.hasPrefix("fcm-quota"), once() {
            return .reject(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded for the device.",
                           [EmulatorHeader("retry-after", String(Self.retryAfterSeconds))])
        }
        if token.hasPrefix("fcm-unavailable"), once() {
            return .reject(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable.")
        }
        if token.hasPrefix("fcm-internal") {
            return .reject(500, "INTERNAL", "INTERNAL", "Internal error encountered.")
        }
        if token.hasPrefix("fcm-third-party-auth") {
            return .reject(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "Auth error from APNS or Web Push Service")
        }
        return nil
    }

    static func fcmError(_ status: Int, _ code: String, _ detailCode: String?, _ message: String,
                         headers: [EmulatorHeader] = []) -> EmulatorResponse
    {
        var error: [String: Any] = ["code": status, "message": message, "status": code]
        if let detailCode {
            error["details"] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": detailCode]]
        }
        var response = json(status, ["error": error])
        response.headers += headers
        return response
    }

    /// Google's answer to a field of the wrong type (FCM "Error codes", example 1): 400 `INVALID_ARGUMENT`
    /// whose `details` hold one `type.googleapis.com/google.rpc.BadRequest` with `fieldViolations`.
    static func badRequest(field: String, message: String) -> EmulatorResponse {
        json(400, ["error": [
            "code": 400, "message": message, "status": "INVALID_ARGUMENT",
            "details": [["@type": "type.googleapis.com/google.rpc.BadRequest",
                         "fieldViolations": [["field": field, "description": message]]]],
        ] as [String: Any]])
    }

    /// A JSON value as compact text (`12`, `true`, `{"a":1}`), for error messages.
    static func jsonText(_ value: Any) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed, .sortedKeys]) else { return "null" }
        return String(decoding: data, as: UTF8.self)
    }

    static func json(_ status: Int, _ object: [String: Any]) -> EmulatorResponse {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return EmulatorResponse(status: status, headers: [EmulatorHeader("content-type", "application/json; charset=UTF-8")], body: Array(body))
    }
}
