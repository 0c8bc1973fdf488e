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
            == .failed(reason: "unregistered", detail: detail, invalidateSubscription: true))
        #expect(APNsResponseClassifier.classify(gone, subscriptionTokenUpdatedAt: Date(timeIntervalSince1970: 1_699_999_000))
            == .failed(reason: "unregistered", detail: detail, invalidateSubscription: true))
        // Token registered again after APNs saw it go: fail this delivery, keep the subscription.
        #expect(APNsResponseClassifier.classify(gone, subscriptionTokenUpdatedAt: Date(timeIntervalSince1970: 1_700_000_001))
            == .failed(reason: "unregistered", detail: detail, invalidateSubscription: false))
        // No timestamp: cannot prove re-registration, invalidate.
        if case .failed(_, _, let invalidate) = APNsResponseClassifier.classify(response(410, #"{"reason":"Unregistered"}"#), subscriptionTokenUpdatedAt: Date()) {
            #expect(invalidate)
        } else {
            Issue.record("410 must fail")
        }
    }

    static let table: [(status: Int, body: String, expected: String)] = [
        (400, #"{"reason":"BadDeviceToken"}"#, "failed:bad_device_token:invalidate"),
        (400, #"{"reason":"BadCollapseId"}"#, "failed:bad_collapse_id"),
        (400, #"{"reason":"PayloadEmpty"}"#, "failed:payload_empty"),
        (400, #"{"reason":"TopicDisallowed"}"#, "channel:topic_disallowed"),
        (400, #"{"reason":"BadTopic"}"#, "channel:bad_topic"),
        (400, #"{"reason":"MissingTopic"}"#, "channel:missing_topic"),
        (400, #"{"reason":"DeviceTokenNotForTopic"}"#, "failed:device_token_not_for_topic"),
        (403, #"{"reason":"ExpiredProviderToken"}"#, "channel:expired_provider_token"),
        (403, #"{"reason":"InvalidProviderToken"}"#, "channel:invalid_provider_token"),
        (403, "not json", "channel:forbidden"),
        (405, #"{"reason":"MethodNotAllowed"}"#, "failed:method_not_allowed"),
        (410, #"{"reason":"ExpiredToken"}"#, "failed:expired_token:invalidate"),
        (410, "", "failed:unregistered:invalidate"),
        (413, #"{"reason":"PayloadTooLarge"}"#, "failed:payload_too_large"),
        (429, #"{"reason":"TooManyRequests"}"#, "retry:too_many_requests"),
        (429, #"{"reason":"TooManyProviderTokenUpdates"}"#, "retry:too_many_provider_token_updates"),
        (500, #"{"reason":"InternalServerError"}"#, "retry:internal_server_error"),
        (503, #"{"reason":"ServiceUnavailable"}"#, "retry:service_unavailable"),
        (502, "<html>bad gateway</html>", "retry:http_502"),
        (404, "", "failed:http_404"),
    ]

    @Test(arguments: 0..<table.count) func classification(index: Int) {
        let row = Self.table[index]
        let outcome = APNsResponseClassifier.classify(response(row.status, row.body), subscriptionTokenUpdatedAt: nil)
        let summary: String = switch outcome {
        case .failed(let reason, _, let invalidate): "failed:\(reason)" + (invalidate ? ":invalidate" : "")
        case .channelError(let reason, _, _): "channel:\(reason)"
        case .retry(let reason, _, _): "retry:\(reason)"
        default: "\(outcome)"
        }
        #expect(summary == row.expected)
    }

    @Test func otherFailuresCarryAPNsReason() {
        let outcome = APNsResponseClassifier.classify(response(400, #"{"reason":"BadExpirationDate"}"#), subscriptionTokenUpdatedAt: nil)
        #expect(outcome == .failed(reason: "bad_expiration_date", detail: ["status": 400, "apns_reason": "BadExpirationDate"]))
    }

    @Test func badDeviceTokenFromTheOtherEnvironmentDoesNotInvalidate() {
        let outcome = APNsResponseClassifier.classify(response(400, #"{"reason":"BadDeviceToken"}"#), subscriptionTokenUpdatedAt: nil,
                                                      sentToSubscriptionEnvironment: false)
        #expect(outcome == .failed(reason: "bad_device_token", detail: ["status": 400, "apns_reason": "BadDeviceToken"], invalidateSubscription: false))
    }

    @Test func retryAfterHeader() {
        let now = Date(timeIntervalSince1970: 1_000)
        let outcome = APNsResponseClassifier.classify(response(503, "", headers: [PushHeader("retry-after", "30")]), subscriptionTokenUpdatedAt: nil, now: now)
        #expect(outcome == .retry(reason: "http_503", detail: ["status": 503], notBefore: Date(timeIntervalSince1970: 1_030)))
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
