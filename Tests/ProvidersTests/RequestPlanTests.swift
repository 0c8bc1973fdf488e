import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

/// The request plans driven with values: what each builds or records instead, and how it reads an answer.
@Suite struct RequestPlanTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let deviceToken = String(repeating: "ab", count: 32)

    func message(_ json: JSONValue = ["contents": ["en": "Hi"]]) throws -> NotificationMessage {
        try NotificationMessage(json: json)
    }

    func apnsDelivery(
        topic: String = "com.example.app", environment: String? = "sandbox", deviceToken: String = Self.deviceToken,
        message: NotificationMessage
    ) -> APNsDelivery {
        APNsDelivery(deviceToken: deviceToken, environment: environment, topic: topic, apnsID: UUID(), message: message,
                     subscriberLanguage: "en", appDefaultLanguage: "en", placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
    }

    /// `channel_error <reason>` for a channel error, else `<event> <reason>`.
    static func shape(_ outcome: DeliveryOutcome) -> String {
        if case .channelError(let reason, _, _) = outcome { return "channel_error \(reason.rawValue)" }
        return "\(outcome.eventName) \(outcome.reason?.rawValue ?? "-")"
    }

    func reason(_ planned: PlannedRequest) -> String {
        switch planned {
        case .send(_, let destination): "send \(destination)"
        case .record(let outcome): Self.shape(outcome)
        }
    }

    @Test func apnsTokenRequestGoesToAppleForTheEnvironmentOrTheChannelEndpoint() throws {
        let plan = APNsRequestPlan(topic: "com.example.app", usesChannelEndpoint: false)
        let authorization = APNsProviderAuthorization(bearerToken: "JWT")
        guard case .send(let request, .apnsSandbox) = plan.request(for: apnsDelivery(message: try message()), authorization: authorization) else {
            Issue.record("not sent to the sandbox")
            return
        }
        #expect(request.header("authorization") == "bearer JWT")
        #expect(reason(plan.request(for: apnsDelivery(environment: nil, message: try message()), authorization: authorization)) == "send apnsProduction")
        let overridden = APNsRequestPlan(topic: "com.example.app", usesChannelEndpoint: true)
        #expect(reason(overridden.request(for: apnsDelivery(message: try message()), authorization: authorization)) == "send channelEndpoint")
    }

    @Test func apnsRequestErrorsOfTheChannelPauseItAndTheMessagesFailIt() throws {
        let plan = APNsRequestPlan(topic: "bad topic", usesChannelEndpoint: false)
        #expect(reason(plan.request(for: apnsDelivery(topic: "bad topic", message: try message()), authorization: .init(bearerToken: "JWT")))
            == "channel_error invalid_topic")
        #expect(reason(plan.request(for: apnsDelivery(message: try message()), authorization: .init(bearerToken: "")))
            == "channel_error invalid_provider_token")
        #expect(reason(plan.request(for: apnsDelivery(deviceToken: "not-hex", message: try message()), authorization: .init(bearerToken: "JWT")))
            == "failed bad_device_token_format")
    }

    @Test func apnsAnswerRefusingTheTokenAsksForOneResend() {
        let plan = APNsRequestPlan(topic: "com.example.app", usesChannelEndpoint: false)
        let expired = PushResponse(status: 403, body: Array(#"{"reason":"ExpiredProviderToken"}"#.utf8))
        #expect(plan.judge(expired, subscriptionTokenUpdatedAt: nil, now: Self.now, resent: false) == .tokenRefused)
        guard case .judged(let answer) = plan.judge(expired, subscriptionTokenUpdatedAt: nil, now: Self.now, resent: true) else {
            Issue.record("a resend's refusal is not judged")
            return
        }
        #expect(Self.shape(answer.outcome) == "channel_error expired_provider_token")
        guard case .judged(let sent) = plan.judge(PushResponse(status: 200), subscriptionTokenUpdatedAt: nil, now: Self.now, resent: false) else {
            Issue.record("a 200 is not judged")
            return
        }
        #expect(sent.outcome.eventName == "sent")
    }

    @Test func apnsPublicSettingsNeedOnlyTheTopic() throws {
        #expect(try APNsRequestPlan(publicSettings: ["topic": "com.example.app"], usesChannelEndpoint: false).topic == "com.example.app")
        #expect(throws: ProviderConfigurationError.self) { try APNsRequestPlan(publicSettings: ["team_id": "T"], usesChannelEndpoint: false) }
    }

    func fcmDelivery(projectID: String = "p", token: String = "fcm-token") throws -> FCMDelivery {
        FCMDelivery(registrationToken: token, projectID: projectID, message: try message(), subscriberLanguage: "en",
                    appDefaultLanguage: "en", placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
    }

    @Test func fcmChannelErrorsPauseTheChannelOthersFailTheDelivery() throws {
        let plan = FCMRequestPlan(projectID: "p", usesChannelEndpoint: false)
        #expect(reason(plan.request(for: try fcmDelivery(), accessToken: "ya29")) == "send fcm")
        #expect(reason(FCMRequestPlan(projectID: "p", usesChannelEndpoint: true).request(for: try fcmDelivery(), accessToken: "ya29"))
            == "send channelEndpoint")
        #expect(reason(plan.request(for: try fcmDelivery(projectID: ""), accessToken: "ya29")) == "channel_error missing_project_id")
        #expect(reason(plan.request(for: try fcmDelivery(projectID: "p/q"), accessToken: "ya29")) == "channel_error invalid_project_id")
        #expect(reason(plan.request(for: try fcmDelivery(), accessToken: "")) == "channel_error invalid_access_token")
        #expect(reason(plan.request(for: try fcmDelivery(token: "bad token"), accessToken: "ya29")) == "failed bad_device_token_format")
    }

    @Test func fcmAnswerNeedingANewAccessTokenAsksForOneResend() {
        let plan = FCMRequestPlan(projectID: "p", usesChannelEndpoint: false)
        let unauthenticated = PushResponse(status: 401, body: Array(#"{"error":{"code":401,"status":"UNAUTHENTICATED"}}"#.utf8))
        #expect(plan.judge(unauthenticated, now: Self.now, resent: false) == .tokenRefused)
        #expect(plan.judge(unauthenticated, now: Self.now, resent: true) != .tokenRefused)
    }

    @Test func fcmPublicSettingsReadBothShapes() throws {
        #expect(try FCMRequestPlan.PublicSettings(["project_id": "p"]).projectID == "p")
        let nested = try FCMRequestPlan.PublicSettings(["service_account": ["project_id": "q", "token_uri": "https://oauth2.example/token"]])
        #expect(nested.projectID == "q" && nested.tokenURI == "https://oauth2.example/token")
        #expect(throws: ProviderConfigurationError.self) { try FCMRequestPlan.PublicSettings(["token_uri": "x"]) }
    }

    func webDelivery(_ endpoint: String) throws -> WebPushDelivery {
        WebPushDelivery(endpoint: endpoint, message: try message(), subscriberLanguage: "en", appDefaultLanguage: "en",
                        placeholderValues: nil, msgID: "M", campaignID: nil, now: Self.now)
    }

    @Test func webPushChecksTheEndpointBeforeRenderingAndSealsForThePushService() throws {
        let forbidden = DeliveryOutcome.failed(reason: .forbiddenEndpoint, detail: ["error": "refused"])
        let plan = WebPushRequestPlan(refusedEndpoint: forbidden) { $0 == "blocked.example" ? nil : $0 }
        let vapid = VAPIDTokenManager(privateKey: try P256PrivateKey.generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let subscriber = try P256PrivateKey.generate()
        let p256dh = Base64URL.encode(subscriber.publicKey.x963Representation)
        let auth = Base64URL.encode(SecureRandom.bytes(16))
        #expect(reason(plan.request(for: try webDelivery("https://push.example.net:8443/w/a"), p256dh: p256dh, auth: auth, vapid: vapid))
            == "send pushService(host: \"push.example.net\", port: 8443)")
        #expect(reason(plan.request(for: try webDelivery("https://blocked.example/w/a"), p256dh: p256dh, auth: auth, vapid: vapid))
            == "failed forbidden_endpoint")
        #expect(reason(plan.request(for: try webDelivery("http://push.example.net/w/a"), p256dh: p256dh, auth: auth, vapid: vapid))
            == "failed invalid_endpoint")
        #expect(reason(plan.request(for: try webDelivery("https://push.example.net/w/a"), p256dh: nil, auth: auth, vapid: vapid))
            == "failed invalid_subscription_keys")
        guard case .success(let plain) = plan.plaintextRequest(for: try webDelivery("https://push.example.net/w/a")) else {
            Issue.record("no plaintext request")
            return
        }
        #expect(plain.request.path == "/w/a" && plain.endpoint.origin == "https://push.example.net")
    }

    @Test func webPushJudgesEveryAnswer() {
        let plan = WebPushRequestPlan(refusedEndpoint: .sent(providerMessageID: nil)) { $0 }
        guard case .judged(let answer) = plan.judge(PushResponse(status: 401), now: Self.now) else {
            Issue.record("a 401 is not judged")
            return
        }
        #expect(answer.outcome.eventName == "failed")
    }
}
