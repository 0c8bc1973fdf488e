import DeliveryCore
import Foundation

/// Turns a Huawei Push Kit `messages:send` answer into a ``DeliveryOutcome`` (Huawei, "Sending Messages" and
/// the Push Kit server result codes). No I/O.
///
/// Every answer's body is `{"code": "<8 digits>", "msg": "<text>", "requestId": "<id>"}`; the HTTP status is
/// coarser (400 for every parameter error, 401 for every authentication error, 503 for traffic control), so
/// the `code` decides first and the status only for a code this classifier does not name.
public enum HuaweiResponseClassifier {
    /// Push Kit bodies are small; larger ones are classified by status alone.
    public static let maximumBodySize = 65_536
    /// The deepest JSON nesting parsed; deeper bodies are not parsed.
    public static let maximumBodyDepth = 16
    /// The longest provider text kept in `detail` (`msg`), in characters.
    public static let maximumMessageLength = 200

    /// `80000000`: sent.
    public static let success = "80000000"
    /// `80100000`: "The message failed to be sent to some tokens" (`msg` names them).
    public static let partialSuccess = "80100000"
    /// `80200001`: "Oauth authentication error" (no `Authorization`, or an access token of another App ID).
    public static let oauthAuthenticationError = "80200001"
    /// `80200003`: "Oauth Token expired".
    public static let oauthTokenExpired = "80200003"
    /// `80300007`: "Token invalid error" (a malformed token, or one of another app).
    public static let invalidToken = "80300007"

    /// ``answer(_:now:)``'s outcome.
    public static func classify(_ response: PushResponse, now: Date = Date()) -> DeliveryOutcome {
        answer(response, now: now).outcome
    }

    /// The answer with its fault class (docs/provider-answers.md, "Huawei Push Kit"):
    /// - `80000000` with 200: `sent` with `requestId` (kept when visible ASCII of at most 256 characters).
    /// - `80300007` and `80100000` (the worker sends one token a request, so "some tokens" is this one):
    ///   `failed` `invalid_token` / `illegal_token`, fault ``ProviderFault/subscription``, suspecting the
    ///   channel (Huawei gives both for a token of another app, so every token answers so when the channel
    ///   holds another app's App ID); invalidates once the channel is proven by accepted sends
    ///   (``ProviderAnswer/invalidatesWhenCredentialsWork``).
    /// - `80200001` (the access token does not belong to the App ID of the path): `channelError`
    ///   `oauth_authentication_error`.
    /// - `80200003`, and a 401 without a code: the access token was refused; the sender replaces it once
    ///   fleet-wide and resends (``requiresNewAccessToken(_:)``), and records `channelError`
    ///   `oauth_token_expired` / `unauthenticated` only when the resend is refused too.
    /// - 404 (Huawei: "Service not found": the App ID of the path is unknown): `channelError` `not_found`.
    /// - 429, 500...599 (503 is Push Kit's traffic control): `retry` `http_<status>` (or `huawei_<code>` when
    ///   the body names one), `notBefore` from `Retry-After` (capped at 1 hour).
    /// - anything else (every other code, e.g. `80100003` "Incorrect message structure", `80100016` sensitive
    ///   content, `80300010` token count): `failed` `huawei_<code>` or `http_<status>`, fault
    ///   ``ProviderFault/delivery``.
    /// Every detail but a send's is `{"status": <int>, "huawei_code": "<8 digits>"?, "msg": "<text, at most
    /// 200 characters>"?, "request_id": "<id>"?}`; the `msg` of `80100000` is left out (it lists tokens).
    ///
    /// Hostile input never traps: a body over ``maximumBodySize`` bytes, nested deeper than
    /// ``maximumBodyDepth``, not UTF-8 or not JSON is classified by HTTP status alone (a 200 so is `failed`
    /// `http_200`: nothing says it was sent); a `code` that is not 1 to 16 ASCII digits is ignored; control
    /// characters are removed from `msg`.
    public static func answer(_ response: PushResponse, now: Date = Date()) -> ProviderAnswer {
        let body = HuaweiAnswerBody(response.body)
        if response.status == 200, body.code == success {
            return ProviderAnswer(.sent(providerMessageID: body.requestID), fault: .accepted)
        }
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let code = body.code { detail["huawei_code"] = .string(code) }
        if let message = body.message, body.code != partialSuccess { detail["msg"] = .string(message) }
        if let requestID = body.requestID { detail["request_id"] = .string(requestID) }
        let detailJSON = JSONValue.object(detail)
        let reason = body.code.map(DeliveryReason.huawei(code:)) ?? .http(status: response.status)

        switch body.code {
        case invalidToken, partialSuccess:
            return ProviderAnswer(
                .failed(reason: body.code == invalidToken ? .invalidToken : .illegalToken, detail: detailJSON),
                fault: .subscription, suspectsChannel: true, invalidatesWhenCredentialsWork: true)
        case oauthAuthenticationError:
            return ProviderAnswer(.channelError(reason: .oauthAuthenticationError, detail: detailJSON), fault: .channel)
        case oauthTokenExpired:
            return ProviderAnswer(.channelError(reason: .oauthTokenExpired, detail: detailJSON), fault: .channel)
        default:
            break
        }
        switch response.status {
        case 429, 500...599:
            return ProviderAnswer(
                .retry(reason: reason, detail: detailJSON, notBefore: RetryAfterHeader.notBefore(response, now: now)),
                fault: .transient)
        case 401:
            return ProviderAnswer(.channelError(reason: .unauthenticated, detail: detailJSON), fault: .channel)
        case 404:
            return ProviderAnswer(.channelError(reason: .notFound, detail: detailJSON), fault: .channel)
        default:
            return ProviderAnswer(.failed(reason: reason, detail: detailJSON), fault: .delivery)
        }
    }

    /// `true` for `80200003` ("Oauth Token expired") and for a 401 without a code: the sender reports the access
    /// token refused (it is replaced once fleet-wide, ``ProviderTokenPolicy/decide(current:rejected:at:)``)
    /// and resends once. `80200001` gives `false`: a token of another App ID comes back from the same
    /// credentials, so a new one cannot fix it.
    public static func requiresNewAccessToken(_ response: PushResponse) -> Bool {
        let code = HuaweiAnswerBody(response.body).code
        return code == oauthTokenExpired || (response.status == 401 && code == nil)
    }
}

/// What a Push Kit answer's body says, each part validated: `code` (1 to 16 ASCII digits), `msg` (control
/// characters removed, at most ``HuaweiResponseClassifier/maximumMessageLength`` characters, `nil` when
/// empty) and `requestId` (visible ASCII, at most 256 characters).
struct HuaweiAnswerBody {
    var code: String?
    var message: String?
    var requestID: String?

    init(_ bytes: [UInt8]) {
        guard !bytes.isEmpty, bytes.count <= HuaweiResponseClassifier.maximumBodySize,
              String(validating: bytes, as: UTF8.self) != nil,
              APNsResponseClassifier.nestingDepth(bytes) <= HuaweiResponseClassifier.maximumBodyDepth,
              let body = try? JSONValue(parsing: bytes)
        else { return }
        code = body["code"]?.stringValue.flatMap { text in
            (1...16).contains(text.utf8.count) && text.utf8.allSatisfy { (48...57).contains($0) } ? text : nil
        }
        message = body["msg"]?.stringValue.flatMap(FCMResponseClassifier.sanitizedMessage)
        requestID = body["requestId"]?.stringValue.flatMap {
            $0.utf8.count <= 256 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil
        }
    }
}
