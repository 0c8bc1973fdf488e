import DeliveryCore
import Foundation

/// One Web Push channel's requests (RFC 8030, message encryption RFC 8291, VAPID RFC 8292), without I/O: given a
/// delivery's ``WebPushDelivery``, the subscription's keys and the channel's VAPID signer, the sealed request and
/// its push service, or the outcome to record without sending; given the push service's answer, its
/// classification. Shared by the worker's sender and `preview` (which stops before sealing).
///
/// The endpoint is the subscriber's: it is parsed (``WebPushEndpoint``: `invalid_endpoint`) and its host checked
/// by the caller's egress rule before anything is rendered or signed (a refused host fails as
/// `forbidden_endpoint`, the `refusedEndpoint` outcome). `vapid_failed` (the channel's key failing to sign)
/// pauses the channel; every other error fails the delivery. Web Push has no token to refuse: a 401 or 403 is
/// judged like any answer.
public struct WebPushRequestPlan: Sendable {
    /// The outcome for an endpoint whose host the egress rule refuses.
    public var refusedEndpoint: DeliveryOutcome
    /// The endpoint's host as the egress policy reads it (a name, or an address in canonical text, so the
    /// connection, `:authority` and the VAPID `aud` name one host), or `nil` when the policy refuses it.
    public var checkHost: @Sendable (String) -> String?

    public init(refusedEndpoint: DeliveryOutcome, checkHost: @escaping @Sendable (String) -> String?) {
        self.refusedEndpoint = refusedEndpoint
        self.checkHost = checkHost
    }

    /// The endpoint parsed and checked, or the outcome to record instead.
    public func endpoint(for delivery: WebPushDelivery) -> Result<WebPushEndpoint, PlanRefusal> {
        var endpoint: WebPushEndpoint
        do throws(WebPushRequestError) {
            endpoint = try WebPushEndpoint(parsing: delivery.endpoint)
        } catch {
            return .failure(PlanRefusal(outcome: error.outcome))
        }
        guard let host = checkHost(endpoint.host) else { return .failure(PlanRefusal(outcome: refusedEndpoint)) }
        endpoint.host = host
        return .success(endpoint)
    }

    /// The plaintext request for `delivery` (before RFC 8291 encryption and VAPID) and its endpoint, or the
    /// outcome to record instead.
    /// - Parameter plaintext: the body (e.g. a render shared by every device of the notification); `nil`:
    ///   rendered here.
    public func plaintextRequest(
        for delivery: WebPushDelivery, plaintext: (() throws(WebPushRequestError) -> [UInt8])? = nil
    ) -> Result<(request: PushRequest, endpoint: WebPushEndpoint), PlanRefusal> {
        let endpoint: WebPushEndpoint
        switch self.endpoint(for: delivery) {
        case .success(let checked): endpoint = checked
        case .failure(let refusal): return .failure(refusal)
        }
        do throws(WebPushRequestError) {
            func render() throws(WebPushRequestError) -> [UInt8] {
                if let plaintext { return try plaintext() }
                return try WebPushRequestFactory.plaintext(for: delivery)
            }
            return .success((try WebPushRequestFactory.makePlaintextRequest(delivery, plaintext: render), endpoint))
        } catch {
            return .failure(PlanRefusal(outcome: Self.outcome(error)))
        }
    }

    /// The request as it goes on the wire, or the outcome to record instead.
    /// - Parameters:
    ///   - p256dh: the subscription's `web_p256dh`; `auth`: its `web_auth` (`nil`: not stored, the delivery fails
    ///     as `invalid_subscription_keys`).
    ///   - vapid: the channel's VAPID signer (one per key and subject).
    ///   - plaintext: as for ``plaintextRequest(for:plaintext:)``.
    public func request(
        for delivery: WebPushDelivery, p256dh: String?, auth: String?, vapid: VAPIDTokenManager,
        plaintext: (() throws(WebPushRequestError) -> [UInt8])? = nil
    ) -> PlannedRequest {
        let plain: (request: PushRequest, endpoint: WebPushEndpoint)
        switch plaintextRequest(for: delivery, plaintext: plaintext) {
        case .success(let made): plain = made
        case .failure(let refusal): return .record(refusal.outcome)
        }
        guard let p256dh, let auth else {
            return .record(.failed(
                reason: .invalidSubscriptionKeys, detail: ["message": .string("the web subscription has no web_p256dh / web_auth")]))
        }
        do throws(WebPushRequestError) {
            let sealed = try WebPushRequestSealer.seal(plain.request, endpoint: plain.endpoint, p256dh: p256dh, auth: auth, vapid: vapid)
            return .send(sealed, to: .pushService(host: plain.endpoint.host, port: plain.endpoint.port))
        } catch {
            return .record(Self.outcome(error))
        }
    }

    /// The push service's answer. `now`: its arrival on PostgreSQL's clock (docs/clocks.md); `Retry-After`
    /// counts from it (RFC 9110 §10.2.3).
    public func judge(_ response: PushResponse, now: Date) -> PlannedAnswer {
        .judged(WebPushResponseClassifier.answer(response, now: now))
    }

    /// `vapid_failed` is the channel's key failing to sign; everything else is this push or subscription.
    static func outcome(_ error: WebPushRequestError) -> DeliveryOutcome {
        if error.reason == .vapidFailed { return .channelError(reason: error.reason, detail: ["error": .string(error.detail)]) }
        return error.outcome
    }
}

/// A plan's refusal to build a request: the outcome to record instead.
public struct PlanRefusal: Error, Sendable {
    public var outcome: DeliveryOutcome

    public init(outcome: DeliveryOutcome) {
        self.outcome = outcome
    }
}
