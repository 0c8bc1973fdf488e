import Foundation
import Testing
import PushCrypto
@testable import Emulator

/// The emulator's channel management and broadcast APIs, with Apple's error answers.
@Suite struct APNsEmulatedChannelsTests {
    let key: P256PrivateKey
    let emulator: APNsEmulator
    let builder: RequestBuilder

    init() throws {
        key = try P256PrivateKey.generate()
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_100))
        emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                now: { clock.now })
        builder = RequestBuilder(key: key)
    }

    func request(_ method: String, _ path: String, _ headers: [String: String] = [:], body: String = "") throws -> EmulatorRequest {
        var list = [EmulatorHeader("authorization", "bearer \(try builder.jwt())")]
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { list.append(EmulatorHeader(name, value)) }
        return EmulatorRequest(method: method, path: path, authority: "localhost", headers: list, body: Array(body.utf8))
    }

    @Test func createReadBroadcastDelete() throws {
        let created = emulator.handle(try request(
            "POST", "/1/apps/com.example.app/channels", body: #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#))
        #expect(created.status == 201)
        let id = try #require(created.header("apns-channel-id"))
        #expect(Data(base64Encoded: id) != nil)
        let read = emulator.handle(try request("GET", "/1/apps/com.example.app/channels", ["apns-channel-id": id]))
        #expect(read.status == 200 && String(decoding: read.body, as: UTF8.self).contains(#""message-storage-policy":1"#))
        let listed = emulator.handle(try request("GET", "/1/apps/com.example.app/all-channels"))
        #expect(String(decoding: listed.body, as: UTF8.self) == #"{"channels":["\#(id)"]}"#)
        let sent = emulator.handle(try request(
            "POST", "/4/broadcasts/apps/com.example.app",
            ["apns-channel-id": id, "apns-push-type": "liveactivity", "apns-priority": "10",
             "apns-request-id": "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10"],
            body: #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#))
        #expect(sent.status == 200 && sent.header("apns-request-id") == "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10")
        #expect(emulator.broadcastChannels.acceptedBroadcasts.map(\.channelID) == [id])
        #expect(emulator.handle(try request("DELETE", "/1/apps/com.example.app/channels", ["apns-channel-id": id])).status == 204)
        // Gone: a broadcast or a second delete names a channel APNs does not hold.
        let after = emulator.handle(try request(
            "POST", "/4/broadcasts/apps/com.example.app", ["apns-channel-id": id, "apns-push-type": "liveactivity"],
            body: #"{"aps":{}}"#))
        #expect(after.status == 404 && reason(after) == "ChannelNotRegistered")
        #expect(reason(emulator.handle(try request("DELETE", "/1/apps/com.example.app/channels", ["apns-channel-id": id])))
            == "ChannelNotRegistered")
        // Device pushes are untouched by these paths.
        #expect(emulator.handle(try builder.request()).status == 200)
    }

    @Test func applesErrorAnswers() throws {
        let path = "/4/broadcasts/apps/com.example.app"
        #expect(reason(emulator.handle(try request("POST", path, ["apns-push-type": "liveactivity"], body: #"{"aps":{}}"#)))
            == "MissingChannelId")
        #expect(reason(emulator.handle(try request(
            "POST", path, ["apns-channel-id": "not base64!", "apns-push-type": "liveactivity"], body: #"{"aps":{}}"#))) == "BadChannelId")
        let channels = "/1/apps/com.example.app/channels"
        #expect(reason(emulator.handle(try request("POST", channels, body: #"{"message-storage-policy": 0}"#))) == "MissingPushType")
        #expect(reason(emulator.handle(try request(
            "POST", channels, body: #"{"message-storage-policy": 0, "push-type": "Alert"}"#))) == "InvalidPushType")
        // The provider token is checked as for device pushes.
        var unsigned = try request("POST", channels, body: #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#)
        unsigned.headers.removeAll { $0.name == "authorization" }
        let refused = emulator.handle(unsigned)
        #expect(refused.status == 403 && reason(refused) == "MissingProviderToken")
    }

    @Test func pastTheChannelLimitACreateIsRefused() throws {
        let channels = APNsEmulatedChannels(channelLimit: 1)
        let body = #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#
        func create() throws -> EmulatorResponse? {
            channels.handle(try request("POST", "/1/apps/com.example.app/channels", body: body), at: Date()) { _, _ in nil }
        }
        #expect(try create()?.status == 201)
        let refused = try #require(try create())
        #expect(refused.status == 400 && reason(refused) == "CannotCreateChannelConfig")
        #expect(channels.channels(of: "com.example.app").count == 1)
    }
}
