import DeliveryCore
import Foundation
import PushCrypto

/// One APNs channel's requests, without I/O: given a delivery's ``APNsDelivery`` and the authorization, the
/// request to send and its destination, or the outcome to record without sending; given Apple's answer, its
/// classification or a refused provider token. Shared by the worker's sender and `preview`.
///
/// Token-based channels (Apple: "Establishing a token-based connection to APNs") put `authorization: bearer
/// <provider token>` on every request. Certificate-based channels (Apple: "Establishing a certificate-based
/// connection to APNs") send none and are checked first, each a channel error that pauses the channel:
/// `certificate_expired` (past `notAfter`), `bad_certificate_environment` (the certificate does not name the
/// environment of Apple's host the subscription needs; unknowable with an `endpoint` override) and
/// `topic_not_in_certificate` (the request's `apns-topic` is not among the certificate's topics, e.g. a `.voip`
/// topic on a certificate without VoIP). A push whose type Apple takes from the other kind of credentials
/// (``APNsPushType/credentials``) fails alone as `push_type_unsupported`: Live Activity, location and WidgetKit
/// pushes on a certificate channel (Apple accepts those over token-based authentication only: the
/// `apns-push-type` table, Apple Developer Forums thread 712499, "Updating widgets with WidgetKit push
/// notifications"), an MDM push on a token channel (only the MDM push certificate can send it).
public struct APNsRequestPlan: Sendable {
    /// Request-building errors caused by the app's channel settings rather than by the message: they pause the
    /// channel instead of failing the delivery.
    public static let channelRequestErrors: Set<DeliveryReason> = [.missingTopic, .invalidTopic, .invalidProviderToken]

    /// The channel's topic (the app's bundle ID); the message's push type may add a suffix (`.voip`, ...).
    public var topic: String
    /// Whether the channel sets `app_channels.endpoint` (then requests go to ``PushDestination/channelEndpoint``).
    public var usesChannelEndpoint: Bool
    /// The client certificate of a certificate-based channel; `nil` for a token-based one (and for a
    /// certificate-based one described by its public settings only, ``init(publicSettings:usesChannelEndpoint:)``).
    public var certificate: APNsCertificateCredentials?
    /// Whether the channel authenticates with a client certificate (Apple: "Establishing a certificate-based
    /// connection to APNs"): its requests carry no `authorization`, and the push types Apple takes from one kind
    /// of credentials only are judged by it (``APNsPushType/credentials``).
    public var usesCertificate: Bool

    public init(topic: String, usesChannelEndpoint: Bool, certificate: APNsCertificateCredentials? = nil, usesCertificate: Bool? = nil) {
        self.topic = topic
        self.usesChannelEndpoint = usesChannelEndpoint
        self.certificate = certificate
        self.usesCertificate = usesCertificate ?? (certificate != nil)
    }

    /// A token-based channel's plan from its credentials.
    public init(credentials: APNsCredentials, usesChannelEndpoint: Bool) {
        self.init(topic: credentials.topic, usesChannelEndpoint: usesChannelEndpoint)
    }

    /// A certificate-based channel's plan from its credentials.
    public init(certificate: APNsCertificateCredentials, usesChannelEndpoint: Bool) {
        self.init(topic: certificate.topic, usesChannelEndpoint: usesChannelEndpoint, certificate: certificate)
    }

    /// The plan of a channel described by its settings' public members only, `topic` (what a request shows
    /// without signing it, as `preview` does), and whether it authenticates with a certificate: the settings
    /// hold one (`certificate` or `pkcs12`, ``APNsCertificateCredentials/isCertificateSettings(_:)``) or say
    /// `authentication: "certificate"` (the public form `preview` reads from the database); the credentials are
    /// neither read nor needed.
    /// - Throws: ``ProviderConfigurationError`` `missingKey` for `topic` when it is absent or not a string.
    public init(publicSettings settings: JSONValue, usesChannelEndpoint: Bool) throws(ProviderConfigurationError) {
        guard let topic = settings["topic"]?.stringValue, !topic.isEmpty else {
            throw ProviderConfigurationError(code: .missingKey, key: "topic", message: "is missing")
        }
        self.init(topic: topic, usesChannelEndpoint: usesChannelEndpoint,
                  usesCertificate: APNsCertificateCredentials.isCertificateSettings(settings)
                      || settings["authentication"]?.stringValue == "certificate")
    }

    /// Apple's host for a subscription's `apns_environment` (`sandbox`, else production).
    public static func appleDestination(environment: String?) -> PushDestination {
        environment == "sandbox" ? .apnsSandbox : .apnsProduction
    }

    /// Where `delivery`'s request goes: the channel's endpoint, else Apple's host for its environment.
    public func destination(for delivery: APNsDelivery) -> PushDestination {
        usesChannelEndpoint ? .channelEndpoint : Self.appleDestination(environment: delivery.environment)
    }

    /// The request for `delivery` (its topic should be ``topic``), or the outcome to record instead.
    /// - Parameters:
    ///   - authorization: the provider token's `authorization` field, for a token-based channel (ignored for a
    ///     certificate-based one).
    ///   - body: the payload (e.g. a render shared by every device of the notification); `nil`: rendered here.
    public func request(
        for delivery: APNsDelivery, authorization: APNsProviderAuthorization?,
        body: (() throws(APNsRequestError) -> [UInt8])? = nil
    ) -> PlannedRequest {
        if let refusal = Self.credentialsRefusal(delivery.message.apnsPushType, certificate: usesCertificate) {
            return .record(refusal)
        }
        if let certificate, let refusal = Self.certificateRefusal(certificate, delivery: delivery, usesChannelEndpoint: usesChannelEndpoint) {
            return .record(refusal)
        }
        let request: PushRequest
        do throws(APNsRequestError) {
            func payload() throws(APNsRequestError) -> [UInt8] {
                if let body { return try body() }
                return try APNsRequestFactory.payload(for: delivery)
            }
            if usesCertificate {
                // No `authorization` field: the TLS handshake's client certificate is the trust.
                var made = try APNsRequestFactory.makeRequest(delivery, bearerToken: "certificate", body: payload)
                made.headers.removeAll { $0.name == "authorization" }
                request = made
            } else {
                request = try APNsRequestFactory.makeRequest(
                    delivery, authorization: authorization ?? APNsProviderAuthorization(bearerToken: ""), body: payload)
            }
        } catch {
            let detail: JSONValue = ["error": .string(error.detail)]
            return .record(
                Self.channelRequestErrors.contains(error.reason)
                    ? .channelError(reason: error.reason, detail: detail) : .failed(reason: error.reason, detail: detail))
        }
        if let certificate, let topic = request.header("apns-topic"), !certificate.apple.allows(topic: topic) {
            return .record(.channelError(
                reason: .topicNotInCertificate,
                detail: [
                    "error": .string("apns-topic `\(topic)` is not among the certificate's topics (\(certificate.apple.topics.joined(separator: ", ")))"),
                    "certificate": .string(certificate.identity.certificate.fingerprint),
                ]))
        }
        return .send(request, to: destination(for: delivery))
    }

    /// Apple's answer to a request of this plan. A token-based request's answer refusing its provider token
    /// (``APNsResponseClassifier/requiresNewProviderToken(_:)``) is ``PlannedAnswer/tokenRefused`` unless it
    /// answers a resend.
    /// - Parameters:
    ///   - subscriptionTokenUpdatedAt: when the subscription's device token was last written (an `Unregistered`
    ///     answer older than it does not invalidate the newer token).
    ///   - now: the answer's arrival on PostgreSQL's clock (docs/clocks.md); `Retry-After` counts from it.
    ///   - resent: the request was the resend after a refused token.
    public func judge(_ response: PushResponse, subscriptionTokenUpdatedAt: Date?, now: Date, resent: Bool) -> PlannedAnswer {
        if certificate == nil, !resent, APNsResponseClassifier.requiresNewProviderToken(response) { return .tokenRefused }
        return .judged(APNsResponseClassifier.answer(response, subscriptionTokenUpdatedAt: subscriptionTokenUpdatedAt, now: now))
    }

    /// `push_type_unsupported` when `pushType` cannot go over this channel's kind of credentials
    /// (``APNsPushType/credentials``), else `nil`. Checked before the certificate's own checks: no certificate
    /// fixes it, so it must not pause the channel.
    static func credentialsRefusal(_ pushType: APNsPushType?, certificate: Bool) -> DeliveryOutcome? {
        guard let pushType else { return nil }
        let note: String
        switch (pushType.credentials, certificate) {
        case (.token, true):
            note = "APNs accepts \(pushType.rawValue) pushes over token-based (.p8) authentication only; this app's APNs channel uses a certificate"
        case (.certificate, false):
            note = "APNs accepts \(pushType.rawValue) pushes only from an MDM push certificate; this app's APNs channel uses a provider token"
        default:
            return nil
        }
        return .failed(
            reason: .pushTypeUnsupported,
            detail: ["provider": .string(Provider.apns.rawValue), "apns_push_type": .string(pushType.rawValue), "note": .string(note)])
    }

    /// The channel error (or failure) that keeps a certificate channel's push from being sent at all.
    static func certificateRefusal(
        _ credentials: APNsCertificateCredentials, delivery: APNsDelivery, usesChannelEndpoint: Bool
    ) -> DeliveryOutcome? {
        let certificate = credentials.identity.certificate
        if certificate.notAfter <= delivery.now {
            return .channelError(
                reason: .certificateExpired,
                detail: [
                    "error": .string("the APNs client certificate expired at \(certificate.notAfter) (renew it in the developer portal)"),
                    "certificate": .string(certificate.fingerprint),
                ])
        }
        if !usesChannelEndpoint {
            let environment: ApplePushCertificate.Environment = delivery.environment == "sandbox" ? .development : .production
            guard credentials.apple.serves(environment) else {
                return .channelError(
                    reason: .badCertificateEnvironment,
                    detail: [
                        "error": .string("the APNs client certificate is not valid for the \(environment.rawValue) environment the subscription needs"),
                        "certificate": .string(certificate.fingerprint),
                    ])
            }
        }
        return nil
    }
}
