import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// The requests and answers of Live Activity broadcast channels (Apple: "Sending channel management requests to
/// APNs", "Sending broadcast push notification requests to APNs"), without I/O.
@Suite struct APNsBroadcastTests {
    static let authorization = APNsProviderAuthorization(bearerToken: "jwt.token.sig")
    static let now = Date(timeIntervalSince1970: 1_764_590_000)
    static let requestID = UUID(uuidString: "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10")!

    func message(_ text: String) throws -> NotificationMessage {
        try NotificationMessage(json: try JSONValue(parsing: text))
    }

    @Test func createAndDeleteRequestsAreApplesShapes() throws {
        let create = try APNsBroadcast.createChannelRequest(
            bundleID: "com.example.app", policy: .mostRecentMessageStored, authorization: Self.authorization)
        #expect(create.method == "POST" && create.path == "/1/apps/com.example.app/channels")
        #expect(String(decoding: create.body, as: UTF8.self) == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(create.header("authorization") == "bearer jwt.token.sig")
        let delete = try APNsBroadcast.deleteChannelRequest(
            bundleID: "com.example.app", channelID: "dHdvMTIzNDU2Nzg5MA==", authorization: Self.authorization)
        #expect(delete.method == "DELETE" && delete.path == "/1/apps/com.example.app/channels" && delete.body.isEmpty)
        #expect(delete.header("apns-channel-id") == "dHdvMTIzNDU2Nzg5MA==")
        #expect(APNsBroadcast.managementHost(environment: "production") == ("api-manage-broadcast.push.apple.com", 2196))
        #expect(APNsBroadcast.managementHost(environment: "sandbox") == ("api-manage-broadcast.sandbox.push.apple.com", 2195))
        // Nothing that is not a bundle id reaches the path, nothing unclean a header.
        #expect(throws: APNsRequestError.self) {
            try APNsBroadcast.createChannelRequest(bundleID: "a/../b", policy: .noMessageStored, authorization: Self.authorization)
        }
        #expect(throws: APNsRequestError.self) {
            try APNsBroadcast.deleteChannelRequest(bundleID: "com.example.app", channelID: "a\r\nb", authorization: Self.authorization)
        }
    }

    @Test func broadcastRequestCarriesTheChannelAndTheLiveActivityPayload() throws {
        let live = try message(#"""
            {"apns_push_type": "liveactivity", "priority": "normal", "ttl": 600,
             "live_activity": {"event": "update", "timestamp": 1764590400, "content_state": {"home": 2}}}
            """#)
        let request = try APNsBroadcast.broadcastRequest(
            message: live, bundleID: "com.example.app", channelID: "Y2hhbm5lbA==", requestID: Self.requestID,
            authorization: Self.authorization, appDefaultLanguage: "en", expiration: nil, now: Self.now)
        #expect(request.method == "POST" && request.path == "/4/broadcasts/apps/com.example.app")
        #expect(request.header("apns-channel-id") == "Y2hhbm5lbA==")
        #expect(request.header("apns-push-type") == "liveactivity")
        #expect(request.header("apns-priority") == "5")
        #expect(request.header("apns-expiration") == "\(Int(Self.now.timeIntervalSince1970) + 600)")
        #expect(request.header("apns-request-id") == "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10")
        // Per-device fields stay behind.
        #expect(request.header("apns-topic") == nil && request.header("apns-id") == nil)
        #expect(String(decoding: request.body, as: UTF8.self)
            == #"{"aps":{"content-state":{"home":2},"event":"update","timestamp":1764590400}}"#)
        // Only a Live Activity push goes on a channel.
        #expect(throws: APNsRequestError.self) {
            try APNsBroadcast.broadcastRequest(
                message: try message(#"{"contents": {"en": "hi"}}"#), bundleID: "com.example.app", channelID: "Y2hhbm5lbA==",
                requestID: Self.requestID, authorization: Self.authorization, appDefaultLanguage: "en", expiration: nil, now: Self.now)
        }
    }

    static func answer(_ status: Int, _ reason: String? = nil, headers: [PushHeader] = []) -> PushResponse {
        PushResponse(status: status, headers: headers, body: reason.map { Array(#"{"reason":"\#($0)"}"#.utf8) } ?? [])
    }

    @Test func managementAnswers() {
        #expect(APNsBroadcast.managementOutcome(Self.answer(201, headers: [PushHeader("apns-channel-id", "Y2g=")]), forDelete: false)
            == .created(channelID: "Y2g="))
        // A create without a channel id cannot be recorded: tried again.
        guard case .retry = APNsBroadcast.managementOutcome(Self.answer(201), forDelete: false) else {
            Issue.record("a 201 without apns-channel-id must be retried")
            return
        }
        #expect(APNsBroadcast.managementOutcome(Self.answer(204), forDelete: true) == .deleted)
        // Deleting a channel APNs no longer knows is done.
        #expect(APNsBroadcast.managementOutcome(Self.answer(404, "ChannelNotRegistered"), forDelete: true) == .deleted)
        guard case .failed(let reason, _) = APNsBroadcast.managementOutcome(Self.answer(400, "CannotCreateChannelConfig"), forDelete: false)
        else {
            Issue.record("CannotCreateChannelConfig must fail the change")
            return
        }
        #expect(reason.rawValue == "cannot_create_channel_config")
        for transient in [Self.answer(429, "TooManyRequests"), Self.answer(503, "ServiceUnavailable"), Self.answer(403, "ExpiredProviderToken")] {
            guard case .retry = APNsBroadcast.managementOutcome(transient, forDelete: false) else {
                Issue.record("\(transient.status) must be retried")
                continue
            }
        }
    }

    @Test func broadcastAnswersFailTheNotificationOrRetryButNeverPause() {
        #expect(APNsBroadcast.broadcastOutcome(Self.answer(200, headers: [PushHeader("apns-request-id", "r-1")]))
            == .sent(providerMessageID: "r-1"))
        for (status, reason, stored) in [
            (404, "ChannelNotRegistered", "channel_not_registered"), (400, "BadChannelId", "bad_channel_id"),
            (400, "MissingChannelId", "missing_channel_id"), (413, "PayloadTooLarge", "payload_too_large"),
        ] {
            guard case .failed(let got, _, let invalidates) = APNsBroadcast.broadcastOutcome(Self.answer(status, reason)) else {
                Issue.record("\(reason) must fail the notification")
                continue
            }
            #expect(got.rawValue == stored && !invalidates)
        }
        for (status, reason) in [(429, "TooManyRequests"), (500, "InternalServerError"), (403, "InvalidProviderToken")] {
            guard case .retry = APNsBroadcast.broadcastOutcome(Self.answer(status, reason)) else {
                Issue.record("\(reason) must be retried, never a channel pause")
                continue
            }
        }
    }
}
