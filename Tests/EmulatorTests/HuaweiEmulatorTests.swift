import DeliveryCore
import Foundation
import Providers
import Testing
@testable import Emulator

/// The Huawei emulator's token endpoint and `messages:send`, fed the real token request and request builder,
/// and its answers read back with the real token-answer reader and classifier.
@Suite struct HuaweiEmulatorTests {
    static let appID = "10086123"
    static let secret = "3f1c0ffee+/="
    let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
    let emulator: HuaweiEmulator

    init() {
        let clock = clock
        emulator = HuaweiEmulator(apps: [HuaweiEmulatorApp(appID: Self.appID, clientSecret: Self.secret),
                                         HuaweiEmulatorApp(appID: "20002", clientSecret: "other")],
                                  tokenLifetime: 60, now: { clock.now })
    }

    func credentials(appID: String = appID, secret: String = secret) throws -> HuaweiClientCredentials {
        try HuaweiClientCredentials(settings: ["app_id": .string(appID), "client_secret": .string(secret)])
    }

    func tokenAnswer(_ credentials: HuaweiClientCredentials) -> HuaweiClientCredentials.TokenAnswer {
        let response = emulator.handle(EmulatorRequest(
            method: "POST", path: HuaweiEmulator.tokenPath, authority: "oauth.example",
            headers: [EmulatorHeader("content-type", "application/x-www-form-urlencoded")],
            body: credentials.tokenRequestBody()))
        return HuaweiClientCredentials.tokenAnswer(status: response.status, body: response.body)
    }

    func accessToken(appID: String = appID, secret: String = secret) throws -> String {
        guard case .token(let token, let expiresIn) = tokenAnswer(try credentials(appID: appID, secret: secret)) else {
            throw CancellationError()
        }
        #expect(expiresIn == 60)
        return token
    }

    func send(_ pushToken: String, accessToken: String, appID: String = appID) throws -> PushResponse {
        let request = try HuaweiRequestFactory.makeRequest(
            HuaweiDelivery(pushToken: pushToken, appID: appID,
                           message: try NotificationMessage(json: ["headings": ["en": "Hi"], "contents": ["en": "There"]]),
                           msgID: "MSGID"),
            accessToken: accessToken)
        let response = emulator.handle(EmulatorRequest(
            method: request.method, path: request.path, authority: "push.example",
            headers: request.headers.map { EmulatorHeader($0.name, $0.value) }, body: request.body))
        return PushResponse(status: response.status, headers: response.headers.map { PushHeader($0.name, $0.value) },
                            body: response.body)
    }

    @Test func aPushIsAcceptedWithTheWorkersRequest() throws {
        let token = try accessToken()
        let answer = HuaweiResponseClassifier.answer(try send("IQAAAACy0kYk-device", accessToken: token))
        guard case .sent(let requestID) = answer.outcome else {
            Issue.record("the worker's request is accepted: \(answer)")
            return
        }
        #expect(requestID != nil)
        let accepted = try #require(emulator.acceptedMessages.first)
        #expect(accepted.token == "IQAAAACy0kYk-device")
        #expect(accepted.androidJSON == #"{"notification":{"body":"There","click_action":{"type":3},"title":"Hi"}}"#)
        #expect(accepted.data == #"{"on.msgId":"MSGID"}"#)
        #expect(emulator.tokensIssued(to: Self.appID) == 1)
    }

    @Test func tokenEndpointRefusesBadCredentialsAsHuaweiDoes() throws {
        #expect(tokenAnswer(try credentials(secret: "wrong")) == .refused(detail: ["status": 400, "error": 1101, "sub_error": 12304]))
        #expect(tokenAnswer(try credentials(appID: "999")) == .refused(detail: ["status": 400, "error": 1101, "sub_error": 20003]))
        #expect(emulator.tokensIssued(to: Self.appID) == 0)
    }

    @Test func tokenAnswersClassify() throws {
        let token = try accessToken()
        #expect(HuaweiResponseClassifier.answer(try send("hms-invalid-1", accessToken: token)).outcome.reason == .invalidToken)
        #expect(HuaweiResponseClassifier.answer(try send("hms-illegal-1", accessToken: token)).outcome.reason == .illegalToken)
        let busy = HuaweiResponseClassifier.answer(try send("hms-busy-1", accessToken: token))
        #expect(busy.fault == .transient)
        #expect(HuaweiResponseClassifier.answer(try send("hms-busy-1", accessToken: token)).fault == .accepted, "busy once")
        #expect(HuaweiResponseClassifier.answer(try send("hms-internal", accessToken: token)).fault == .transient)
    }

    @Test func expiredRevokedAndForeignTokensAreRefused() throws {
        let token = try accessToken()
        clock.advance(61)
        #expect(HuaweiResponseClassifier.requiresNewAccessToken(try send("device", accessToken: token)))
        let fresh = try accessToken()
        emulator.revokeAllTokens()
        #expect(HuaweiResponseClassifier.requiresNewAccessToken(try send("device", accessToken: fresh)))
        let foreign = try accessToken(appID: "20002", secret: "other")
        let answer = HuaweiResponseClassifier.answer(try send("device", accessToken: foreign))
        #expect(answer.outcome.reason == .oauthAuthenticationError)
        #expect(answer.fault == .channel)
        #expect(HuaweiResponseClassifier.answer(try send("device", accessToken: foreign, appID: "555")).outcome.reason == .notFound)
    }
}
