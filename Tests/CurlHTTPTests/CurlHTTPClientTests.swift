import Foundation
import HTTP2
import Synchronization
import SocketTestSupport
import Testing
@testable import CurlHTTP

/// The webhook client against a real HTTP/2 server over TLS on loopback (the provider emulator's server),
/// with a certificate authority generated for the test.
@Suite("CurlHTTP client")
struct CurlHTTPClientTests {
    /// A TLS server on 127.0.0.1 whose certificate names `localhost`, and a client trusting its CA.
    final class Receiver: Sendable {
        let loop: HTTP2EventLoop
        let server: HTTP2Server
        let port: Int
        let caFile: String
        let requests = RequestLog()

        init(_ handler: @escaping @Sendable (HTTP2ServerRequest) async -> HTTP2ServerResponse) throws {
            let files = try LocalCertificateAuthority.generate(in: temporaryDirectory("curl-receiver"), hostnames: ["localhost"])
            loop = try HTTP2EventLoop(name: "test-curl-receiver")
            let requests = self.requests
            server = HTTP2Server(eventLoop: loop, tls: TLSServerConfiguration(certificateChainFile: files.certificateChain,
                                                                              privateKeyFile: files.privateKey)) { request in
                requests.append(request)
                return await handler(request)
            }
            port = try server.start()
            caFile = files.caCertificate
        }

        var url: String { "https://localhost:\(port)/hooks/secret-path?token=abc123" }

        func client(_ adjust: (inout CurlHTTPClientConfiguration) -> Void = { _ in }) -> CurlHTTPClient {
            var configuration = CurlHTTPClientConfiguration()
            configuration.egressPolicy = .unrestricted
            configuration.caFile = caFile
            adjust(&configuration)
            return CurlHTTPClient(configuration: configuration)
        }

        func stop() async {
            await server.shutdown()
            loop.shutdown()
        }
    }

    @Test func aPostReachesTheReceiverOverVerifiedTLSWithItsFieldsAndBody() async throws {
        let receiver = try Receiver { request in
            HTTP2ServerResponse(status: 202, headers: [HTTP2Header("retry-after", "7")], body: request.body.reversed())
        }
        let client = receiver.client()
        let body = Array(#"{"events":[1,2,3]}"#.utf8)
        let response = try await client.send(CurlHTTPRequest(
            url: receiver.url, headers: [("content-type", "application/json"), ("webhook-id", "msg_1")], body: body))
        #expect(response.status == 202)
        #expect(response.body == body.reversed())
        #expect(response.retryAfter == "7")
        #expect(response.httpVersion == 2)
        let seen = try #require(receiver.requests.withLock { $0.first })
        #expect(seen.method == "POST" && seen.path == "/hooks/secret-path?token=abc123" && seen.body == body)
        #expect(seen.header("webhook-id") == "msg_1" && seen.header("content-type") == "application/json")
        #expect(seen.header("expect") == nil && seen.header("accept-encoding") == nil)
        await client.shutdown()
        await receiver.stop()
    }

    @Test func aRedirectIsAnAnswerNotFollowed() async throws {
        let receiver = try Receiver { request in
            request.path == "/elsewhere" ? HTTP2ServerResponse(status: 200)
                : HTTP2ServerResponse(status: 307, headers: [HTTP2Header("location", "/elsewhere")])
        }
        let client = receiver.client()
        let response = try await client.send(CurlHTTPRequest(url: receiver.url, body: [1]))
        #expect(response.status == 307)
        #expect(receiver.requests.withLock { $0.map(\.path) } == ["/hooks/secret-path?token=abc123"])
        await client.shutdown()
        await receiver.stop()
    }

    @Test func aCertificateFromAnotherAuthorityFailsTheHandshake() async throws {
        let receiver = try Receiver { _ in HTTP2ServerResponse(status: 200) }
        let other = try LocalCertificateAuthority.generate(in: temporaryDirectory("curl-other-ca"))
        let client = receiver.client { $0.caFile = other.caCertificate }
        await #expect {
            _ = try await client.send(CurlHTTPRequest(url: receiver.url))
        } throws: { ($0 as? CurlHTTPError)?.code == .tlsFailed }
        #expect(receiver.requests.withLock { $0.isEmpty })
        await client.shutdown()
        await receiver.stop()
    }

    @Test func privateAddressesAreRefusedLiteralOrResolvedWithoutAConnection() async throws {
        let listener = try LoopbackListener()
        defer { listener.close() }
        let client = CurlHTTPClient(configuration: CurlHTTPClientConfiguration())  // public internet only
        for url in ["https://127.0.0.1:\(listener.port)/", "https://0x7f.1:\(listener.port)/", "https://[::ffff:127.0.0.1]:\(listener.port)/",
                    // A name: refused at connect time, for each address it resolved to.
                    "https://localhost:\(listener.port)/"] {
            await #expect {
                _ = try await client.send(CurlHTTPRequest(url: url, body: [1]))
            } throws: { error in
                guard let error = error as? CurlHTTPError else { return false }
                return error.code == .forbiddenAddress && error.message.contains("loopback")
            }
        }
        #expect(listener.acceptedNothing())
        // Cleartext is refused under the same policy before anything else.
        await #expect {
            _ = try await client.send(CurlHTTPRequest(url: "http://example.com/hook"))
        } throws: { ($0 as? CurlHTTPError)?.code == .cleartext }
        await client.shutdown()
    }

    @Test func malformedRequestsFailBeforeAnythingIsSent() async throws {
        let client = CurlHTTPClient(configuration: CurlHTTPClientConfiguration())
        let cases: [(CurlHTTPRequest, CurlHTTPError.Code)] = [
            (CurlHTTPRequest(url: "https://user:password@example.com/"), .invalidURL),
            (CurlHTTPRequest(url: "not a url"), .invalidURL),
            (CurlHTTPRequest(url: "ftp://example.com/"), .invalidURL),
            (CurlHTTPRequest(url: "https://example.com/", headers: [("x-a", "b\r\nx-injected: 1")]), .invalidRequest),
            (CurlHTTPRequest(url: "https://example.com/", headers: [("x-a:b", "c")]), .invalidRequest),
        ]
        for (request, code) in cases {
            await #expect {
                _ = try await client.send(request)
            } throws: { error in
                guard let error = error as? CurlHTTPError else { return false }
                // Nothing of the URL beyond its host, and nothing of a header value, is repeated.
                return error.code == code && !error.message.contains("password") && !error.message.contains("injected")
            }
        }
        await client.shutdown()
    }

    @Test func anAnswerPastTheBoundFailsAndOneAtTheBoundIsKept() async throws {
        let receiver = try Receiver { request in
            HTTP2ServerResponse(status: 200, body: [UInt8](repeating: 0x61, count: request.path.hasPrefix("/big") ? 1 << 20 : 4096))
        }
        let client = receiver.client { $0.maximumResponseBodySize = 4096 }
        let atBound = try await client.send(CurlHTTPRequest(url: "https://localhost:\(receiver.port)/small"))
        #expect(atBound.body.count == 4096)
        await #expect {
            _ = try await client.send(CurlHTTPRequest(url: "https://localhost:\(receiver.port)/big"))
        } throws: { ($0 as? CurlHTTPError)?.code == .responseTooLarge }
        await client.shutdown()
        await receiver.stop()
    }

    @Test func aStalledReceiverTimesOutWhileAnotherRequestIsAnsweredMeanwhile() async throws {
        let stall = Gate()
        let receiver = try Receiver { request in
            if request.path == "/stall" { await stall.wait() }
            return HTTP2ServerResponse(status: 204)
        }
        let client = receiver.client { $0.totalTimeout = .seconds(2) }
        let stalled = Task { () -> CurlHTTPError? in
            do {
                _ = try await client.send(CurlHTTPRequest(url: "https://localhost:\(receiver.port)/stall"))
                return nil
            } catch let error as CurlHTTPError {
                return error
            } catch {
                return nil
            }
        }
        // Answered while the other request is still held by the receiver (the gate opens only below).
        let other = try await client.send(CurlHTTPRequest(url: "https://localhost:\(receiver.port)/fine"))
        #expect(other.status == 204)
        let error = await stalled.value
        #expect(error?.code == .timedOut)
        #expect(error.map { !$0.message.contains("stall") } == true)
        stall.open()
        await client.shutdown()
        await receiver.stop()
    }

    @Test func shutdownFailsWhatIsRunningAndLaterRequests() async throws {
        let stall = Gate()
        let receiver = try Receiver { _ in
            await stall.wait()
            return HTTP2ServerResponse(status: 204)
        }
        let client = receiver.client { $0.totalTimeout = .seconds(600) }
        let running = Task { () -> CurlHTTPError? in
            do { _ = try await client.send(CurlHTTPRequest(url: receiver.url)); return nil } catch let error as CurlHTTPError { return error } catch { return nil }
        }
        while receiver.requests.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
        await client.shutdown()
        #expect(await running.value?.code == .shutdown)
        await #expect {
            _ = try await client.send(CurlHTTPRequest(url: receiver.url))
        } throws: { ($0 as? CurlHTTPError)?.code == .shutdown }
        stall.open()
        await receiver.stop()
    }
}
