import Foundation
import Testing
import DeliveryCore
@testable import Providers

@Suite struct APNsResponseClassifierTests {
    func response(_ status: Int, _ body: String = "", headers: [PushHeader] = []) -> PushResponse {
        PushResponse(status: status, headers: headers, body: Array(body.utf8))
    }

    @Test func sent() {
        let outcome = APNsResponseClassifier.classify(response(200, headers: [PushHeader("apns-id", "abc")]), subscriptionTokenUpdatedAt: nil)
        #expect(outcome == .sent(providerMessageID: "abc"))
    }

    @Test func unregisteredInvalidatesUnlessReRegistered() {
        let gone = response(410, #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        let detail: JSONValue = ["status": 410, "apns_reason": "Unregistered", "timestamp": 1_700_000_000_000]
        #expect(APNsResponseClassifier.classify(gone, subscriptionTokenUpdatedAt: nil)
            == .failed(reason: .unregistered, detail: detail, invalidateSubscription: true))
        #expect(APNsResponseClassifier.classify(gone, subscriptionTokenUpdatedAt: Date(timeIntervalSince1970: 1_699_999_000))
            == .failed(reason: .unregistered, detail: detail, invalidateSubscription: true))
        // Token registered again after APNs saw it go: fail this delivery, keep the subscription.
        #expect(APNsResponseClassifier.classify(gone, subscriptionTokenUpdatedAt: Date(timeIntervalSince1970: 1_700_000_001))
            == .failed(reason: .unregistered, detail: detail, invalidateSubscription: false))
        // No timestamp: cannot prove re-registration, invalidate.
        if case .failed(_, _, let invalidate) = APNsResponseClassifier.classify(response(410, #"{"reason":"Unregistered"}"#), subscriptionTokenUpdatedAt: Date()) {
            #expect(invalidate)
        } else {
            Issue.record("410 must fail")
        }
    }

    /// Every reason of Apple's "Handling notification responses from APNs", one row each, with its fault
    /// class (docs/provider-answers.md); `?` marks an answer that suspects the channel.
    static let table: [(status: Int, body: String, expected: String)] = [
        (400, #"{"reason":"BadCollapseId"}"#, "failed:bad_collapse_id delivery"),
        (400, #"{"reason":"BadDeviceToken"}"#, "failed:bad_device_token:invalidate subscription"),
        (400, #"{"reason":"BadExpirationDate"}"#, "failed:bad_expiration_date delivery"),
        (400, #"{"reason":"BadMessageId"}"#, "failed:bad_message_id delivery"),
        (400, #"{"reason":"BadPriority"}"#, "failed:bad_priority delivery"),
        (400, #"{"reason":"BadTopic"}"#, "channel:bad_topic channel"),
        (400, #"{"reason":"DeviceTokenNotForTopic"}"#, "failed:device_token_not_for_topic subscription?"),
        (400, #"{"reason":"DuplicateHeaders"}"#, "failed:duplicate_headers delivery"),
        (400, #"{"reason":"IdleTimeout"}"#, "retry:idle_timeout transient"),
        (400, #"{"reason":"InvalidPushType"}"#, "failed:invalid_push_type delivery"),
        (400, #"{"reason":"MissingDeviceToken"}"#, "failed:missing_device_token delivery"),
        (400, #"{"reason":"MissingTopic"}"#, "channel:missing_topic channel"),
        (400, #"{"reason":"PayloadEmpty"}"#, "failed:payload_empty delivery"),
        (400, #"{"reason":"TopicDisallowed"}"#, "channel:topic_disallowed channel"),
        (403, #"{"reason":"BadCertificate"}"#, "channel:bad_certificate channel"),
        (403, #"{"reason":"BadCertificateEnvironment"}"#, "channel:bad_certificate_environment channel"),
        (403, #"{"reason":"ExpiredProviderToken"}"#, "channel:expired_provider_token channel"),
        (403, #"{"reason":"Forbidden"}"#, "channel:forbidden channel"),
        (403, #"{"reason":"InvalidProviderToken"}"#, "channel:invalid_provider_token channel"),
        (403, #"{"reason":"MissingProviderToken"}"#, "channel:missing_provider_token channel"),
        (403, #"{"reason":"UnrelatedKeyIdInToken"}"#, "channel:unrelated_key_id_in_token channel"),
        (403, "not json", "channel:forbidden channel"),
        (404, #"{"reason":"BadPath"}"#, "failed:bad_path delivery?"),
        (404, "", "failed:http_404 delivery"),
        (405, #"{"reason":"MethodNotAllowed"}"#, "failed:method_not_allowed delivery"),
        (410, #"{"reason":"ExpiredToken"}"#, "failed:expired_token:invalidate subscription"),
        (410, #"{"reason":"Unregistered"}"#, "failed:unregistered:invalidate subscription"),
        (410, "", "failed:unregistered:invalidate subscription"),
        (413, #"{"reason":"PayloadTooLarge"}"#, "failed:payload_too_large delivery"),
        (429, #"{"reason":"TooManyProviderTokenUpdates"}"#, "retry:too_many_provider_token_updates transient"),
        (429, #"{"reason":"TooManyRequests"}"#, "retry:too_many_requests transient"),
        (500, #"{"reason":"InternalServerError"}"#, "retry:internal_server_error transient"),
        (503, #"{"reason":"ServiceUnavailable"}"#, "retry:service_unavailable transient"),
        (503, #"{"reason":"Shutdown"}"#, "retry:shutdown transient"),
        (502, "<html>bad gateway</html>", "retry:http_502 transient"),
    ]

    @Test(arguments: 0..<table.count) func classification(index: Int) {
        let row = Self.table[index]
        let answer = APNsResponseClassifier.answer(response(row.status, row.body), subscriptionTokenUpdatedAt: nil)
        let summary: String = switch answer.outcome {
        case .failed(let reason, _, let invalidate): "failed:\(reason)" + (invalidate ? ":invalidate" : "")
        case .channelError(let reason, _, _): "channel:\(reason)"
        case .retry(let reason, _, _): "retry:\(reason)"
        default: "\(answer.outcome)"
        }
        #expect(summary + " \(answer.fault.rawValue)" + (answer.suspectsChannel ? "?" : "") == row.expected)
        #expect(answer.outcome == APNsResponseClassifier.classify(response(row.status, row.body), subscriptionTokenUpdatedAt: nil))
        // Only DeviceTokenNotForTopic asks to invalidate once the topic is proven.
        #expect(answer.invalidatesWhenCredentialsWork == row.body.contains("DeviceTokenNotForTopic"))
    }

    @Test func otherFailuresCarryAPNsReason() {
        let outcome = APNsResponseClassifier.classify(response(400, #"{"reason":"BadExpirationDate"}"#), subscriptionTokenUpdatedAt: nil)
        #expect(outcome == .failed(reason: .badExpirationDate, detail: ["status": 400, "apns_reason": "BadExpirationDate"]))
    }

    @Test func badDeviceTokenFromTheOtherEnvironmentDoesNotInvalidate() {
        let outcome = APNsResponseClassifier.classify(response(400, #"{"reason":"BadDeviceToken"}"#), subscriptionTokenUpdatedAt: nil,
                                                      sentToSubscriptionEnvironment: false)
        #expect(outcome == .failed(reason: .badDeviceToken, detail: ["status": 400, "apns_reason": "BadDeviceToken"], invalidateSubscription: false))
    }

    @Test func retryAfterHeader() {
        let now = Date(timeIntervalSince1970: 1_000)
        let outcome = APNsResponseClassifier.classify(response(503, "", headers: [PushHeader("retry-after", "30")]), subscriptionTokenUpdatedAt: nil, now: now)
        #expect(outcome == .retry(reason: DeliveryReason.http(status: 503), detail: ["status": 503], notBefore: Date(timeIntervalSince1970: 1_030)))
    }

    @Test func providerTokenRefreshSignal() {
        #expect(APNsResponseClassifier.requiresNewProviderToken(response(403, #"{"reason":"ExpiredProviderToken"}"#)))
        #expect(APNsResponseClassifier.requiresNewProviderToken(response(403, #"{"reason":"InvalidProviderToken"}"#)))
        #expect(!APNsResponseClassifier.requiresNewProviderToken(response(403, #"{"reason":"BadCertificate"}"#)))
        #expect(!APNsResponseClassifier.requiresNewProviderToken(response(400, #"{"reason":"BadTopic"}"#)))
    }

    @Test func snakeCase() {
        #expect(APNsResponseClassifier.snakeCase("TooManyProviderTokenUpdates") == "too_many_provider_token_updates")
        #expect(APNsResponseClassifier.snakeCase("BadURLPath") == "bad_url_path")
        #expect(APNsResponseClassifier.snakeCase("Shutdown") == "shutdown")
    }
}
