import DeliveryCore
import HTTP2
import Providers

/// Sends a provider request over the shared HTTP/2 client and maps a transport failure to an outcome the
/// same way for every provider: a request HTTP/2 refuses to carry fails for good (`invalid_request`); a
/// request the layer knows was not processed is retried at no attempt's cost (`provider_unreachable`); one
/// withdrawn after waiting too long for a stream (`.originBusy`: a busy origin, or a connection that does not
/// open) gives its slot back and comes back later without an event (`origin_busy`, ``CompletionFactory``);
/// a response over the HTTP/2 client's read bounds is a counted retry (`response_too_large`: the provider had
/// the whole request and may have accepted the push, so the retry spends an attempt and the delivery ends in
/// `max_attempts`); an endpoint the egress policy refuses fails for good (`forbidden_endpoint`); anything else
/// is a counted retry (`transport_error`).
enum ProviderTransport {
    /// - Parameters:
    ///   - tenant: the app the request is sent for (``HTTP2Request/tenant``): the share its host-name lookup
    ///     counts against.
    ///   - subscriberChosen: the origin came from a subscriber (a Web Push endpoint): a transport failure's detail
    ///     then carries a fixed sentence instead of the network's own text (see
    ///     ``outcome(for:origin:subscriberChosen:)``).
    ///   - pacer: counts the origin's answers and dates the return of a withdrawn request's delivery.
    /// - Returns: the response as a ``PushResponse``, or the outcome to record instead.
    static func send(
        _ request: PushRequest, to origin: HTTP2Origin, client: HTTP2Client, timeout: Duration, tenant: HTTP2Tenant,
        subscriberChosen: Bool = false, pacer: OriginPacer? = nil
    ) async -> Result<PushResponse, Failure> {
        let result: Result<HTTP2Response, any Error>
        do {
            result = .success(try await client.send(httpRequest(request, timeout: timeout, tenant: tenant), to: origin))
        } catch {
            result = .failure(error)
        }
        return response(result, origin: origin, subscriberChosen: subscriberChosen, pacer: pacer)
    }

    /// `request` as the HTTP/2 client takes it, sent for `tenant` (the app).
    static func httpRequest(_ request: PushRequest, timeout: Duration, tenant: HTTP2Tenant) -> HTTP2Request {
        HTTP2Request(
            method: request.method, path: request.path,
            headers: request.headers.map { HTTP2Header($0.name, $0.value) }, body: request.body, timeout: timeout,
            tenant: tenant)
    }

    /// The HTTP/2 client's result for a request to `origin` as a ``PushResponse``, or the outcome to record
    /// instead (see ``send(_:to:client:timeout:tenant:subscriberChosen:pacer:)``). A request withdrawn from a
    /// busy origin comes back no earlier than the `pacer`'s ticket for it (``OriginPacing``).
    static func response(
        _ result: Result<HTTP2Response, any Error>, origin: HTTP2Origin, subscriberChosen: Bool = false,
        pacer: OriginPacer? = nil
    ) -> Result<PushResponse, Failure> {
        switch result {
        case .success(let response):
            pacer?.answered(origin.description)
            return .success(
                PushResponse(
                    status: response.status, headers: response.headers.map { PushHeader($0.name, $0.value) },
                    body: response.body))
        case .failure(let error as HTTP2Error):
            var failed = outcome(for: error, origin: origin.description, subscriberChosen: subscriberChosen)
            if error.code == .originBusy, let pacer, case .retry(let reason, let detail, _) = failed {
                failed = .retry(reason: reason, detail: detail, notBefore: pacer.withdrawn(origin.description))
            }
            return .failure(Failure(outcome: failed))
        case .failure(let error):
            return .failure(Failure(outcome: .retry(reason: .transportError, detail: ["error": .string("\(error)")])))
        }
    }

    /// The outcome for a transport error. `origin` names where it happened (scheme, host, port only: a Web Push
    /// endpoint's path is a capability and never appears). With `subscriberChosen` (a Web Push endpoint) the
    /// detail's `error` is one fixed sentence per outcome, never the network's text (errno, resolver or TLS
    /// messages): anyone who can read `delivery_events` could otherwise use subscriptions to scan ports and
    /// learn which names resolve.
    static func outcome(for error: HTTP2Error, origin: String, subscriberChosen: Bool = false) -> DeliveryOutcome {
        if subscriberChosen, error.code != .invalidRequest, error.code != .forbiddenAddress {
            let sentence =
                switch error.code {
                case .responseTooLarge: "the push service's answer went beyond the client's read bounds"
                case .originBusy: "no stream to the push service came free in time (busy, or not connected): not sent"
                default: "the push service could not be reached or did not answer (the network's own message is not recorded)"
                }
            return outcome(for: error, origin: origin, detailError: sentence)
        }
        return outcome(for: error, origin: origin, detailError: error.description)
    }

    private static func outcome(for error: HTTP2Error, origin: String, detailError: String) -> DeliveryOutcome {
        if error.code == .originBusy {
            return .retry(reason: .originBusy, detail: ["error": .string(detailError), "origin": .string(origin)])
        }
        if error.code == .invalidRequest {
            return .failed(reason: .invalidRequest, detail: ["error": .string(detailError)])
        }
        if error.code == .forbiddenAddress {
            return forbiddenEndpoint
        }
        if error.code == .responseTooLarge {
            return .retry(
                reason: .responseTooLarge, detail: ["error": .string(detailError), "origin": .string(origin)])
        }
        return .retry(
            reason: error.isSafeToRetry ? .providerUnreachable : .transportError,
            detail: ["error": .string(detailError), "origin": .string(origin)])
    }

    /// An endpoint the egress policy refuses (``EgressPolicy``): failed at once, never retried (the same host
    /// is refused again). The detail is one fixed sentence: nothing from the network (no errno text, no
    /// resolved address), so events cannot be used to scan networks or to learn what internal names resolve to.
    static let forbiddenEndpoint = DeliveryOutcome.failed(
        reason: .forbiddenEndpoint,
        detail: ["error": "refused before connecting: the endpoint's host is not a public internet address"])

    /// For an endpoint the app's channel chose (an `app_channels.endpoint` override, an FCM `token_uri`): a refused
    /// endpoint is the channel's configuration at fault, so the channel pauses (`invalid_channel_settings`) and
    /// the delivery waits instead of failing.
    static func channelEndpointOutcome(_ outcome: DeliveryOutcome) -> DeliveryOutcome {
        guard case .failed(.forbiddenEndpoint, let detail, _) = outcome else { return outcome }
        return .channelError(reason: .invalidChannelSettings, detail: detail)
    }

    struct Failure: Error {
        var outcome: DeliveryOutcome
    }
}
