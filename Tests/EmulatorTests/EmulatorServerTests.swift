import Foundation
import HTTP2
import Testing
@testable import Emulator

/// The emulator's HTTP/2 server, with no latency (requests judged on its I/O thread).
@Suite struct EmulatorServerTests {
    /// A body past the emulator's cap is answered 413 unread, and requests on other connections are still
    /// answered: no provider's request is that large, and parsing one on the I/O thread would hold up the rest.
    @Test func aBodyOverTheCapIsRefusedUnreadAndOthersAreServed() async throws {
        let loop = try HTTP2EventLoop(name: "test-emulator-cap")
        defer { loop.shutdown() }
        let fcm = FCMEmulator(accounts: [])
        let server = EmulatorServer(
            eventLoop: loop, tls: nil,
            routes: [
                EmulatorServer.Route(pathPrefix: "/3/device/", provider: APNsEmulator(keys: [])),
                EmulatorServer.Route(pathPrefix: FCMEmulator.tokenPath, provider: fcm),
            ])
        let port = try server.start()
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let large = HTTP2Client(eventLoop: loop)
        let small = HTTP2Client(eventLoop: loop)
        let form = Array("grant_type=x&assertion=".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: EmulatorServer.maximumRequestBodySize)
        async let refused = large.send(HTTP2Request(path: FCMEmulator.tokenPath, body: form), to: origin)
        let judged = try await small.send(HTTP2Request(path: "/3/device/" + String(repeating: "ab", count: 32), body: Array("{}".utf8)), to: origin)
        #expect(try await refused.status == 413)
        // Judged as APNs judges a request without a provider token.
        #expect(judged.status == 403)
        await large.shutdown()
        await small.shutdown()
        await server.shutdown()
    }
}
