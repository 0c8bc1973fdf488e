import DeliveryCore
import Foundation
import PushCrypto
import Synchronization

/// An app the Huawei Push Kit emulator knows: its App ID (also its OAuth 2.0 client ID) and client secret.
public struct HuaweiEmulatorApp: Sendable {
    public var appID: String
    public var clientSecret: String
    public init(appID: String, clientSecret: String) {
        self.appID = appID
        self.clientSecret = clientSecret
    }
}

/// One message the Huawei emulator accepted (answered `80000000`).
public struct HuaweiAcceptedMessage: Sendable, Hashable {
    public var receivedAt: Date
    public var appID: String
    /// The `requestId` answered.
    public var requestID: String
    public var token: String
    /// `message.data`, the string as sent (empty when absent).
    public var data: String
    /// `message.android` as compact sorted JSON text (`{}` when absent).
    public var androidJSON: String

    /// One JSON-lines record `{"at", "provider": "huawei", "request_id", "token", "data", "android"}`, keys sorted.
    public var jsonLine: String {
        let record: [String: Any] = [
            "at": ISO8601DateFormatter.string(from: receivedAt, timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "provider": "huawei", "request_id": requestID, "token": token, "data": data,
            "android": (try? JSONSerialization.jsonObject(with: Data(androidJSON.utf8))) ?? [:],
        ]
        let encoded = (try? JSONSerialization.data(withJSONObject: record, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return String(decoding: encoded, as: UTF8.self)
    }
}

/// Huawei's OAuth 2.0 token endpoint and Push Kit's v1 `messages:send`, for the ``HuaweiEmulatorApp``s given.
///
/// `POST /oauth2/v3/token` (`application/x-www-form-urlencoded`; Huawei, "Client Credentials"):
/// `grant_type=client_credentials`, `client_id` and `client_secret` of a known app. Else 400 `{"error": 1101,
/// "sub_error": <code>, "error_description"}` with Huawei's sub-errors: 20182 (`grant_type` incorrect), 20002
/// (`client_id` not `^[0-9]{1,64}$`), 20003 (no such client), 12304 (`client_secret` incorrect). Success:
/// `{"access_token", "expires_in": <tokenLifetime>, "token_type": "Bearer"}`.
///
/// `POST /v1/{appid}/messages:send` (Huawei, "Sending Messages"): an unknown App ID is 404 (Huawei: "Service
/// not found"); `authorization: Bearer <token>` issued here for that App ID and not expired, else 401 with
/// `80200001` (missing, or another app's token) or `80200003` (unknown or expired); a body
/// `{"validate_only"?: <bool>, "message": {"token": [1 to 1000 strings], "data"?: <string>, "android"?: {...}}}`
/// whose size without the tokens is at most 4096 bytes and whose `android.notification`, when present, has a
/// `click_action` object with an integer `type`, else 400 `80100003` (and `80300010` for the token count).
/// Then the push-token conventions of docs/emulator.md. Every answer's body is `{"code", "msg", "requestId"}`;
/// `validate_only: true` is answered `80000000` without being recorded.
public final class HuaweiEmulator: EmulatedProvider {
    public static let tokenPath = "/oauth2/v3/token"
    /// The send path's prefix; the route must come after FCM's `/v1/projects/`.
    public static let sendPathPrefix = "/v1/"
    /// The `retry-after` seconds answered with the traffic-control 503.
    public static let retryAfterSeconds = 1

    private let apps: [String: String]
    private let tokenLifetime: Int
    private let now: @Sendable () -> Date
    private let onAccept: (@Sendable (HuaweiAcceptedMessage) -> Void)?

    private struct State {
        /// Access token -> (App ID, expiry).
        var tokens: [String: (appID: String, expiry: Date)] = [:]
        var tokensIssuedByApp: [String: Int] = [:]
        var accepted: AcceptedRecords<HuaweiAcceptedMessage>
        var errorCounts: [String: Int] = [:]
        var once: Set<String> = []
        var requests = 0
    }

    private let state: Mutex<State>

    /// - Parameters:
    ///   - tokenLifetime: seconds an issued access token is valid (`expires_in`; Huawei uses 3600).
    ///   - now: the clock for token expiry.
    public init(apps: [HuaweiEmulatorApp], tokenLifetime: Int = 3600, retainLimit: Int = 10_000,
                now: @escaping @Sendable () -> Date = Date.init, onAccept: (@Sendable (HuaweiAcceptedMessage) -> Void)? = nil)
    {
        self.apps = Dictionary(apps.map { ($0.appID, $0.clientSecret) }, uniquingKeysWith: { first, _ in first })
        self.tokenLifetime = max(tokenLifetime, 1)
        self.state = Mutex(State(accepted: AcceptedRecords(retainLimit: retainLimit)))
        self.now = now
        self.onAccept = onAccept
    }

    /// How many access tokens were issued to the app `appID` (each one distinct).
    public func tokensIssued(to appID: String) -> Int { state.withLock { $0.tokensIssuedByApp[appID] ?? 0 } }
    public var acceptedCount: Int { state.withLock { $0.accepted.count } }
    public var acceptedMessages: [HuaweiAcceptedMessage] { state.withLock { $0.accepted.recent } }
    /// How many error answers were sent per result code (`80300007`, ...), or `http_<status>` without one.
    public var errorCounts: [String: Int] { state.withLock { $0.errorCounts } }

    /// Forgets every issued token, so the next sends get 401 `80200003` (as if the tokens expired).
    public func revokeAllTokens() { state.withLock { $0.tokens.removeAll() } }

    public func handle(_ request: EmulatorRequest) -> EmulatorResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        guard request.method == "POST" else { return Self.json(405, ["error": 1101, "error_description": "method not allowed"]) }
        if path == Self.tokenPath { return token(request) }
        if path.hasPrefix(Self.sendPathPrefix), path.hasSuffix("/messages:send") {
            return send(request, appID: String(path.dropFirst(Self.sendPathPrefix.count).dropLast("/messages:send".count)))
        }
        return answer(404, code: nil, "Service not found")
    }

    // MARK: token endpoint

    private func token(_ request: EmulatorRequest) -> EmulatorResponse {
        func refused(_ subError: Int, _ description: String) -> EmulatorResponse {
            Self.json(400, ["error": 1101, "sub_error": subError, "error_description": description])
        }
        guard request.header("content-type")?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return refused(20182, "content-type must be application/x-www-form-urlencoded")
        }
        let form = request.formFields
        guard form["grant_type"] == "client_credentials" else { return refused(20182, "invalid grant_type") }
        guard let clientID = form["client_id"], (1...64).contains(clientID.utf8.count),
              clientID.utf8.allSatisfy({ (48...57).contains($0) })
        else { return refused(20002, "invalid client_id") }
        guard let secret = apps[clientID] else { return refused(20003, "client_id not exist") }
        guard form["client_secret"] == secret else { return refused(12304, "client secret invalid") }
        var bytes = [UInt8](repeating: 0, count: 24)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
        let token = "DAEDA.emu-" + Base64URL.encode(bytes)
        let current = now()
        state.withLock { state in
            if state.tokens.count >= 65_536 { state.tokens = state.tokens.filter { $0.value.expiry > current } }
            state.tokens[token] = (clientID, current.addingTimeInterval(Double(tokenLifetime)))
            state.tokensIssuedByApp[clientID, default: 0] += 1
        }
        return Self.json(200, ["access_token": token, "expires_in": tokenLifetime, "token_type": "Bearer"])
    }

    // MARK: messages:send

    private func send(_ request: EmulatorRequest, appID: String) -> EmulatorResponse {
        let current = now()
        guard apps[appID] != nil else { return answer(404, code: nil, "Service not found") }
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else {
            return answer(401, code: "80200001", "Oauth authentication error")
        }
        let issued = state.withLock { $0.tokens[String(authorization.dropFirst(7))] }
        guard let issued, issued.expiry > current else { return answer(401, code: "80200003", "Oauth Token expired") }
        guard issued.appID == appID else { return answer(401, code: "80200001", "Oauth authentication error") }
        func structure(_ why: String) -> EmulatorResponse { answer(400, code: "80100003", "Incorrect message structure: \(why)") }
        guard let body = try? JSONValue(parsing: request.body), let message = body["message"]?.objectValue else {
            return structure("the body is not {\"message\": {...}}")
        }
        if let validateOnly = body["validate_only"], validateOnly.boolValue == nil { return structure("validate_only is not a boolean") }
        guard let tokens = message["token"]?.arrayValue, (1...1000).contains(tokens.count) else {
            return answer(400, code: "80300010", "The number of tokens in the message body exceeds the default value")
        }
        let tokenTexts = tokens.compactMap(\.stringValue)
        guard tokenTexts.count == tokens.count, tokenTexts.allSatisfy({ !$0.isEmpty }) else {
            return structure("message.token holds a value that is not a token")
        }
        let tokenBytes = tokenTexts.reduce(0) { $0 + JSONValue.string($1).serialized().count - 2 }
        guard request.body.count - tokenBytes <= 4096 else { return structure("the message body exceeds 4096 bytes") }
        if let data = message["data"], data.stringValue == nil { return structure("message.data is not a string") }
        var androidJSON = "{}"
        if let android = message["android"] {
            guard android.objectValue != nil else { return structure("message.android is not an object") }
            if let notification = android["notification"] {
                guard let type = notification["click_action"]?["type"], type.int64Value != nil else {
                    return structure("message.android.notification.click_action.type is required")
                }
            }
            androidJSON = android.jsonText
        }
        if tokenTexts.count == 1, let convention = tokenConvention(tokenTexts[0]) { return convention }
        let requestID = state.withLock { state -> String in
            state.requests += 1
            return String(Int64(current.timeIntervalSince1970 * 1000)) + String(state.requests)
        }
        if body["validate_only"]?.boolValue == true { return answer(200, code: "80000000", "Success", requestID: requestID) }
        for token in tokenTexts {
            let accepted = HuaweiAcceptedMessage(receivedAt: current, appID: appID, requestID: requestID, token: token,
                                                 data: message["data"]?.stringValue ?? "", androidJSON: androidJSON)
            state.withLock { $0.accepted.append(accepted) }
            onAccept?(accepted)
        }
        return answer(200, code: "80000000", "Success", requestID: requestID)
    }

    /// Push-token conventions (docs/emulator.md), by the token's prefix.
    private func tokenConvention(_ token: String) -> EmulatorResponse? {
        func once() -> Bool { state.withLock { $0.once.insert(token).inserted } }
        if token.hasPrefix("hms-invalid") { return answer(400, code: "80300007", "Token invalid error") }
        if token.hasPrefix("hms-illegal") {
            let msg = JSONValue.object([
                "success": .int(0), "failure": .int(1),
                "illegalTokens": .object(["tokenFormatError": .array([.string(token)])]),
            ])
            return answer(200, code: "80100000", msg.jsonText)
        }
        if token.hasPrefix("hms-busy"), once() {
            var response = answer(503, code: nil, "Traffic control")
            response.headers.append(EmulatorHeader("retry-after", String(Self.retryAfterSeconds)))
            return response
        }
        if token.hasPrefix("hms-internal") { return answer(500, code: nil, "Internal service error") }
        return nil
    }

    /// Push Kit's answer `{"code"?, "msg", "requestId"}`, counted by code (or `http_<status>`).
    private func answer(_ status: Int, code: String?, _ msg: String, requestID: String? = nil) -> EmulatorResponse {
        var object: [String: Any] = ["msg": msg, "requestId": requestID ?? "0"]
        if let code { object["code"] = code }
        if code != "80000000" { state.withLock { $0.errorCounts[code ?? "http_\(status)", default: 0] += 1 } }
        return Self.json(status, object)
    }

    static func json(_ status: Int, _ object: [String: Any]) -> EmulatorResponse {
        FCMEmulator.json(status, object)
    }
}
