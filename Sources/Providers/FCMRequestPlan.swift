import DeliveryCore
import Foundation

/// One FCM channel's requests (Firebase: "Send a message using FCM HTTP v1 API"), without I/O: given a
/// delivery's ``FCMDelivery`` and the OAuth 2.0 access token, the request to send and its destination, or the
/// outcome to record without sending; given FCM's answer, its classification or a refused access token.
/// Shared by the worker's sender and `preview`.
///
/// A request-building error about the channel (`missing_project_id`, `invalid_project_id`,
/// `invalid_access_token`: the service account or the token it gave) pauses the channel; any other (the
/// registration token, the message) fails the delivery.
public struct FCMRequestPlan: Sendable {
    /// Request-building errors caused by the app's channel settings rather than by the message.
    public static let channelRequestErrors: Set<DeliveryReason> = [.missingProjectID, .invalidProjectID, .invalidAccessToken]

    /// The service account's `project_id`, the `{project}` of `/v1/projects/{project}/messages:send`.
    public var projectID: String
    /// Whether the channel sets `app_channels.endpoint` (then requests go to ``PushDestination/channelEndpoint``).
    public var usesChannelEndpoint: Bool

    public init(projectID: String, usesChannelEndpoint: Bool) {
        self.projectID = projectID
        self.usesChannelEndpoint = usesChannelEndpoint
    }

    /// The public members of an `fcm` channel's settings that a request shows without authorization, as
    /// `preview` reads them: `project_id` and `token_uri`, at the top level or inside `service_account` (the
    /// two shapes ``GoogleServiceAccount`` settings come in). The key is neither read nor needed.
    public struct PublicSettings: Sendable, Equatable {
        public var projectID: String
        /// Where the access token is fetched, when given.
        public var tokenURI: String?

        /// - Throws: ``ProviderConfigurationError`` `missingKey` for `project_id`.
        public init(_ settings: JSONValue) throws(ProviderConfigurationError) {
            func member(_ name: String) -> String? {
                settings[name]?.stringValue ?? settings["service_account"]?[name]?.stringValue
            }
            guard let projectID = member("project_id") else {
                throw ProviderConfigurationError(code: .missingKey, key: "project_id", message: "is missing")
            }
            self.projectID = projectID
            tokenURI = member("token_uri")
        }
    }

    /// Where requests go: the channel's endpoint, else FCM's host.
    public var destination: PushDestination { usesChannelEndpoint ? .channelEndpoint : .fcm }

    /// The request for `delivery` (its project should be ``projectID``), or the outcome to record instead.
    /// - Parameter data: `message.data` (e.g. a render shared by every device of the notification); `nil`:
    ///   rendered here.
    public func request(
        for delivery: FCMDelivery, accessToken: String, data: (() throws(FCMRequestError) -> [String: String])? = nil
    ) -> PlannedRequest {
        do throws(FCMRequestError) {
            func render() throws(FCMRequestError) -> [String: String] {
                if let data { return try data() }
                return try FCMRequestFactory.data(for: delivery)
            }
            return .send(try FCMRequestFactory.makeRequest(delivery, accessToken: accessToken, data: render), to: destination)
        } catch {
            if Self.channelRequestErrors.contains(error.reason) {
                return .record(.channelError(reason: error.reason, detail: ["error": .string(error.detail)]))
            }
            return .record(error.outcome)
        }
    }

    /// FCM's answer to a request of this plan: an answer that needs a new access token
    /// (``FCMResponseClassifier/requiresNewAccessToken(_:)``) is ``PlannedAnswer/tokenRefused`` unless it answers
    /// a resend.
    /// - Parameters:
    ///   - now: the answer's arrival on PostgreSQL's clock (docs/clocks.md); `Retry-After` counts from it
    ///     (RFC 9110 §10.2.3).
    ///   - resent: the request was the resend after a refused token.
    public func judge(_ response: PushResponse, now: Date, resent: Bool) -> PlannedAnswer {
        if !resent, FCMResponseClassifier.requiresNewAccessToken(response) { return .tokenRefused }
        return .judged(FCMResponseClassifier.answer(response, now: now))
    }
}
