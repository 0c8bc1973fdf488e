import Foundation
import Testing
import DeliveryCore
@testable import Providers

private let now = Date(timeIntervalSince1970: 1_784_000_000)

private func fcmError(_ http: Int, status: String, errorCode: String?, message: String = "m", extra: String = "") -> String {
    var details: [String] = []
    if let errorCode {
        details.append(#"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(errorCode)"}"#)
    }
    if !extra.isEmpty { details.append(extra) }
    return #"{"error":{"code":\#(http),"message":"\#(message)","status":"\#(status)","details":[\#(details.joined(separator: ","))]}}"#
}

private func response(_ status: Int, _ body: String = "", headers: [PushHeader] = []) -> PushResponse {
    PushResponse(status: status, headers: headers, body: Array(body.utf8))
}

/// The outcome's shape without detail, for table rows.
private func shape(_ outcome: DeliveryOutcome) -> String {
    switch outcome {
    case .sent(let id): "sent \(id ?? "-")"
    case .failed(let reason, _, let invalidate): "failed \(reason)\(invalidate ? " invalidate" : "")"
    case .retry(let reason, _, let notBefore): "retry \(reason) \(notBefore.map { String(Int($0.timeIntervalSince(now))) } ?? "-")"
    case .channelError(let reason, _, _): "channel \(reason)"
    case .skipped(let reason, _): "skipped \(reason)"
    case .deferred: "deferred"
    }
}

@Suite struct FCMResponseClassifierTests {
    static let table: [(PushResponse, String)] = [
        (response(200, #"{"name":"projects/demo/messages/0:1700000000%abc"}"#), "sent projects/demo/messages/0:1700000000%abc"),
        (response(200, "not json"), "sent -"),
        (response(200, #"{"name":"has space"}"#), "sent -"),
        (response(404, fcmError(404, status: "NOT_FOUND", errorCode: "UNREGISTERED")), "failed unregistered invalidate"),
        (response(403, fcmError(403, status: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH")), "failed sender_id_mismatch"),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", message: "Message is too big")),
         "failed invalid_argument"),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", extra:
            #"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"message.token","description":"bad"}]}"#)),
         "failed invalid_registration_token invalidate"),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", extra:
            #"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"message.android.ttl"}]}"#)),
         "failed invalid_argument"),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                                message: "The registration token is not a valid FCM registration token")),
         "failed invalid_registration_token invalidate"),
        (response(429, fcmError(429, status: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED"), headers: [PushHeader("Retry-After", "30")]),
         "retry quota_exceeded 30"),
        (response(503, fcmError(503, status: "UNAVAILABLE", errorCode: "UNAVAILABLE"), headers: [PushHeader("retry-after", "Tue, 14 Jul 2026 03:35:20 GMT")]),
         "retry unavailable 120"),
        (response(500, fcmError(500, status: "INTERNAL", errorCode: "INTERNAL"), headers: [PushHeader("retry-after", "99999999999999999999999")]),
         "retry internal 3600"),
        (response(500, fcmError(500, status: "INTERNAL", errorCode: "INTERNAL"), headers: [PushHeader("retry-after", "Wed, 13 Jul 2026 00:00:00 GMT")]),
         "retry internal -"),
        (response(502, "<html>bad gateway</html>"), "retry http_502 -"),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR")), "retry third_party_auth_error -"),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: "APNS_AUTH_ERROR")), "retry third_party_auth_error -"),
        (response(403, fcmError(403, status: "PERMISSION_DENIED", errorCode: nil)), "channel permission_denied"),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: nil)), "channel unauthenticated"),
        (response(401, ""), "channel unauthenticated"),
        (response(404, fcmError(404, status: "NOT_FOUND", errorCode: nil)), "channel not_found"),
        (response(400, #"{"error":{"status":"FAILED_PRECONDITION"}}"#), "failed failed_precondition"),
        (response(418, ""), "failed http_418"),
        (response(400, #"{"error":{"status":"lower case!"}}"#), "failed http_400"),
    ]

    @Test(arguments: 0..<table.count)
    func row(_ index: Int) {
        let (input, expected) = Self.table[index]
        #expect(shape(FCMResponseClassifier.classify(input, now: now)) == expected)
    }

    /// Every `google.firebase.fcm.v1.FcmError.ErrorCode` (and the statuses Google answers without one) with
    /// its fault class from docs/provider-answers.md; `true` marks an answer that suspects the channel.
    static let faults: [(PushResponse, ProviderFault, Bool)] = [
        (response(200, #"{"name":"projects/p/messages/1"}"#), .accepted, false),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "UNSPECIFIED_ERROR")), .delivery, false),
        (response(500, fcmError(500, status: "INTERNAL", errorCode: "UNSPECIFIED_ERROR")), .transient, false),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT")), .delivery, false),
        (response(400, fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                                message: "The registration token is not a valid FCM registration token")), .subscription, false),
        (response(404, fcmError(404, status: "NOT_FOUND", errorCode: "UNREGISTERED")), .subscription, false),
        (response(403, fcmError(403, status: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH")), .subscription, true),
        (response(429, fcmError(429, status: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED")), .transient, false),
        (response(503, fcmError(503, status: "UNAVAILABLE", errorCode: "UNAVAILABLE")), .transient, false),
        (response(500, fcmError(500, status: "INTERNAL", errorCode: "INTERNAL")), .transient, false),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR")), .partialCredential, false),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: "APNS_AUTH_ERROR")), .partialCredential, false),
        (response(403, fcmError(403, status: "PERMISSION_DENIED", errorCode: nil)), .channel, false),
        (response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: nil)), .channel, false),
        (response(404, fcmError(404, status: "NOT_FOUND", errorCode: nil)), .channel, false),
    ]

    @Test(arguments: 0..<faults.count)
    func faultClass(_ index: Int) {
        let (input, fault, suspect) = Self.faults[index]
        let answer = FCMResponseClassifier.answer(input, now: now)
        #expect(answer.fault == fault)
        #expect(answer.suspectsChannel == suspect)
        #expect(answer.invalidatesWhenCredentialsWork == suspect)
        #expect(answer.outcome == FCMResponseClassifier.classify(input, now: now))
    }

    @Test func detailCarriesCodesAndMessage() {
        let outcome = FCMResponseClassifier.classify(response(404, fcmError(404, status: "NOT_FOUND", errorCode: "UNREGISTERED",
                                                                            message: "Requested entity was not found.")), now: now)
        #expect(outcome == .failed(reason: .unregistered, detail: [
            "status": 404, "fcm_error": "UNREGISTERED", "fcm_status": "NOT_FOUND", "message": "Requested entity was not found.",
        ], invalidateSubscription: true))
    }

    @Test func requiresNewAccessTokenOnlyForPlainUnauthenticated() {
        #expect(FCMResponseClassifier.requiresNewAccessToken(response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: nil))))
        #expect(FCMResponseClassifier.requiresNewAccessToken(response(401, "")))
        #expect(!FCMResponseClassifier.requiresNewAccessToken(response(401, fcmError(401, status: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR"))))
        #expect(!FCMResponseClassifier.requiresNewAccessToken(response(403, fcmError(403, status: "PERMISSION_DENIED", errorCode: nil))))
        #expect(!FCMResponseClassifier.requiresNewAccessToken(response(200, "{}")))
    }

    @Test func hostileBodiesNeverTrap() {
        let deep = String(repeating: "[", count: 100_000)
        #expect(shape(FCMResponseClassifier.classify(response(404, deep), now: now)) == "channel not_found")
        let huge = #"{"error":{"status":"UNAVAILABLE","message":""# + String(repeating: "x", count: 70_000) + #""}}"#
        #expect(shape(FCMResponseClassifier.classify(response(503, huge), now: now)) == "retry http_503 -")
        let controls = fcmError(400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", message: #"a\u0000b\r\n"# + String(repeating: "y", count: 500))
        guard case .failed(_, let detail, _) = FCMResponseClassifier.classify(response(400, controls), now: now),
              let message = detail["message"]?.stringValue
        else { Issue.record("expected failed"); return }
        #expect(message.count == 200)
        #expect(message.hasPrefix("aby"))
        let invalidUTF8 = PushResponse(status: 404, body: [0x7B, 0xFF, 0xFE, 0x7D])
        #expect(shape(FCMResponseClassifier.classify(invalidUTF8, now: now)) == "channel not_found")
        let wrongTypes = #"{"error":{"details":"x","status":5,"message":[1]}}"#
        #expect(shape(FCMResponseClassifier.classify(response(500, wrongTypes), now: now)) == "retry http_500 -")
        let longCode = fcmError(500, status: "INTERNAL", errorCode: String(repeating: "A", count: 65))
        #expect(shape(FCMResponseClassifier.classify(response(500, longCode), now: now)) == "retry internal -")
    }
}

@Suite struct WebPushResponseClassifierTests {
    static let table: [(PushResponse, String)] = [
        (response(201, headers: [PushHeader("Location", "https://push.example/m/123")]), "sent https://push.example/m/123"),
        (response(201), "sent -"),
        (response(201, headers: [PushHeader("location", "bad value\r\n")]), "sent -"),
        (response(404), "failed unregistered invalidate"),
        (response(410, #"{"errno":106}"#), "failed unregistered invalidate"),
        (response(413), "failed payload_too_large"),
        (response(429, headers: [PushHeader("Retry-After", "10")]), "retry rate_limited 10"),
        (response(429, headers: [PushHeader("Retry-After", "Tue, 14 Jul 2026 03:37:00 GMT")]), "retry rate_limited 220"),
        (response(429, headers: [PushHeader("Retry-After", "soon")]), "retry rate_limited -"),
        (response(429, headers: [PushHeader("Retry-After", "Thu, 14 Jul 2026 25:35:20 GMT")]), "retry rate_limited -"),
        (response(429, headers: [PushHeader("Retry-After", "-5")]), "retry rate_limited -"),
        (response(400), "failed bad_request"),
        (response(401), "failed vapid_unauthorized"),
        (response(403), "failed vapid_forbidden"),
        (response(408), "retry request_timeout -"),
        (response(415), "failed unsupported_media_type"),
        (response(500), "retry http_500 -"),
        (response(503, headers: [PushHeader("Retry-After", "7200")]), "retry http_503 3600"),
        (response(302), "failed http_302"),
        (response(302, headers: [PushHeader("Retry-After", "30")]), "failed http_302"),
        // WNS throttles with 406 (Microsoft, "Push notification service request and response headers").
        (response(406, headers: [PushHeader("Retry-After", "900")]), "retry rate_limited 900"),
        (response(406, headers: [PushHeader("Retry-After", "Tue, 14 Jul 2026 03:37:00 GMT")]), "retry rate_limited 220"),
        (response(406, headers: [PushHeader("X-WNS-CONTINUE-AFTER", "120")]), "retry rate_limited 120"),
        (response(406, headers: [PushHeader("Retry-After", "60"), PushHeader("X-WNS-CONTINUE-AFTER", "120")]), "retry rate_limited 60"),
        (response(406, headers: [PushHeader("Retry-After", "86400")]), "retry rate_limited 3600"),
        (response(406, headers: [PushHeader("Retry-After", "soon"), PushHeader("X-WNS-CONTINUE-AFTER", "1.5")]), "retry rate_limited -"),
        (response(406), "retry rate_limited -"),
        // Any other 4xx that says when to come back is retried then (RFC 9110 §10.2.3)...
        (response(409, headers: [PushHeader("Retry-After", "30")]), "retry http_409 30"),
        (response(418, headers: [PushHeader("retry-after", "Tue, 14 Jul 2026 03:35:20 GMT")]), "retry http_418 120"),
        (response(451, headers: [PushHeader("Retry-After", "99999999999999999999999")]), "retry http_451 3600"),
        (response(409), "failed http_409"),
        (response(409, headers: [PushHeader("Retry-After", "Wed, 13 Jul 2026 00:00:00 GMT")]), "failed http_409"),
        (response(409, headers: [PushHeader("Retry-After", "")]), "failed http_409"),
        // ...but a status with a meaning of its own keeps it.
        (response(410, headers: [PushHeader("Retry-After", "30")]), "failed unregistered invalidate"),
        (response(404, headers: [PushHeader("Retry-After", "30")]), "failed unregistered invalidate"),
        (response(403, headers: [PushHeader("Retry-After", "30")]), "failed vapid_forbidden"),
        (response(401, headers: [PushHeader("Retry-After", "30")]), "failed vapid_unauthorized"),
        (response(400, headers: [PushHeader("Retry-After", "30")]), "failed bad_request"),
        (response(413, headers: [PushHeader("Retry-After", "30")]), "failed payload_too_large"),
        (response(415, headers: [PushHeader("Retry-After", "30")]), "failed unsupported_media_type"),
    ]

    @Test(arguments: 0..<table.count)
    func row(_ index: Int) {
        let (input, expected) = Self.table[index]
        #expect(shape(WebPushResponseClassifier.classify(input, now: now)) == expected)
    }

    /// The statuses of RFC 8030 §5 / §7 / §8.4 and RFC 8292 §4.2 with their fault class; `true` marks an
    /// answer that suspects the channel but, alone, fails only the delivery.
    static let faults: [(Int, ProviderFault, Bool)] = [
        (201, .accepted, false), (200, .accepted, false), (202, .accepted, false),
        (400, .delivery, true), (401, .delivery, true), (403, .subscription, true),
        (404, .subscription, false), (410, .subscription, false),
        (408, .transient, false), (429, .transient, false), (500, .transient, false), (503, .transient, false),
        (413, .delivery, false), (415, .delivery, false), (406, .transient, false), (302, .delivery, false),
        (409, .delivery, false),
    ]

    @Test(arguments: 0..<faults.count)
    func faultClass(_ index: Int) {
        let (status, fault, suspect) = Self.faults[index]
        let answer = WebPushResponseClassifier.answer(response(status), now: now)
        #expect(answer.fault == fault)
        #expect(answer.suspectsChannel == suspect)
        // No single Web Push answer pauses a channel or retries without end.
        if case .channelError = answer.outcome { Issue.record("\(status) must not pause the channel by itself") }
        #expect(!answer.invalidatesWhenCredentialsWork)
    }

    @Test func detailIsAShortCleanExcerpt() {
        let body = "\u{0}bad\u{7}" + String(repeating: "é", count: 1000)
        guard case .failed(_, let detail, false) = WebPushResponseClassifier.classify(response(403, body), now: now) else {
            Issue.record("expected a failure")
            return
        }
        #expect(detail["status"] == 403)
        let text = detail["body"]?.stringValue ?? ""
        #expect(text.hasPrefix("badé"))
        #expect(text.count == 200 - 2)
        let binary = PushResponse(status: 410, body: [UInt8](repeating: 0xFF, count: 100_000))
        #expect(shape(WebPushResponseClassifier.classify(binary, now: now)) == "failed unregistered invalidate")
    }

    @Test func imfFixdateParsesOnlyTheExactForm() {
        #expect(RetryAfterHeader.imfFixdate("Sun, 06 Nov 1994 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
        #expect(RetryAfterHeader.imfFixdate("Sunday, 06-Nov-94 08:49:37 GMT") == nil)
        #expect(RetryAfterHeader.imfFixdate("Sun, 31 Feb 1994 08:49:37 GMT") == nil)
        #expect(RetryAfterHeader.imfFixdate("Sun, 06 Nov 1994 08:49:37 UTC") == nil)
        #expect(RetryAfterHeader.imfFixdate("Xyz, 06 Nov 1994 08:49:37 GMT") == nil)
    }
}
