import Testing
import Synchronization
@testable import HTTP2

@Suite("HTTP2 client header validation")
struct HTTP2HeaderValidationTests {
    /// A batch's requests are checked against the request accepted before them: only fields whose bytes differ
    /// from it are checked again, so a field equal to an accepted one only under Unicode canonical equivalence
    /// (what Swift's `==` compares) is still judged.
    @Test func fieldsEqualToAnAcceptedRequestsAreSkippedOnlyWhenTheirBytesAreEqual() {
        let accepted = HTTP2Request(path: "/a", headers: [HTTP2Header("authorization", "bearer x.y.z"), HTTP2Header("Key", "v")])
        #expect(accepted.validationError() == nil)
        let same = HTTP2Request(path: "/b", headers: [HTTP2Header("authorization", "bearer x.y.z"), HTTP2Header("Key", "v")])
        #expect(same.validationError(after: accepted) == nil)
        // U+212A KELVIN SIGN: `"\u{212A}ey" == "Key"` in Swift, yet it is no token.
        let kelvin = HTTP2Request(path: "/b", headers: [HTTP2Header("authorization", "bearer x.y.z"), HTTP2Header("\u{212A}ey", "v")])
        #expect(kelvin.headers[1].name == accepted.headers[1].name)
        #expect(kelvin.validationError(after: accepted)?.code == .invalidRequest)
        let injected = HTTP2Request(path: "/b", headers: [HTTP2Header("authorization", "bearer x.y.z\r\nx: 1"), HTTP2Header("Key", "v")])
        #expect(injected.validationError(after: accepted)?.code == .invalidRequest)
        let badMethod = HTTP2Request(method: "PO ST", path: "/b", headers: accepted.headers)
        #expect(badMethod.validationError(after: accepted)?.code == .invalidRequest)
        let badPath = HTTP2Request(path: "b", headers: accepted.headers)
        #expect(badPath.validationError(after: accepted)?.code == .invalidRequest)
    }

    @Test(arguments: [
        HTTP2Header("x-token", "abc\r\nx-injected: 1"),
        HTTP2Header("x-token", "abc\ndef"),
        HTTP2Header("x-token", "abc\u{0}def"),
        HTTP2Header("x-token", " leading"),
        HTTP2Header("x-token", "trailing\t"),
        HTTP2Header("bad name", "v"),
        HTTP2Header("", "v"),
        HTTP2Header(":path", "/other"),
        HTTP2Header("x-ümlaut", "v"),
        HTTP2Header("connection", "close"),
        HTTP2Header("transfer-encoding", "chunked"),
        HTTP2Header("te", "gzip"),
        // Names are case-insensitive (RFC 9110 §5.1): capitals are judged as their lower case.
        HTTP2Header("Connection", "close"),
        HTTP2Header("Keep-Alive", "timeout=5"),
        HTTP2Header("TE", "gzip"),
    ])
    func invalidHeadersFailAtOnceAndAreNeverSent(_ header: HTTP2Header) async throws {
        let loop = try HTTP2EventLoop(name: "test-invalid-header")
        defer { loop.shutdown() }
        let received = Atomic<Int>(0)
        let server = HTTP2Server(eventLoop: loop, tls: nil) { _ in
            received.add(1, ordering: .relaxed)
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let request = HTTP2Request(path: "/", headers: [HTTP2Header("authorization", "bearer s3cr3t"), header])
        let error = await #expect(throws: HTTP2Error.self) { _ = try await client.send(request, to: origin) }
        #expect(error?.code == .invalidRequest)
        #expect(error?.isSafeToRetry == false)
        // The value may be secret: the message names the header, never its value.
        #expect(error?.message.contains("abc") == false)
        #expect(error?.message.contains("s3cr3t") == false)
        if !header.name.isEmpty && header.name.utf8.allSatisfy({ $0 < 0x80 && $0 > 0x20 }) {
            #expect(error?.message.contains(header.name.lowercased()) == true)
        }
        // In a batch only that request fails; the valid one around it goes through.
        let batch = await client.send([HTTP2Request(path: "/a"), request, HTTP2Request(path: "/b")], to: origin)
        #expect(batch.count == 3)
        #expect((try? batch[0].get())?.status == 200)
        #expect((try? batch[2].get())?.status == 200)
        guard case .failure(let batchError as HTTP2Error) = batch[1] else {
            Issue.record("the invalid request did not fail: \(batch[1])")
            return
        }
        #expect(batchError.code == .invalidRequest && !batchError.isSafeToRetry)
        #expect(received.load(ordering: .relaxed) == 2)
        await client.shutdown()
        await server.shutdown()
    }

    @Test(arguments: [("POST", "relative"), ("POST", ""), ("POST", "/3/device/ab cd"), ("POST", "/x\r\ny"),
                      ("PO ST", "/"), ("", "/")])
    func invalidMethodOrPathFailsAtOnce(_ method: String, _ path: String) async throws {
        let loop = try HTTP2EventLoop(name: "test-invalid-path")
        defer { loop.shutdown() }
        let client = HTTP2Client(eventLoop: loop)
        // Nothing listens on port 1: had the request been queued, it would fail with .connectFailed instead.
        let error = await #expect(throws: HTTP2Error.self) {
            _ = try await client.send(HTTP2Request(method: method, path: path), to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 1))
        }
        #expect(error?.code == .invalidRequest)
        #expect(error?.isSafeToRetry == false)
        await client.shutdown()
    }

    @Test func acceptableHeadersStillGoOut() async throws {
        let loop = try HTTP2EventLoop(name: "test-valid-header")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            HTTP2ServerResponse(status: 200, headers: [HTTP2Header("x-echo", request.header("apns-topic") ?? "-"),
                                                       HTTP2Header("x-te", request.header("te") ?? "-")])
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        // Upper-case names are lower-cased by the client; inner spaces and visible punctuation are fine.
        let response = try await client.send(HTTP2Request(path: "/", headers: [
            HTTP2Header("Apns-Topic", "com.example.app; v=1 \"q\""), HTTP2Header("te", "trailers"), HTTP2Header("x-empty", ""),
        ]), to: origin)
        #expect(response.header("x-echo") == "com.example.app; v=1 \"q\"")
        #expect(response.header("x-te") == "trailers")
        await client.shutdown()
        await server.shutdown()
    }
}
