import DeliveryCore
import Foundation

/// One Huawei Push Kit channel's requests (Huawei, "Sending Messages"), without I/O: given a delivery's
/// ``HuaweiDelivery`` and the OAuth 2.0 access token, the request to send and its destination, or the outcome
/// to record without sending; given Push Kit's answer, its classification or a refused access token. Shared by
/// the worker's sender and `preview`.
///
/// A request-building error about the channel (``HuaweiRequestFactory/channelRequestErrors``: the App ID or
/// the access token it gave) pauses the channel; any other (the push token, the message) fails the delivery.
public struct HuaweiRequestPlan: Sendable {
    /// The channel's App ID, the `[appid]` of `/v1/[appid]/messages:send`.
    public var appID: String
    /// Whether the channel sets `app_channels.endpoint` (then requests go to ``PushDestination/channelEndpoint``).
    public var usesChannelEndpoint: Bool

    public init(appID: String, usesChannelEndpoint: Bool) {
        self.appID = appID
        self.usesChannelEndpoint = usesChannelEndpoint
    }

    /// The public members of a `huawei` channel's settings that a request shows without authorization, as
    /// `preview` reads them: `app_id` (the send path's `[appid]`) and `token_uri`. The client secret is neither
    /// read nor needed.
    public struct PublicSettings: Sendable, Equatable {
        public var appID: String
        /// Where the access token is fetched, when given (else ``HuaweiClientCredentials/defaultTokenURI``).
        public var tokenURI: String?

        /// - Throws: ``ProviderConfigurationError`` `missingKey` for `app_id`.
        public init(_ settings: JSONValue) throws(ProviderConfigurationError) {
            guard let appID = settings["app_id"]?.stringValue else {
                throw ProviderConfigurationError(code: .missingKey, key: "app_id", message: "is missing")
            }
            self.appID = appID
            tokenURI = settings["token_uri"]?.stringValue
        }
    }

    /// Where requests go: the channel's endpoint, else Push Kit's host.
    public var destination: PushDestination { usesChannelEndpoint ? .channelEndpoint : .huaweiPushKit }

    /// The request for `delivery` (its App ID should be ``appID``), or the outcome to record instead.
    public func request(for delivery: HuaweiDelivery, accessToken: String) -> PlannedRequest {
        do throws(HuaweiRequestError) {
            return .send(try HuaweiRequestFactory.makeRequest(delivery, accessToken: accessToken), to: destination)
        } catch {
            if HuaweiRequestFactory.channelRequestErrors.contains(error.reason) {
                return .record(.channelError(reason: error.reason, detail: ["error": .string(error.detail)]))
            }
            return .record(error.outcome)
        }
    }

    /// Push Kit's answer to a request of this plan: an answer that needs a new access token
    /// (``HuaweiResponseClassifier/requiresNewAccessToken(_:)``) is ``PlannedAnswer/tokenRefused`` unless it
    /// answers a resend.
    /// - Parameters:
    ///   - now: the answer's arrival on PostgreSQL's clock (docs/clocks.md); `Retry-After` counts from it.
    ///   - resent: the request was the resend after a refused token.
    public func judge(_ response: PushResponse, now: Date, resent: Bool) -> PlannedAnswer {
        if !resent, HuaweiResponseClassifier.requiresNewAccessToken(response) { return .tokenRefused }
        return .judged(HuaweiResponseClassifier.answer(response, now: now))
    }
}
