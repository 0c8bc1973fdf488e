import DeliveryCore
import Foundation

/// Live Activity broadcast channels over APNs, without I/O (Apple: "Sending channel management requests to
/// APNs", "Sending broadcast push notification requests to APNs"; iOS 18 and iPadOS 18): the channel management
/// requests (create, delete), the broadcast request that reaches every device subscribed to a channel, and the
/// reading of their answers. Shared by the worker and `preview`.
///
/// - Channel management: `POST /1/apps/<bundle id>/channels` with the JSON body
///   `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`, answered `201` with the new channel's id in
///   the `apns-channel-id` header; `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id`, answered `204`.
///   Apple's hosts: `api-manage-broadcast.push.apple.com:2196` (production) and
///   `api-manage-broadcast.sandbox.push.apple.com:2195` (development).
/// - Broadcast: `POST /4/broadcasts/apps/<bundle id>` on `api.push.apple.com:443` (or the sandbox host) with
///   `apns-channel-id`, `apns-push-type: liveactivity`, `apns-priority`, `apns-expiration` when the message has a
///   deadline, and `apns-request-id` (the send's own id, kept for every attempt); the body is the Live Activity
///   payload (``APNsRequestFactory/payload(for:)``), at most 4096 bytes.
///
/// Every request carries `authorization: bearer <provider token>`: the worker uses the app's token-based
/// channel only, as for every Live Activity push (docs/live-activity-channels.md, "Credentials").
public enum APNsBroadcast {
    /// Apple's `message-storage-policy` values.
    public enum StoragePolicy: Int, Sendable {
        /// `0`: APNs stores no message for a device that is offline.
        case noMessageStored = 0
        /// `1`: APNs stores the most recent message for a device that is offline.
        case mostRecentMessageStored = 1
    }

    /// Apple's channel management hosts and ports by environment (`sandbox`, else production).
    public static func managementHost(environment: String) -> (host: String, port: Int) {
        environment == "sandbox"
            ? ("api-manage-broadcast.sandbox.push.apple.com", 2195) : ("api-manage-broadcast.push.apple.com", 2196)
    }

    /// `POST /1/apps/<bundle id>/channels`: a new Live Activity channel with `policy`.
    /// - Throws: `missing_topic` / `invalid_topic` for a bundle id that cannot go in a path, `invalid_provider_token`.
    public static func createChannelRequest(
        bundleID: String, policy: StoragePolicy, authorization: APNsProviderAuthorization
    ) throws(APNsRequestError) -> PushRequest {
        let body = #"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#
        return PushRequest(
            method: "POST", path: try channelsPath(bundleID),
            headers: [try authorizationHeader(authorization), PushHeader("content-type", "application/json")],
            body: Array(body.utf8))
    }

    /// `DELETE /1/apps/<bundle id>/channels` of `channelID`.
    /// - Throws: as ``createChannelRequest(bundleID:policy:authorization:)``, and `bad_channel_id` for an id
    ///   that is not a clean header value.
    public static func deleteChannelRequest(
        bundleID: String, channelID: String, authorization: APNsProviderAuthorization
    ) throws(APNsRequestError) -> PushRequest {
        PushRequest(
            method: "DELETE", path: try channelsPath(bundleID),
            headers: [try authorizationHeader(authorization), PushHeader("apns-channel-id", try checkedChannelID(channelID))],
            body: [])
    }

    /// The broadcast request of a Live Activity `message` on `channelID`.
    /// - Parameters:
    ///   - requestID: `apns-request-id`, the same for every attempt of one send.
    ///   - expiration: the notification's deadline, for `apns-expiration` (with the message's `ttl`, the earlier).
    /// - Throws: `invalid_message` for a message that is not a Live Activity push or does not render,
    ///   `payload_too_large`, and what ``deleteChannelRequest(bundleID:channelID:authorization:)`` throws.
    public static func broadcastRequest(
        message: NotificationMessage, bundleID: String, channelID: String, requestID: UUID,
        authorization: APNsProviderAuthorization, appDefaultLanguage: String?, expiration: Date?, now: Date
    ) throws(APNsRequestError) -> PushRequest {
        guard message.apnsPushType == .liveActivity else {
            throw APNsRequestError(
                reason: .invalidMessage, detail: "apns_push_type must be liveactivity to send on a live_activity_channel")
        }
        // The per-device request supplies the payload and the common headers (priority, expiration); a stand-in
        // token passes its checks and its path, topic and apns-id are left behind.
        let standIn = APNsDelivery(
            deviceToken: String(repeating: "0", count: 64), topic: bundleID, apnsID: requestID, message: message,
            appDefaultLanguage: appDefaultLanguage, msgID: "", expiration: expiration, now: now)
        let device = try APNsRequestFactory.makeRequest(
            standIn, authorization: authorization, body: { () throws(APNsRequestError) in try APNsRequestFactory.payload(for: standIn) })
        let kept: Set<String> = ["authorization", "apns-push-type", "apns-priority", "apns-expiration"]
        var headers = device.headers.filter { kept.contains($0.name) }
        headers.append(PushHeader("apns-channel-id", try checkedChannelID(channelID)))
        headers.append(PushHeader("apns-request-id", requestID.uuidString.lowercased()))
        return PushRequest(method: "POST", path: "/4/broadcasts/apps/\(try pathSegment(bundleID))", headers: headers, body: device.body)
    }

    /// What a channel management answer means for the channel's row.
    public enum ManagementOutcome: Sendable, Equatable {
        /// `201` with the channel's id (`apns-channel-id`).
        case created(channelID: String)
        /// `204` to a delete, or `404 ChannelNotRegistered` to one: the channel is gone either way.
        case deleted
        /// APNs refused the change for good (`reason` snake-cased from Apple's, `detail.apns_reason` as Apple spells it).
        case failed(reason: DeliveryReason, detail: JSONValue)
        /// Try again later (429, 5xx, a refused provider token, a create answered without a usable channel id).
        case retry(reason: DeliveryReason, detail: JSONValue, notBefore: Date?)
    }

    /// Reads the answer to a create (`forDelete` false) or delete request.
    public static func managementOutcome(_ response: PushResponse, forDelete: Bool, now: Date = Date()) -> ManagementOutcome {
        if forDelete, response.status == 204 || response.status == 200 { return .deleted }
        if !forDelete, response.status == 201 || response.status == 200 {
            guard let id = response.header("apns-channel-id"), isCleanChannelID(id) else {
                return .retry(
                    reason: .http(status: response.status), detail: ["error": "the answer carries no usable apns-channel-id"],
                    notBefore: nil)
            }
            return .created(channelID: id)
        }
        let answer = APNsResponseClassifier.answer(
            response, subscriptionTokenUpdatedAt: nil, sentToSubscriptionEnvironment: false, now: now)
        if forDelete, case .failed(let reason, _, _) = answer.outcome, reason == .channelNotRegistered {
            return .deleted
        }
        return switch answer.outcome {
        case .retry(let reason, let detail, let notBefore): .retry(reason: reason, detail: detail, notBefore: notBefore)
        // The app's credentials (403) are not the channel's fault: tried again, never recorded as the channel's error.
        case .channelError(let reason, let detail, _) where response.status == 403: .retry(reason: reason, detail: detail, notBefore: nil)
        case .channelError(let reason, let detail, _), .failed(let reason, let detail, _): .failed(reason: reason, detail: detail)
        default: .failed(reason: .http(status: response.status), detail: ["status": .int(Int64(response.status))])
        }
    }

    /// What a broadcast answer means for the notification: `sent` (with `apns-request-id`), `failed` (a deleted or
    /// unknown channel is `channel_not_registered`, a malformed id `bad_channel_id`), or `retry` (429, 5xx, and a
    /// refused provider token or topic: the app's credentials, which the send tries again rather than blame on
    /// the notification). Never a channel pause.
    public static func broadcastOutcome(_ response: PushResponse, now: Date = Date()) -> DeliveryOutcome {
        if response.status == 200 {
            let id = response.header("apns-request-id").flatMap { $0.utf8.count <= 64 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil }
            return .sent(providerMessageID: id)
        }
        let answer = APNsResponseClassifier.answer(
            response, subscriptionTokenUpdatedAt: nil, sentToSubscriptionEnvironment: false, now: now)
        switch answer.outcome {
        case .channelError(let reason, let detail, _): return .retry(reason: reason, detail: detail, notBefore: nil)
        case .failed(let reason, let detail, _): return .failed(reason: reason, detail: detail, invalidateSubscription: false)
        default: return answer.outcome
        }
    }

    /// Whether `id` may be sent as `apns-channel-id`: visible ASCII, at most 128 bytes (Apple's ids are base64 text).
    public static func isCleanChannelID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 128 && HTTPFieldValue.isVisibleASCII(id)
    }

    private static func checkedChannelID(_ id: String) throws(APNsRequestError) -> String {
        guard isCleanChannelID(id) else {
            throw APNsRequestError(reason: .badChannelID, detail: "the channel id is not a clean header value")
        }
        return id
    }

    private static func channelsPath(_ bundleID: String) throws(APNsRequestError) -> String {
        "/1/apps/\(try pathSegment(bundleID))/channels"
    }

    /// The bundle id as one path segment: letters, digits, `.`, `-` and `_` only (Apple's bundle ids are those).
    private static func pathSegment(_ bundleID: String) throws(APNsRequestError) -> String {
        guard !bundleID.isEmpty else { throw APNsRequestError(reason: .missingTopic, detail: "the channel has no topic") }
        guard bundleID.utf8.allSatisfy({ byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }) else {
            throw APNsRequestError(reason: .invalidTopic, detail: "the topic is not a bundle id that can go in a path")
        }
        return bundleID
    }

    private static func authorizationHeader(_ authorization: APNsProviderAuthorization) throws(APNsRequestError) -> PushHeader {
        guard let value = authorization.fieldValue else {
            throw APNsRequestError(reason: .invalidProviderToken, detail: "the provider token is not a clean header value")
        }
        return PushHeader("authorization", value)
    }
}
