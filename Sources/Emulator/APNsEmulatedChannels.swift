import DeliveryCore
import Foundation
import Synchronization
import UUIDText

/// One broadcast the emulator accepted on a channel.
public struct APNsAcceptedBroadcast: Sendable, Hashable {
    public var receivedAt: Date
    public var bundleID: String
    public var channelID: String
    /// `apns-request-id`: the request's when it sent one, else the one the answer made.
    public var requestID: String
    public var priority: String?
    public var expiration: String?
    /// The payload exactly as received (UTF-8 JSON).
    public var payload: [UInt8]
}

/// APNs's Live Activity broadcast channels, as the emulator plays them (Apple: "Sending channel management
/// requests to APNs", "Sending broadcast push notification requests to APNs"), without networking. Apple serves
/// channel management on hosts and ports of its own; the emulator serves both APIs on its one listener, told
/// apart by path:
///
/// - `POST /1/apps/<bundle id>/channels`: body `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`
///   (400 `MissingPushType`, 400 `InvalidPushType`, 400 `BadPayload` for a body or storage policy it cannot read,
///   an emulator-only reason), at most ``channelLimit`` live channels per bundle id (400 `CannotCreateChannelConfig`);
///   answered 201 with a new base64 `apns-channel-id`.
/// - `GET /1/apps/<bundle id>/channels` with `apns-channel-id`: 200 `{"message-storage-policy", "push-type"}`.
/// - `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id`: 204.
/// - `GET /1/apps/<bundle id>/all-channels`: 200 `{"channels": [...]}`.
/// - `POST /4/broadcasts/apps/<bundle id>` with `apns-channel-id` and `apns-push-type: liveactivity` (400
///   `MissingPushType` / `InvalidPushType`), `apns-priority` 1, 5 or 10 (400 `BadPriority`), a body of at most 4096
///   bytes (413 `PayloadTooLarge`) that is a JSON object with an `aps` object (400 `PayloadEmpty`): 200 with
///   `apns-request-id`.
///
/// Every request needs a provider token the emulator trusts (403 as for device pushes). A request naming a
/// channel: no `apns-channel-id` is 400 `MissingChannelId`, one that is not base64 400 `BadChannelId`, one this
/// bundle id does not hold (never created, or deleted) 404 `ChannelNotRegistered`. Every answer carries
/// `apns-request-id`: the request's, else a new UUID.
public final class APNsEmulatedChannels: Sendable {
    /// The path prefix of channel management requests (`/1/apps/<bundle id>/channels`, `.../all-channels`): an
    /// ``EmulatorServer`` route to the ``APNsEmulator``.
    public static let managementPathPrefix = "/1/apps/"
    /// The path prefix of broadcast requests (`/4/broadcasts/apps/<bundle id>`), likewise.
    public static let broadcastPathPrefix = "/4/broadcasts/"

    /// Live channels one bundle id may hold (Apple: 10,000 per app and environment).
    public let channelLimit: Int

    private struct State {
        /// Live channels by bundle id: channel id -> message storage policy.
        var channels: [String: [String: Int]] = [:]
        var accepted: AcceptedRecords<APNsAcceptedBroadcast> = AcceptedRecords(retainLimit: 10_000)
        var deletedCount = 0
    }

    private let state = Mutex(State())

    public init(channelLimit: Int = 10_000) {
        self.channelLimit = channelLimit
    }

    /// The live channels of `bundleID`, with their message storage policy.
    public func channels(of bundleID: String) -> [String: Int] { state.withLock { $0.channels[bundleID] ?? [:] } }

    /// Deletes `channelID` of `bundleID` as another provider server of the app would, through no request here (a
    /// channel the worker still believes in then answers `ChannelNotRegistered`).
    public func deleteOutOfBand(_ channelID: String, of bundleID: String) {
        state.withLock { _ = $0.channels[bundleID]?.removeValue(forKey: channelID) }
    }

    /// Broadcasts accepted, oldest first (the most recent 10,000).
    public var acceptedBroadcasts: [APNsAcceptedBroadcast] { state.withLock { $0.accepted.recent } }

    /// Channels deleted so far.
    public var deletedCount: Int { state.withLock { $0.deletedCount } }

    /// The answer to a channel management or broadcast request, or nil for any other path.
    /// - Parameter checkToken: the emulator's provider-token check: nil when acceptable, else status and reason.
    func handle(
        _ request: EmulatorRequest, at current: Date, checkToken: (String?, Date) -> (Int, String)?
    ) -> EmulatorResponse? {
        let route: (bundleID: String, kind: Route)
        if let rest = request.path.dropPrefix(Self.broadcastPathPrefix + "apps/"), !rest.isEmpty, !rest.contains("/") {
            route = (rest, .broadcast)
        } else if let rest = request.path.dropPrefix(Self.managementPathPrefix), let slash = rest.firstIndex(of: "/") {
            let tail = rest[rest.index(after: slash)...]
            guard tail == "channels" || tail == "all-channels" else { return nil }
            route = (String(rest[..<slash]), tail == "channels" ? .channel : .all)
        } else {
            return nil
        }
        let requestID = request.header("apns-request-id").flatMap { CanonicalUUIDText.parse($0) == nil ? nil : $0 }
            ?? UUID().uuidString.lowercased()
        func answer(_ status: Int, _ headers: [EmulatorHeader] = [], body: String = "") -> EmulatorResponse {
            EmulatorResponse(status: status, headers: [EmulatorHeader("apns-request-id", requestID)] + headers, body: Array(body.utf8))
        }
        func reject(_ status: Int, _ reason: String) -> EmulatorResponse {
            answer(status, [EmulatorHeader("content-type", "application/json")], body: #"{"reason":"\#(reason)"}"#)
        }
        if let (status, reason) = checkToken(request.header("authorization"), current) { return reject(status, reason) }
        let bundleID = route.bundleID
        switch (route.kind, request.method) {
        case (.channel, "POST"):
            guard case .object(let body)? = try? JSONValue(parsing: String(decoding: request.body, as: UTF8.self)) else {
                return reject(400, "BadPayload")
            }
            guard let pushType = body["push-type"] else { return reject(400, "MissingPushType") }
            guard pushType.stringValue == "LiveActivity" else { return reject(400, "InvalidPushType") }
            guard let policy = body["message-storage-policy"]?.int64Value, policy == 0 || policy == 1 else {
                return reject(400, "BadPayload")
            }
            let id = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            let created = state.withLock { state -> Bool in
                guard (state.channels[bundleID]?.count ?? 0) < channelLimit else { return false }
                state.channels[bundleID, default: [:]][id] = Int(policy)
                return true
            }
            return created ? answer(201, [EmulatorHeader("apns-channel-id", id)]) : reject(400, "CannotCreateChannelConfig")
        case (.channel, "GET"), (.channel, "DELETE"), (.broadcast, "POST"):
            guard let channelID = request.header("apns-channel-id"), !channelID.isEmpty else {
                return reject(400, "MissingChannelId")
            }
            guard Data(base64Encoded: channelID) != nil else { return reject(400, "BadChannelId") }
            guard let policy = channels(of: bundleID)[channelID] else { return reject(404, "ChannelNotRegistered") }
            switch (route.kind, request.method) {
            case (.channel, "GET"):
                return answer(
                    200, [EmulatorHeader("content-type", "application/json")],
                    body: #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#)
            case (.channel, _):
                state.withLock { state in
                    if state.channels[bundleID]?.removeValue(forKey: channelID) != nil { state.deletedCount += 1 }
                }
                return answer(204)
            default:
                return broadcast(request, bundleID: bundleID, channelID: channelID, requestID: requestID, at: current, answer: answer, reject: reject)
            }
        case (.all, "GET"):
            let ids = channels(of: bundleID).keys.sorted().map { #""\#($0)""# }.joined(separator: ",")
            return answer(200, [EmulatorHeader("content-type", "application/json")], body: #"{"channels":[\#(ids)]}"#)
        default:
            return reject(405, "MethodNotAllowed")
        }
    }

    private enum Route { case channel, all, broadcast }

    private func broadcast(
        _ request: EmulatorRequest, bundleID: String, channelID: String, requestID: String, at current: Date,
        answer: (Int, [EmulatorHeader], String) -> EmulatorResponse, reject: (Int, String) -> EmulatorResponse
    ) -> EmulatorResponse {
        guard let pushType = request.header("apns-push-type") else { return reject(400, "MissingPushType") }
        guard pushType == "liveactivity" else { return reject(400, "InvalidPushType") }
        let priority = request.header("apns-priority")
        if let priority, !["1", "5", "10"].contains(priority) { return reject(400, "BadPriority") }
        let expiration = request.header("apns-expiration")
        if let expiration, Int64(expiration) == nil { return reject(400, "BadExpirationDate") }
        guard request.body.count <= 4096 else { return reject(413, "PayloadTooLarge") }
        guard case .object(let payload)? = try? JSONValue(validatingShallowly: request.body), case .object? = payload["aps"] else {
            return reject(400, "PayloadEmpty")
        }
        let accepted = APNsAcceptedBroadcast(
            receivedAt: current, bundleID: bundleID, channelID: channelID, requestID: requestID, priority: priority,
            expiration: expiration, payload: request.body)
        state.withLock { $0.accepted.append(accepted) }
        return answer(200, [], "")
    }
}

extension String {
    /// The rest after `prefix`, or nil when the string does not start with it.
    fileprivate func dropPrefix(_ prefix: String) -> String? {
        hasPrefix(prefix) ? String(dropFirst(prefix.count)) : nil
    }
}
