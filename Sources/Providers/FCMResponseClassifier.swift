import DeliveryCore
import Foundation

/// Turns an FCM HTTP v1 `messages:send` response into a ``DeliveryOutcome`` (Firebase: "FCM HTTP v1 API
/// error codes", `google.firebase.fcm.v1.FcmError`). No I/O.
///
/// The error body is a `google.rpc.Status`:
///
///     {"error": {"code": 404, "message": "...", "status": "NOT_FOUND",
///                "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
///                             "errorCode": "UNREGISTERED"}, ...]}}
///
/// The FCM error code is read from `details[].errorCode` first (the top-level `status` is coarser:
/// `UNREGISTERED` arrives as `NOT_FOUND`, `THIRD_PARTY_AUTH_ERROR` as `UNAUTHENTICATED`), then
/// `error.status`.
public enum FCMResponseClassifier {
    /// FCM bodies are small; larger ones are classified by status alone.
    public static let maximumBodySize = 65_536
    /// The deepest JSON nesting parsed (FCM uses 5); deeper bodies are not parsed.
    public static let maximumBodyDepth = 16
    /// The longest provider text kept in `detail` (`message`), in characters.
    public static let maximumMessageLength = 200
    /// The longest `Retry-After` honoured, in seconds (1 hour).
    public static let maximumRetryAfter: Double = RetryAfterHeader.maximum
    /// The retry reason of `THIRD_PARTY_AUTH_ERROR` (and its older name `APNS_AUTH_ERROR`).
    public static let thirdPartyAuthError = DeliveryReason.thirdPartyAuthError

    /// The `@type` of FCM's own error detail.
    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    /// The `@type` of the detail that names the offending request field.
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"
    /// FCM's text for a malformed registration token (seen without a `BadRequest` detail).
    static let invalidTokenMessage = "The registration token is not a valid FCM registration token"

    /// ``answer(_:now:)``'s outcome.
    public static func classify(_ response: PushResponse, now: Date = Date()) -> DeliveryOutcome {
        answer(response, now: now).outcome
    }

    /// The answer with its fault class (docs/provider-answers.md, "FCM"):
    /// - 200: `sent` with the response's `name` (`projects/<id>/messages/<id>`; kept when visible ASCII of
    ///   at most 256 characters).
    /// - `UNREGISTERED` (404): `failed` `unregistered`, invalidating the subscription.
    /// - `SENDER_ID_MISMATCH` (403): `failed` `sender_id_mismatch`, subscription kept, suspecting the channel
    ///   (every token answers it when the channel holds another project's service account); it invalidates
    ///   once the account is proven by accepted sends (``ProviderAnswer/invalidatesWhenCredentialsWork``).
    /// - `INVALID_ARGUMENT` (400): `failed` `invalid_argument`, invalidating only when the registration token
    ///   itself is what is invalid: a `google.rpc.BadRequest` detail with a field violation whose `field`
    ///   is `message.token`, or `error.message` exactly FCM's "The registration token is not a valid FCM
    ///   registration token" (reason then `invalid_registration_token`). Any other invalid argument (payload
    ///   too big, bad TTL, ...) is the message's fault, not the subscriber's.
    /// - `QUOTA_EXCEEDED` (429), `UNAVAILABLE` (503), `INTERNAL` (500), and any other 429 / 5xx: `retry`,
    ///   `notBefore` from `Retry-After` (delta seconds or IMF-fixdate HTTP-date, capped at 1 hour).
    /// - `THIRD_PARTY_AUTH_ERROR` (401: "APNs certificate or web push auth key was invalid or missing";
    ///   `APNS_AUTH_ERROR` is its older name): `retry` ``thirdPartyAuthError`` without `notBefore`, fault
    ///   ``ProviderFault/partialCredential``. The credential it names carries only the pushes to Apple and web
    ///   apps of the Firebase project, so it is neither the channel's fault (Android tokens of the same
    ///   channel are sent) nor the subscription's: the worker holds that subscription (``CredentialHolds``).
    /// - `PERMISSION_DENIED` (403: the service account may not send for the project) and a 401
    ///   `UNAUTHENTICATED` (the access token was refused; the sender refreshes once first, see
    ///   ``requiresNewAccessToken(_:)``, and records this only when the retry is refused too): `channelError`,
    ///   subscription untouched. Each names the channel's credential.
    /// - 404 without an FCM `UNREGISTERED` detail (the channel's `project_id` is unknown): `channelError`
    ///   `not_found`.
    /// - anything else (`UNSPECIFIED_ERROR` included): `failed` with the lower-cased FCM code or
    ///   `http_<status>`.
    /// Every non-200 detail is `{"status": <int>, "fcm_error": "<errorCode>"?, "fcm_status": "<status>"?,
    /// "message": "<text, at most 200 characters>"?}`.
    ///
    /// Hostile input never traps: a body over ``maximumBodySize`` bytes, nested deeper than
    /// ``maximumBodyDepth``, not UTF-8 or not JSON is classified by HTTP status alone; codes that are not
    /// `[A-Z0-9_]{1,64}` are ignored; control characters are removed from `message`.
    public static func answer(_ response: PushResponse, now: Date = Date()) -> ProviderAnswer {
        let body = parseBody(response.body)
        if response.status == 200 {
            let name = body?["name"]?.stringValue.flatMap { $0.utf8.count <= 256 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil }
            return ProviderAnswer(.sent(providerMessageID: name), fault: .accepted)
        }
        let error = FCMError(body: body)
        var detail: [String: JSONValue] = ["status": .int(Int64(response.status))]
        if let code = error.errorCode { detail["fcm_error"] = .string(code) }
        if let status = error.status { detail["fcm_status"] = .string(status) }
        if let message = error.message { detail["message"] = .string(message) }
        let detailJSON = JSONValue.object(detail)
        let code = error.errorCode ?? error.status
        func retry(_ reason: DeliveryReason) -> ProviderAnswer {
            ProviderAnswer(
                .retry(reason: reason, detail: detailJSON, notBefore: RetryAfterHeader.notBefore(response, now: now)),
                fault: .transient)
        }
        func channel(_ reason: DeliveryReason) -> ProviderAnswer {
            ProviderAnswer(.channelError(reason: reason, detail: detailJSON), fault: .channel)
        }

        switch code {
        case "UNREGISTERED":
            return ProviderAnswer(
                .failed(reason: .unregistered, detail: detailJSON, invalidateSubscription: true), fault: .subscription)
        case "SENDER_ID_MISMATCH":
            return ProviderAnswer(
                .failed(reason: .senderIDMismatch, detail: detailJSON), fault: .subscription, suspectsChannel: true,
                invalidatesWhenCredentialsWork: true)
        case "INVALID_ARGUMENT":
            if error.tokenIsInvalid {
                return ProviderAnswer(
                    .failed(reason: .invalidRegistrationToken, detail: detailJSON, invalidateSubscription: true),
                    fault: .subscription)
            }
            return ProviderAnswer(.failed(reason: .invalidArgument, detail: detailJSON), fault: .delivery)
        case "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL":
            return retry(reason(code: code, status: response.status))
        case "THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR":
            return ProviderAnswer(.retry(reason: thirdPartyAuthError, detail: detailJSON), fault: .partialCredential)
        case "PERMISSION_DENIED", "UNAUTHENTICATED":
            return channel(reason(code: code, status: response.status))
        default:
            break
        }
        switch response.status {
        case 429, 500...599:
            return retry(reason(code: code, status: response.status))
        case 401:
            return channel(.unauthenticated)
        case 403:
            return channel(.permissionDenied)
        case 404:
            return channel(.notFound)
        default:
            return ProviderAnswer(.failed(reason: reason(code: code, status: response.status), detail: detailJSON), fault: .delivery)
        }
    }

    /// The reason FCM's `code` names, lower-cased (`QUOTA_EXCEEDED` -> `quota_exceeded`), or
    /// ``DeliveryReason/http(status:)`` without one.
    static func reason(code: String?, status: Int) -> DeliveryReason {
        code.map { DeliveryReason(rawValue: $0.lowercased()) } ?? .http(status: status)
    }

    /// `true` for a 401 whose FCM code is `UNAUTHENTICATED` or absent (the OAuth2 access token was refused,
    /// e.g. expired or revoked): the sender reports the token refused (it is replaced once fleet-wide, see
    /// ``ProviderTokenPolicy/decide(current:rejected:at:)``) and retries the send once. `THIRD_PARTY_AUTH_ERROR` (also a 401) gives `false`: a new token cannot
    /// fix it.
    public static func requiresNewAccessToken(_ response: PushResponse) -> Bool {
        guard response.status == 401 else { return false }
        let error = FCMError(body: parseBody(response.body))
        let code = error.errorCode ?? error.status
        return code == nil || code == "UNAUTHENTICATED"
    }

    /// What the error body says, each part validated.
    struct FCMError {
        var errorCode: String?
        var status: String?
        var message: String?
        var tokenIsInvalid = false

        init(body: JSONValue?) {
            guard let error = body?["error"] else { return }
            status = error["status"]?.stringValue.flatMap(FCMResponseClassifier.code)
            message = error["message"]?.stringValue.flatMap(FCMResponseClassifier.sanitizedMessage)
            let rawMessage = error["message"]?.stringValue
            for entry in (error["details"]?.arrayValue ?? []).prefix(32) {
                let type = entry["@type"]?.stringValue
                if type == fcmErrorType, errorCode == nil {
                    errorCode = entry["errorCode"]?.stringValue.flatMap(FCMResponseClassifier.code)
                }
                if type == badRequestType {
                    for violation in (entry["fieldViolations"]?.arrayValue ?? []).prefix(32)
                    where violation["field"]?.stringValue == "message.token" {
                        tokenIsInvalid = true
                    }
                }
            }
            if rawMessage == invalidTokenMessage { tokenIsInvalid = true }
        }
    }

    /// `text` when it looks like an FCM / gRPC code: 1 to 64 of `A-Z 0-9 _`.
    static func code(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= 64,
              text.utf8.allSatisfy({ (65...90).contains($0) || (48...57).contains($0) || $0 == 95 })
        else { return nil }
        return text
    }

    /// `text` without control characters, cut to ``maximumMessageLength`` characters; `nil` when empty.
    static func sanitizedMessage(_ text: String) -> String? {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars where !HTTPFieldValue.isControl(scalar) {
            scalars.append(scalar)
            if scalars.count >= maximumMessageLength { break }
        }
        let result = String(scalars).trimmingCharacters(in: .whitespaces)
        return result.isEmpty ? nil : result
    }

    /// The body as JSON, or `nil` when it is too large, not UTF-8, too deep or not JSON.
    static func parseBody(_ bytes: [UInt8]) -> JSONValue? {
        guard !bytes.isEmpty, bytes.count <= maximumBodySize, String(validating: bytes, as: UTF8.self) != nil,
              APNsResponseClassifier.nestingDepth(bytes) <= maximumBodyDepth
        else { return nil }
        return try? JSONValue(parsing: bytes)
    }
}
