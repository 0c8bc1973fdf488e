import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// Push Kit's answers, classified as docs/provider-answers.md "Huawei Push Kit" says.
@Suite struct HuaweiResponseClassifierTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    static func response(_ status: Int, code: String?, msg: String = "x", headers: [PushHeader] = []) -> PushResponse {
        var body: [String: JSONValue] = ["msg": .string(msg), "requestId": "1700000000000001"]
        if let code { body["code"] = .string(code) }
        return PushResponse(status: status, headers: headers, body: JSONValue.object(body).serialized())
    }

    static func detail(_ outcome: DeliveryOutcome) -> JSONValue {
        switch outcome {
        case .failed(_, let detail, _), .retry(_, let detail, _), .channelError(_, let detail, _): detail
        default: .null
        }
    }

    @Test func successIsSentWithTheRequestID() {
        let answer = HuaweiResponseClassifier.answer(Self.response(200, code: "80000000", msg: "Success"), now: Self.now)
        #expect(answer == ProviderAnswer(.sent(providerMessageID: "1700000000000001"), fault: .accepted))
    }

    /// (status, code, reason, fault, suspect)
    static let table: [(Int, String?, String, ProviderFault, Bool)] = [
        (400, "80300007", "invalid_token", .subscription, true),
        (200, "80100000", "illegal_token", .subscription, true),
        (400, "80100000", "illegal_token", .subscription, true),
        (401, "80200001", "oauth_authentication_error", .channel, false),
        (401, "80200003", "oauth_token_expired", .channel, false),
        (401, nil, "unauthenticated", .channel, false),
        (404, nil, "not_found", .channel, false),
        (400, "80100003", "huawei_80100003", .delivery, false),
        (400, "80100016", "huawei_80100016", .delivery, false),
        (400, "80300010", "huawei_80300010", .delivery, false),
        (400, nil, "http_400", .delivery, false),
        (503, nil, "http_503", .transient, false),
        (502, nil, "http_502", .transient, false),
        (500, "81000001", "huawei_81000001", .transient, false),
        (429, nil, "http_429", .transient, false),
        (200, "80100003", "huawei_80100003", .delivery, false),
    ]

    @Test(arguments: 0..<table.count)
    func classifiesByCodeThenStatus(_ index: Int) {
        let (status, code, reason, fault, suspect) = Self.table[index]
        let answer = HuaweiResponseClassifier.answer(Self.response(status, code: code), now: Self.now)
        #expect(answer.fault == fault, "\(status) \(code ?? "-")")
        #expect(answer.suspectsChannel == suspect)
        #expect(answer.invalidatesWhenCredentialsWork == suspect, "a suspect token answer invalidates once the channel works")
        #expect(answer.outcome.reason?.rawValue == reason)
        if case .failed(_, _, let invalidates) = answer.outcome {
            #expect(!invalidates, "no Push Kit answer invalidates on its own: each may mean another app's App ID")
        }
    }

    @Test func trafficControlWaitsForRetryAfter() {
        let answer = HuaweiResponseClassifier.answer(
            Self.response(503, code: nil, headers: [PushHeader("retry-after", "120")]), now: Self.now)
        guard case .retry(_, _, let notBefore) = answer.outcome else {
            Issue.record("503 is Push Kit's traffic control: retried")
            return
        }
        #expect(notBefore == Self.now.addingTimeInterval(120))
    }

    @Test func detailCarriesTheCodeButNotThePartialAnswersTokens() {
        let invalid = HuaweiResponseClassifier.answer(Self.response(400, code: "80300007", msg: "Token invalid error"))
        #expect(Self.detail(invalid.outcome) == ["status": 400, "huawei_code": "80300007", "msg": "Token invalid error",
                                           "request_id": "1700000000000001"])
        let partial = HuaweiResponseClassifier.answer(Self.response(
            200, code: "80100000", msg: #"{"success":0,"failure":1,"illegal_tokens":["IQAAAACy0secret"]}"#))
        #expect(Self.detail(partial.outcome) == ["status": 200, "huawei_code": "80100000", "request_id": "1700000000000001"])
    }

    @Test func onlyAnExpiredOrMissingTokenAsksForANewAccessToken() {
        #expect(HuaweiResponseClassifier.requiresNewAccessToken(Self.response(401, code: "80200003")))
        #expect(HuaweiResponseClassifier.requiresNewAccessToken(PushResponse(status: 401)))
        #expect(!HuaweiResponseClassifier.requiresNewAccessToken(Self.response(401, code: "80200001")))
        #expect(!HuaweiResponseClassifier.requiresNewAccessToken(Self.response(400, code: "80300007")))
        let plan = HuaweiRequestPlan(appID: "10086", usesChannelEndpoint: false)
        #expect(plan.judge(Self.response(401, code: "80200003"), now: Self.now, resent: false) == .tokenRefused)
        #expect(plan.judge(Self.response(401, code: "80200003"), now: Self.now, resent: true)
            == .judged(HuaweiResponseClassifier.answer(Self.response(401, code: "80200003"), now: Self.now)))
    }

    @Test func hostileBodiesNeverTrap() {
        let cases: [PushResponse] = [
            PushResponse(status: 200, body: [0x7B, 0xFF, 0xFE, 0x7D]),
            PushResponse(status: 200, body: Array(repeating: UInt8(ascii: "["), count: 10_000)),
            PushResponse(status: 200, body: Array(#"{"code":80000000}"#.utf8)),
            PushResponse(status: 200, body: Array(#"{"code":"8000000x"}"#.utf8)),
            PushResponse(status: 200, body: [UInt8](repeating: 0x20, count: 100_000)),
            PushResponse(status: 200),
        ]
        for response in cases {
            let answer = HuaweiResponseClassifier.answer(response, now: Self.now)
            #expect(answer.outcome.reason == .http(status: 200), "a 200 that does not say 80000000 is not a send")
            #expect(answer.fault == .delivery)
        }
        let long = HuaweiResponseClassifier.answer(Self.response(400, code: "80100003", msg: String(repeating: "é\u{7}", count: 500)))
        #expect(Self.detail(long.outcome)["msg"]?.stringValue?.count == HuaweiResponseClassifier.maximumMessageLength)
    }
}
