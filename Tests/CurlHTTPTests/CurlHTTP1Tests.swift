import Metrics
import MetricsServer
import Testing
@testable import CurlHTTP

/// The client over HTTP/1.1 in cleartext, against the metrics listener (libmicrohttpd): allowed only with the
/// egress policy's private-networks switch, as for emulators.
@Suite("CurlHTTP client over HTTP/1.1")
struct CurlHTTP1Tests {
    @Test func cleartextHTTP1AnswersAreReadWithTheSwitchOnAndBounded() async throws {
        let registry = MetricsRegistry()
        registry.counter("pushizo_curl_test_total", help: "A test counter.").add(5)
        let server = try MetricsHTTPServer(address: try MetricsListenAddress(parsing: "127.0.0.1:0"), registry: registry)
        var configuration = CurlHTTPClientConfiguration()
        configuration.egressPolicy = .unrestricted
        let client = CurlHTTPClient(configuration: configuration)
        let page = try await client.send(CurlHTTPRequest(method: "GET", url: "http://127.0.0.1:\(server.port)/metrics"))
        #expect(page.status == 200 && page.httpVersion == 1)
        #expect(String(decoding: page.body, as: UTF8.self).contains("pushizo_curl_test_total 5\n"))
        // A POST is answered 405 by the listener: an answer, not an error.
        #expect(try await client.send(CurlHTTPRequest(url: "http://127.0.0.1:\(server.port)/metrics", body: [1, 2])).status == 405)
        await client.shutdown()

        configuration.maximumResponseBodySize = 16
        let bounded = CurlHTTPClient(configuration: configuration)
        await #expect {
            _ = try await bounded.send(CurlHTTPRequest(method: "GET", url: "http://127.0.0.1:\(server.port)/metrics"))
        } throws: { ($0 as? CurlHTTPError)?.code == .responseTooLarge }
        await bounded.shutdown()
        await server.shutdown()
    }
}
