import DeliveryCore
import Foundation
import HTTP2
import Providers
import UUIDText

/// The APNs side of Live Activity broadcast channels (docs/live-activity-channels.md): turns a leased channel change
/// into a channel management request and its answer into the row's result, and a leased channel send into one
/// broadcast request and its answer into the notification's event. Requests go over the APNs HTTP/2 client with
/// the app's token-based channel and the fleet's shared provider token, one at a time per call.
///
/// Nothing here pauses a channel or an app: a channel APNs does not know (`ChannelNotRegistered`) fails only the
/// notification sent on it; an app whose APNs channel is missing, certificate-based or unreadable fails only the
/// change or send that needed it; transient answers (429, 5xx, a refused provider token, the transport) retry with
/// the worker's backoff until `PUSHIZO_MAX_ATTEMPTS`.
public final class LiveActivityChannelSender: Sendable {
    private let client: HTTP2Client
    private let tokens: SharedProviderTokens
    private let tokenPolicy: ProviderTokenPolicy
    private let egressPolicy: EgressPolicy
    private let requestTimeout: Duration
    private let retryPolicy: RetryPolicy
    private let maxAttempts: Int

    init(
        client: HTTP2Client, tokens: SharedProviderTokens, egressPolicy: EgressPolicy, requestTimeout: Duration,
        retryPolicy: RetryPolicy, maxAttempts: Int, tokenPolicy: ProviderTokenPolicy = .apns()
    ) {
        self.client = client
        self.tokens = tokens
        self.tokenPolicy = tokenPolicy
        self.egressPolicy = egressPolicy
        self.requestTimeout = requestTimeout
        self.retryPolicy = retryPolicy
        self.maxAttempts = maxAttempts
    }

    /// The app's APNs channel as these requests need it.
    private struct AppChannel {
        var credentials: APNsCredentials
        var key: ProviderTokenKey
        var endpoint: HTTP2Origin?
    }

    /// A refusal made without a request: its reason and detail.
    private struct Refusal: Error {
        var reason: DeliveryReason
        var detail: JSONValue
    }

    private func appChannel(settings: String?, endpoint: String?) -> Result<AppChannel, Refusal> {
        guard let settings else {
            return .failure(Refusal(reason: .noChannel, detail: ["error": "the app has no apns channel"]))
        }
        do {
            let json = try JSONValue(parsing: settings)
            if APNsCertificateCredentials.isCertificateSettings(json) {
                // Apple takes Live Activity pushes over token-based authentication only.
                return .failure(Refusal(
                    reason: .pushTypeUnsupported,
                    detail: ["error": "Live Activity channels need a token-based apns channel (a .p8 key)"]))
            }
            let credentials = try APNsCredentials(settings: json)
            let origin = try endpoint.flatMap { $0.isEmpty ? nil : try ChannelEndpoint.origin($0, policy: egressPolicy) }
            return .success(AppChannel(
                credentials: credentials,
                key: ProviderTokenKey(credential: try ProviderTokenCredential(apns: credentials), policy: tokenPolicy),
                endpoint: origin))
        } catch {
            return .failure(Refusal(reason: .invalidChannelSettings, detail: ["error": .string("\(error)")]))
        }
    }

    /// Sends `request` with the fleet's provider token of `channel` (put in by `build`).
    private func send(
        _ build: (APNsProviderAuthorization) throws(APNsRequestError) -> PushRequest, channel: AppChannel, to origin: HTTP2Origin,
        appID: UUID
    ) async -> Result<PushResponse, Refusal> {
        let token: String
        do {
            token = try await APNsSender.token(for: channel.credentials, key: channel.key, from: tokens)
        } catch {
            return .failure(Refusal(reason: .providerTokenFailed, detail: ["error": .string("\(error)")]))
        }
        let request: PushRequest
        do throws(APNsRequestError) {
            request = try build(APNsProviderAuthorization(bearerToken: token))
        } catch {
            return .failure(Refusal(reason: error.reason, detail: ["error": .string(error.detail)]))
        }
        switch await ProviderTransport.send(
            request, to: origin, client: client, timeout: requestTimeout, tenant: HTTP2Tenant(CanonicalUUIDText.format(appID)))
        {
        case .success(let response):
            if APNsResponseClassifier.requiresNewProviderToken(response) {
                tokens.reportRejected(token, for: channel.key.credential)
            }
            return .success(response)
        case .failure(let failure):
            switch failure.outcome {
            case .failed(let reason, let detail, _), .retry(let reason, let detail, _), .channelError(let reason, let detail, _),
                .skipped(let reason, let detail):
                return .failure(Refusal(reason: reason, detail: detail))
            default:
                return .failure(Refusal(reason: .transportError, detail: .null))
            }
        }
    }

    // MARK: - Reconciliation

    /// What `change` comes to at APNs: the channel created (its id), deleted, refused for good, or to try again.
    func reconcile(_ change: LiveActivityChannelStore.ChannelChange) async -> LiveActivityChannelStore.ChangeResult {
        let wantsChannel = change.desiredState == "present"
        if wantsChannel, change.state == "active", let id = change.appleChannelID {
            // Apple's API has no update of a channel: its storage policy stays what it was created with.
            return .active(appleChannelID: id)
        }
        if !wantsChannel, change.appleChannelID == nil || change.state == "deleted" { return .deleted }
        let channel: AppChannel
        switch appChannel(settings: change.settings, endpoint: change.endpoint) {
        case .failure(let refusal): return .failed(reason: refusal.reason, detail: refusal.detail, keepsChannel: true)
        case .success(let found): channel = found
        }
        let apple = APNsBroadcast.managementHost(environment: change.environment)
        let origin = channel.endpoint ?? HTTP2Origin(scheme: .https, host: apple.host, port: apple.port)
        let bundleID = channel.credentials.topic
        let response: PushResponse
        switch await send(
            { (authorization) throws(APNsRequestError) in
                if wantsChannel {
                    return try APNsBroadcast.createChannelRequest(
                        bundleID: bundleID, policy: APNsBroadcast.StoragePolicy(rawValue: change.storagePolicy) ?? .noMessageStored,
                        authorization: authorization)
                }
                return try APNsBroadcast.deleteChannelRequest(
                    bundleID: bundleID, channelID: change.appleChannelID ?? "", authorization: authorization)
            }, channel: channel, to: origin, appID: change.appID)
        {
        case .failure(let refusal): return retryOrFail(change.attempts, refusal.reason, refusal.detail, notBefore: nil)
        case .success(let answered): response = answered
        }
        switch APNsBroadcast.managementOutcome(response, forDelete: !wantsChannel) {
        case .created(let id): return .active(appleChannelID: id)
        case .deleted: return .deleted
        case .failed(let reason, let detail): return .failed(reason: reason, detail: detail, keepsChannel: true)
        case .retry(let reason, let detail, let notBefore): return retryOrFail(change.attempts, reason, detail, notBefore: notBefore)
        }
    }

    private func retryOrFail(
        _ attempts: Int, _ reason: DeliveryReason, _ detail: JSONValue, notBefore: Date?
    ) -> LiveActivityChannelStore.ChangeResult {
        guard attempts < maxAttempts else {
            return .failed(
                reason: .maxAttempts, detail: ["last_reason": .string(reason.rawValue), "last_detail": detail], keepsChannel: true)
        }
        return .retry(
            at: retryPolicy.nextAttempt(after: attempts, now: Date(), unitRandom: Double.random(in: 0..<1), notBefore: notBefore),
            reason: reason, detail: detail)
    }

    // MARK: - Channel sends

    /// What one channel send comes to: its `delivery_events` row, and when to try again for a retry.
    struct Settlement: Sendable, Equatable {
        var event: DeliveryEvent
        var reason: DeliveryReason?
        var detail: JSONValue
        var retryAt: Date?
    }

    /// Sends `send` as one broadcast request, or settles it without one (canceled, expired, an unknown or deleted
    /// channel, a message that does not make a Live Activity broadcast).
    func send(_ send: LiveActivityChannelStore.ChannelSend) async -> Settlement {
        func failed(_ reason: DeliveryReason, _ detail: JSONValue) -> Settlement {
            Settlement(event: .failed, reason: reason, detail: detail, retryAt: nil)
        }
        let named: JSONValue = ["channel": .string(send.channelName)]
        if send.notificationStatus == "canceled" {
            return Settlement(event: .skipped, reason: .canceled, detail: named, retryAt: nil)
        }
        guard let text = send.message else {
            return failed(.payloadTooLarge, ["error": .string("message is larger than \(LiveActivityChannelStore.maximumMessageBytes) bytes")])
        }
        let message: NotificationMessage
        do {
            message = try NotificationMessage(json: try JSONValue(parsing: text))
        } catch let error as MessageError {
            return failed(.invalidMessage, ["field": .string(error.field), "error": .string(error.message)])
        } catch {
            return failed(.invalidMessage, ["error": "message is not JSON"])
        }
        let expiration = message.ttl.map { send.startAt.addingTimeInterval(Double($0)) }
        if let expiration, message.ttl != 0, expiration <= send.now {
            return Settlement(event: .skipped, reason: .expired, detail: named, retryAt: nil)
        }
        guard let state = send.channelState else {
            return failed(.unknownChannel, ["channel": .string(send.channelName), "error": "the app has no live_activity_channels row of that name"])
        }
        switch state {
        case "deleted": return failed(.channelDeleted, named)
        case "failed": return failed(.channelFailed, named)
        default: break
        }
        guard state == "active", let channelID = send.appleChannelID else {
            // Not created yet: the send waits for its reconciliation (counted, so a channel never created ends it).
            return retry(send, .channelNotReady, named, notBefore: nil)
        }
        let channel: AppChannel
        switch appChannel(settings: send.settings, endpoint: send.endpoint) {
        case .failure(let refusal): return failed(refusal.reason, refusal.detail)
        case .success(let found): channel = found
        }
        let origin = channel.endpoint ?? APNsSender.origin(forEnvironment: send.environment)
        let bundleID = channel.credentials.topic
        let response: PushResponse
        switch await self.send(
            { (authorization) throws(APNsRequestError) in
                try APNsBroadcast.broadcastRequest(
                    message: message, bundleID: bundleID, channelID: channelID, requestID: send.requestID,
                    authorization: authorization, appDefaultLanguage: send.appDefaultLanguage, expiration: expiration,
                    now: send.now)
            }, channel: channel, to: origin, appID: send.appID)
        {
        case .failure(let refusal):
            if refusal.reason == .transportError || refusal.reason == .providerTokenFailed || refusal.reason.rawValue == "provider_unreachable"
                || refusal.reason.rawValue == "origin_busy"
            {
                return retry(send, refusal.reason, refusal.detail, notBefore: nil)
            }
            return failed(refusal.reason, refusal.detail)
        case .success(let answered): response = answered
        }
        var detail: [String: JSONValue] = ["channel": .string(send.channelName), "apns_channel_id": .string(channelID)]
        switch APNsBroadcast.broadcastOutcome(response) {
        case .sent(let requestID):
            detail["apns_request_id"] = requestID.map(JSONValue.string) ?? .string(send.requestID.uuidString.lowercased())
            return Settlement(event: .sent, reason: nil, detail: .object(detail), retryAt: nil)
        case .failed(let reason, let answer, _):
            detail.merge(answer.objectValue ?? [:]) { ours, _ in ours }
            return failed(reason, .object(detail))
        case .retry(let reason, let answer, let notBefore):
            detail.merge(answer.objectValue ?? [:]) { ours, _ in ours }
            return retry(send, reason, .object(detail), notBefore: notBefore)
        default:
            return retry(send, .http(status: response.status), .object(detail), notBefore: nil)
        }
    }

    private func retry(
        _ send: LiveActivityChannelStore.ChannelSend, _ reason: DeliveryReason, _ detail: JSONValue, notBefore: Date?
    ) -> Settlement {
        guard send.attempt < maxAttempts else {
            return Settlement(
                event: .failed, reason: .maxAttempts, detail: ["last_reason": .string(reason.rawValue), "last_detail": detail],
                retryAt: nil)
        }
        let at = retryPolicy.nextAttempt(after: send.attempt, now: send.now, unitRandom: Double.random(in: 0..<1), notBefore: notBefore)
        var withNext = detail.objectValue ?? [:]
        withNext["next_attempt_at"] = .string(ISO8601DateFormatter().string(from: at))
        return Settlement(event: .retrying, reason: reason, detail: .object(withNext), retryAt: at)
    }
}
