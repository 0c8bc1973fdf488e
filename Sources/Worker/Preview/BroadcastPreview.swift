import DeliveryCore
import Foundation
import HTTP2
import Providers

/// `preview` of a notification whose target is a Live Activity broadcast channel (docs/live-activity-channels.md,
/// docs/preview.md): the one broadcast request the worker would send for it, built by the worker's own
/// ``APNsBroadcast/broadcastRequest(message:bundleID:channelID:requestID:authorization:appDefaultLanguage:expiration:now:)``,
/// or the failure it would record instead. No subscription is involved.
///
/// Input: the preview document with `notification.target` `{"live_activity_channel": "<name>"}`, `app.channels.apns`
/// (`topic`, `endpoint`?) and the channel's row as `live_activity_channel`: `{"apple_channel_id", "environment"?,
/// "state"?}` (`state` defaults to `active`); `notification.id` (the send's `apns-request-id`; a placeholder
/// without it), `notification.created_at` / `send_after` (where the `ttl` counts from) and `app.default_language`.
enum BroadcastPreview {
    /// The `apns-request-id` shown when `notification.id` is not given.
    static let placeholderRequestID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1))

    static func run(_ input: JSONValue, channel: LiveActivityChannelTarget, egressPolicy: EgressPolicy) throws(PreviewError)
        -> JSONValue
    {
        var notes: [JSONValue] = []
        func answer(_ decision: JSONValue, _ request: JSONValue? = nil) -> JSONValue {
            var output: [String: JSONValue] = ["decision": decision]
            if let request { output["request"] = request }
            if !notes.isEmpty { output["notes"] = .array(notes) }
            return .object(output)
        }
        func fail(_ reason: DeliveryReason, _ detail: JSONValue = .null) -> JSONValue {
            answer(Preview.decision(for: .failed(reason: reason, detail: detail), provider: .apns))
        }
        let notification = input["notification"] ?? [:]
        guard let messageJSON = notification["message"], case .object = messageJSON else {
            throw PreviewError("notification.message must be a JSON object (the notifications.message column)")
        }
        let message: NotificationMessage
        do {
            message = try NotificationMessage(json: messageJSON)
        } catch {
            return answer(Preview.decision(for: error.outcome, provider: .apns))
        }
        guard message.apnsPushType == .liveActivity else {
            return fail(.invalidMessage, ["error": "apns_push_type must be liveactivity for a live_activity_channel target"])
        }
        guard let row = input["live_activity_channel"], case .object = row else {
            notes.append(.string("live_activity_channel (the channel's row) not given: the worker fails a send to a name no row has"))
            return fail(.unknownChannel, ["channel": .string(channel.name)])
        }
        switch row["state"]?.stringValue ?? "active" {
        case "deleted": return fail(.channelDeleted, ["channel": .string(channel.name)])
        case "failed": return fail(.channelFailed, ["channel": .string(channel.name)])
        case "active": break
        default:
            return answer(Preview.decision(
                for: .retry(reason: .channelNotReady, detail: ["channel": .string(channel.name)]),
                provider: .apns))
        }
        guard let channelID = row["apple_channel_id"]?.stringValue else {
            throw PreviewError("live_activity_channel.apple_channel_id is required for an active channel")
        }
        let apns = input["app"]?["channels"]?["apns"] ?? [:]
        guard let topic = apns["topic"]?.stringValue, !topic.isEmpty else {
            return answer(Preview.decision(
                for: .channelError(reason: .invalidChannelSettings, detail: ["error": "app.channels.apns.topic is missing"]),
                provider: .apns))
        }
        var origin = APNsSender.origin(forEnvironment: row["environment"]?.stringValue)
        if let endpoint = apns["endpoint"]?.stringValue, !endpoint.isEmpty {
            do {
                origin = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
            } catch {
                return answer(Preview.decision(
                    for: .channelError(reason: .invalidChannelSettings, detail: ["error": .string(error.message)]), provider: .apns))
            }
        }
        let at = Self.date(input["at"]) ?? Date()
        let start = Self.date(notification["send_after"]) ?? Self.date(notification["created_at"]) ?? at
        let requestID = notification["id"]?.stringValue.flatMap(UUID.init(uuidString:)) ?? placeholderRequestID
        if notification["id"] == nil { notes.append("notification.id not given: apns-request-id is a placeholder") }
        do {
            let request = try APNsBroadcast.broadcastRequest(
                message: message, bundleID: topic, channelID: channelID, requestID: requestID,
                authorization: APNsProviderAuthorization(bearerToken: Preview.providerTokenPlaceholder),
                appDefaultLanguage: input["app"]?["default_language"]?.stringValue,
                expiration: message.ttl.map { start.addingTimeInterval(Double($0)) }, now: at)
            return answer(["action": "send", "provider": "apns"], Preview.describe(request, origin: origin.description))
        } catch {
            return answer(Preview.decision(for: error.outcome, provider: .apns))
        }
    }

    private static func date(_ value: JSONValue?) -> Date? {
        value?.stringValue.flatMap { try? Date($0, strategy: .iso8601) }
    }
}
