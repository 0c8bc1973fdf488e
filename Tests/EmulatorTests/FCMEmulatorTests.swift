import DeliveryCore
import Foundation
import Providers
import PushCrypto
import Testing
@testable import Emulator

/// The FCM emulator's token endpoint and `messages:send`, fed the real assertion and request builders,
/// and its answers read back with the real classifier.
@Suite struct FCMEmulatorTests {
    static let email = "sa@proj.iam.gserviceaccount.com"
    static let tokenURI = "https://fcm.example:8443/token"
    let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
    let key: RSAPrivateKey
    let emulator: FCMEmulator

    init() throws {
        key = try RSAPrivateKey.generate()
        let clock = clock
        emulator = FCMEmulator(
            accounts: [FCMEmulatorAccount(clientEmail: Self.email, publicKey: key.publicKey)], tokenLifetime: 60,
            now: { clock.now })
    }

    func account(key: RSAPrivateKey? = nil, email: String = email, tokenURI: String = tokenURI) -> GoogleServiceAccount {
        GoogleServiceAccount(projectID: "proj", clientEmail: email, tokenURI: tokenURI, privateKey: key ?? self.key)
    }

    func tokenRequest(_ assertion: String, authority: String = "fcm.example:8443") -> EmulatorRequest {
        EmulatorRequest(
            method: "POST", path: "/token", authority: authority,
            headers: [EmulatorHeader("content-type", "application/x-www-form-urlencoded")],
            body: GoogleServiceAccount.tokenRequestBody(assertion: assertion))
    }

    /// Fetches an access token the way the worker does, parsed with the worker's parser.
    func accessToken() throws -> String {
        let response = emulator.handle(tokenRequest(try account().assertion(issuedAt: clock.now)))
        #expect(response.status == 200)
        let parsed = try GoogleServiceAccount.parseTokenResponse(response.body)
        #expect(parsed.expiresIn == 60)
        return parsed.accessToken
    }

    func send(_ token: String, accessToken: String, data: [String: JSONValue]? = nil) throws -> EmulatorResponse {
        var message = NotificationMessage()
        message.contents = ["en": "Hello"]
        message.data = data
        let delivery = FCMDelivery(registrationToken: token, projectID: "proj", message: message, msgID: "m1", now: clock.now)
        let request = try FCMRequestFactory.makeRequest(delivery, accessToken: accessToken)
        return emulator.handle(EmulatorRequest(
            method: request.method, path: request.path, authority: "fcm.example:8443",
            headers: request.headers.map { EmulatorHeader($0.name, $0.value) }, body: request.body))
    }

    func classify(_ response: EmulatorResponse) -> DeliveryOutcome {
        FCMResponseClassifier.classify(
            PushResponse(status: response.status, headers: response.headers.map { PushHeader($0.name, $0.value) }, body: response.body),
            now: clock.now)
    }

    @Test func issuesTokensForValidAssertionsAndAcceptsMessages() throws {
        let token = try accessToken()
        let response = try send("device-1", accessToken: token, data: ["order": 42])
        guard case .sent(let name?) = classify(response) else {
            Issue.record("expected sent with a name, got \(classify(response))")
            return
        }
        #expect(name.hasPrefix("projects/proj/messages/"))
        let accepted = try #require(emulator.acceptedMessages.first)
        #expect(accepted.token == "device-1")
        #expect(accepted.data["on.body"] == "Hello")
        #expect(accepted.data["on.d.order"] == "42")
        #expect(emulator.tokensIssued == 1)
    }

    @Test func refusesBadAssertions() throws {
        func error(_ response: EmulatorResponse) -> String? {
            (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["error"] as? String
        }
        let stranger = try RSAPrivateKey.generate()
        let cases: [EmulatorRequest] = [
            tokenRequest(try account(key: stranger).assertion(issuedAt: clock.now)),  // signature
            tokenRequest(try account(email: "other@x.example").assertion(issuedAt: clock.now)),  // unknown iss
            tokenRequest(try account(tokenURI: "https://elsewhere.example/token").assertion(issuedAt: clock.now)),  // aud
            tokenRequest(try account().assertion(issuedAt: clock.now.addingTimeInterval(-4000))),  // expired
            tokenRequest(try account().assertion(issuedAt: clock.now), authority: "other:8443"),  // aud vs authority
        ]
        for request in cases {
            let response = emulator.handle(request)
            #expect(response.status == 400)
            #expect(error(response) == "invalid_grant")
        }
        var wrongGrant = tokenRequest(try account().assertion(issuedAt: clock.now))
        wrongGrant.body = Array("grant_type=client_credentials".utf8)
        #expect(error(emulator.handle(wrongGrant)) == "unsupported_grant_type")
        #expect(emulator.tokensIssued == 0)
    }

    @Test func unknownOrExpiredBearerTokensAreUnauthenticated() throws {
        let unknown = try send("device-1", accessToken: "ya29.not-issued")
        #expect(unknown.status == 401)
        #expect(FCMResponseClassifier.requiresNewAccessToken(
            PushResponse(status: unknown.status, headers: [], body: unknown.body)))
        let token = try accessToken()
        #expect(try send("device-1", accessToken: token).status == 200)
        clock.advance(61)
        let expired = try send("device-1", accessToken: token)
        #expect(expired.status == 401)
        #expect(emulator.errorCounts["UNAUTHENTICATED"] == 2)
    }

    @Test func refusesWhatFCMRefuses() throws {
        let token = try accessToken()
        func raw(_ body: String) -> EmulatorResponse {
            emulator.handle(EmulatorRequest(
                method: "POST", path: "/v1/projects/proj/messages:send", authority: "fcm.example:8443",
                headers: [EmulatorHeader("authorization", "Bearer \(token)")], body: Array(body.utf8)))
        }
        #expect(raw(#"{"message": {"token": "t", "data": {"n": 1}}}"#).status == 400)  // not a string
        #expect(raw(#"{"message": {"token": "t", "data": {"google.x": "1"}}}"#).status == 400)  // reserved
        #expect(raw(#"{"message": {"token": "t", "data": {"from": "1"}}}"#).status == 400)  // reserved
        #expect(raw(#"{"message": {"token": "t", "notification": {"title": "x"}}}"#).status == 400)  // not data-only
        #expect(raw(#"{"message": {"data": {"a": "1"}}}"#).status == 400)  // no token
        let big = String(repeating: "x", count: 4096 - 64 - 6 - 1)
        #expect(raw(#"{"message": {"token": "t", "data": {"a": "\#(big)"}}}"#).status == 200)  // exactly 4096
        #expect(raw(#"{"message": {"token": "t", "data": {"a": "\#(big)x"}}}"#).status == 400)
        // The worker's own size rule agrees with the emulator's.
        #expect(FCMRequestFactory.payloadSize(of: ["a": big]) == 4096)
    }

    /// The options the worker passes through, checked as FCM HTTP v1 does (`AndroidConfig.collapse_key` and
    /// `direct_boot_ok`, `FcmOptions.analytics_label` with Firebase's pattern `^[a-zA-Z0-9-_.~%]{1,50}$`): 400
    /// `INVALID_ARGUMENT`, a field violation naming the member for a wrong type.
    @Test func checksThePassThroughOptions() throws {
        let token = try accessToken()
        func raw(_ message: String) -> (status: Int, text: String) {
            let response = emulator.handle(EmulatorRequest(
                method: "POST", path: "/v1/projects/proj/messages:send", authority: "fcm.example:8443",
                headers: [EmulatorHeader("authorization", "Bearer \(token)")], body: Array(#"{"message": {"token": "t", \#(message)}}"#.utf8)))
            return (response.status, String(decoding: response.body, as: UTF8.self))
        }
        let good = raw(#""android": {"collapse_key": "c", "direct_boot_ok": true}, "fcm_options": {"analytics_label": "a-Z_0.9~%"}"#)
        #expect(good.status == 200)
        let accepted = try #require(emulator.acceptedMessages.last)
        #expect(accepted.analyticsLabel == "a-Z_0.9~%")
        #expect(accepted.androidJSON == #"{"collapse_key":"c","direct_boot_ok":true}"#)
        #expect(accepted.jsonLine.contains(#""analytics_label":"a-Z_0.9~%""#))
        let bool = raw(#""android": {"direct_boot_ok": "yes"}"#)
        #expect(bool.status == 400)
        #expect(bool.text.contains("message.android.direct_boot_ok") && bool.text.contains("TYPE_BOOL"))
        #expect(raw(#""android": {"direct_boot_ok": 1}"#).status == 400)
        #expect(raw(#""android": {"collapse_key": 5}"#).text.contains("message.android.collapse_key"))
        for label in ["", "has space", String(repeating: "a", count: 51), "a/b", "é"] {
            let answer = raw(#""fcm_options": {"analytics_label": "\#(label)"}"#)
            #expect(answer.status == 400 && answer.text.contains("INVALID_ARGUMENT"), "\(label)")
        }
        #expect(raw(#""fcm_options": {"analytics_label": \#(String(repeating: "a", count: 50).debugDescription)}"#).status == 200)
        #expect(raw(#""fcm_options": {"analytics_label": 5}"#).text.contains("message.fcm_options.analytics_label"))
        #expect(raw(#""fcm_options": {"label": "x"}"#).text.contains("Unknown name"))
    }

    @Test func tokenConventionsGiveFCMsErrorShapes() throws {
        let token = try accessToken()
        func outcome(_ registration: String) throws -> DeliveryOutcome { classify(try send(registration, accessToken: token)) }
        guard case .failed(.unregistered, _, true) = try outcome("fcm-unregistered-a") else { Issue.record("unregistered"); return }
        guard case .failed(.senderIDMismatch, _, false) = try outcome("fcm-sender-mismatch-a") else { Issue.record("mismatch"); return }
        guard case .failed(.invalidRegistrationToken, _, true) = try outcome("fcm-invalid-a") else { Issue.record("invalid"); return }
        guard case .retry(.quotaExceeded, _, let notBefore?) = try outcome("fcm-quota-a") else { Issue.record("quota"); return }
        #expect(notBefore == clock.now.addingTimeInterval(Double(FCMEmulator.retryAfterSeconds)))
        guard case .sent = try outcome("fcm-quota-a") else { Issue.record("quota once"); return }
        guard case .retry(.unavailable, _, _) = try outcome("fcm-unavailable-a") else { Issue.record("unavailable"); return }
        guard case .sent = try outcome("fcm-unavailable-a") else { Issue.record("unavailable once"); return }
        guard case .retry(DeliveryReason.internal, _, _) = try outcome("fcm-internal-a") else { Issue.record("internal"); return }
        guard case .retry(DeliveryReason.internal, _, _) = try outcome("fcm-internal-a") else { Issue.record("internal always"); return }
        let thirdParty = try send("fcm-third-party-auth-a", accessToken: token)
        // Held per subscription by the worker, never a channel pause (docs/provider-answers.md).
        guard case .retry(.thirdPartyAuthError, _, nil) = classify(thirdParty) else { Issue.record("3p"); return }
        // A 401 a new token cannot fix.
        #expect(!FCMResponseClassifier.requiresNewAccessToken(
            PushResponse(status: thirdParty.status, headers: [], body: thirdParty.body)))
        let body = try #require(try JSONSerialization.jsonObject(with: Data(thirdParty.body)) as? [String: Any])
        let details = try #require((body["error"] as? [String: Any])?["details"] as? [[String: Any]])
        #expect(details.first?["@type"] as? String == "type.googleapis.com/google.firebase.fcm.v1.FcmError")
    }
}
