import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import Metrics
import Testing
@testable import MetricsServer

@Suite("Metrics listener")
struct MetricsServerTests {
    @Test func parsesListenAddresses() throws {
        let v4 = try MetricsListenAddress(parsing: "127.0.0.1:9464")
        #expect(v4.host == "127.0.0.1" && v4.port == 9464 && !v4.isIPv6)
        let v6 = try MetricsListenAddress(parsing: "[::1]:9464")
        #expect(v6.host == "::1" && v6.port == 9464 && v6.isIPv6 && v6.description == "[::1]:9464")
        #expect(try MetricsListenAddress(parsing: "localhost:0").host == "127.0.0.1")
        #expect(try MetricsListenAddress(parsing: "[::]:1").isIPv6)
        for bad in ["", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "::1:9464", "[::1]9464",
                    "[::1:9464", "example.com:9464", ":9464", "127.0.0.1:94a4", "[127.0.0.1]:80"] {
            #expect(throws: MetricsListenAddressError.self, "\(bad)") { try MetricsListenAddress(parsing: bad) }
        }
    }

    @Test func answersOnlyGetAndHeadOnMetrics() {
        let ok = MetricsAnswer.answer(method: "GET", path: "/metrics") { "x 1\n" }
        #expect(ok.status == 200 && ok.body == "x 1\n" && ok.contentType == "text/plain; version=0.0.4; charset=utf-8")
        #expect(MetricsAnswer.answer(method: "HEAD", path: "/metrics") { "" }.status == 200)
        let post = MetricsAnswer.answer(method: "POST", path: "/metrics") { Issue.record("rendered"); return "" }
        #expect(post.status == 405 && post.allow == "GET, HEAD")
        #expect(MetricsAnswer.answer(method: "GET", path: "/") { "" }.status == 404)
        #expect(MetricsAnswer.answer(method: "GET", path: "/metrics/") { "" }.status == 404)
    }

    @Test func answersPagesWithNoStoreAndOnlyGetAndHead() {
        let pages: [String: @Sendable () -> ListenerPage] = [
            "/readyz": { .plainText(status: 503, "database: unreachable\n") },
            "/": { ListenerPage(status: 200, contentType: "text/html; charset=utf-8", body: "<!DOCTYPE html>") },
        ]
        let ready = MetricsAnswer.answer(method: "GET", path: "/readyz", pages: pages) { "" }
        #expect(ready.status == 503 && ready.body == "database: unreachable\n" && ready.cacheControl == "no-store")
        #expect(ready.contentType == "text/plain; charset=utf-8")
        #expect(MetricsAnswer.answer(method: "HEAD", path: "/", pages: pages) { "" }.status == 200)
        let post = MetricsAnswer.answer(method: "POST", path: "/", pages: pages) { "" }
        #expect(post.status == 405 && post.allow == "GET, HEAD" && post.cacheControl == nil)
        let missing = MetricsAnswer.answer(method: "GET", path: "/healthz", pages: pages) { "" }
        #expect(missing.status == 404 && missing.body == "not found: GET /metrics, /, /readyz\n")
        #expect(MetricsAnswer.answer(method: "GET", path: "/metrics", pages: pages) { "x 1\n" }.cacheControl == nil)
    }

    /// Pages over real HTTP: status, `Cache-Control: no-store`, and `HEAD` with the same status and no body. A page
    /// that waits holds up only its own connection: a scrape is answered while it waits.
    @Test func servesPagesOverHTTPAndAWaitingPageDoesNotHoldUpAScrape() async throws {
        let registry = MetricsRegistry()
        registry.counter("pushizo_test_total", help: "A test counter.").add(1)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let pages: [String: @Sendable () -> ListenerPage] = [
            "/healthz": { .plainText(status: 200, "ok\n") },
            "/readyz": { .plainText(status: 503, "migrations: 1 pending\n") },
            "/": {
                entered.signal()
                release.wait()
                return ListenerPage(status: 200, contentType: "text/html; charset=utf-8", body: "<p>page</p>")
            },
        ]
        let server = try MetricsHTTPServer(
            address: try MetricsListenAddress(parsing: "127.0.0.1:0"), registry: registry, pages: pages)
        let base = "http://127.0.0.1:\(server.port)"
        let (health, healthResponse) = try await fetch("\(base)/healthz")
        #expect(healthResponse.statusCode == 200 && health == "ok\n")
        #expect(healthResponse.value(forHTTPHeaderField: "Cache-Control") == "no-store")
        let (ready, readyResponse) = try await fetch("\(base)/readyz")
        #expect(readyResponse.statusCode == 503 && ready == "migrations: 1 pending\n")
        let (headBody, head) = try await fetch("\(base)/readyz", method: "HEAD")
        #expect(head.statusCode == 503 && headBody.isEmpty)
        #expect(head.value(forHTTPHeaderField: "Cache-Control") == "no-store")

        let page = Task { try await fetch("\(base)/") }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                entered.wait()
                continuation.resume()
            }
        }
        // The page's connection thread is blocked now; the scrape has a thread of its own. (Were it queued behind
        // the page, the request's 10 s timeout would fail it; the page is released either way.)
        let scrape: Result<(String, HTTPURLResponse), any Error>
        do { scrape = .success(try await fetch("\(base)/metrics")) } catch { scrape = .failure(error) }
        release.signal()
        let (metrics, metricsResponse) = try scrape.get()
        #expect(metricsResponse.statusCode == 200 && metrics.contains("pushizo_test_total 1\n"))
        let (pageBody, pageResponse) = try await page.value
        #expect(pageResponse.statusCode == 200 && pageBody == "<p>page</p>")
        #expect(pageResponse.value(forHTTPHeaderField: "Content-Type") == "text/html; charset=utf-8")
        await server.shutdown()
    }

    /// A real scrape over TCP through libmicrohttpd.
    @Test func servesTheRegistryOverHTTP() async throws {
        let registry = MetricsRegistry()
        registry.counter("pushizo_test_total", help: "A test counter.").add(3)
        ProcessMetrics.register(in: registry)
        let server = try MetricsHTTPServer(address: try MetricsListenAddress(parsing: "127.0.0.1:0"), registry: registry)
        #expect(server.port != 0)
        let base = "http://127.0.0.1:\(server.port)"
        let (body, response) = try await fetch("\(base)/metrics")
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
        #expect(body.contains("pushizo_test_total 3\n"))
        #expect(body.contains("\nprocess_resident_memory_bytes "))
        #expect(body.contains("\nprocess_open_fds "))
        #expect(try await fetch("\(base)/other").1.statusCode == 404)
        let (_, post) = try await fetch("\(base)/metrics", method: "POST")
        #expect(post.statusCode == 405)
        #expect(post.value(forHTTPHeaderField: "Allow") == "GET, HEAD")
        await server.shutdown()
        await #expect(throws: (any Error).self) { _ = try await fetch("\(base)/metrics") }
    }

    @Test func refusesAnAddressInUse() throws {
        let registry = MetricsRegistry()
        let first = try MetricsHTTPServer(address: try MetricsListenAddress(parsing: "127.0.0.1:0"), registry: registry)
        #expect(throws: MetricsListenAddressError.self) {
            _ = try MetricsHTTPServer(address: try MetricsListenAddress(parsing: "127.0.0.1:\(first.port)"), registry: registry)
        }
        first.stop()
    }

    @Test func parsesProcStat() {
        let line = "4242 (pushizo (worker)) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 50 0 0 20 0 7 0 123456 104857600 2560 18446744073709551615"
        let stat = ProcessStat.parse(line, ticksPerSecond: 100, pageSize: 4096)
        #expect(stat?.cpuSeconds == 3)
        #expect(stat?.startTicks == 123456)
        #expect(stat?.virtualBytes == 104857600)
        #expect(stat?.residentBytes == Double(2560 * 4096))
        #expect(ProcessStat.parse("garbage", ticksPerSecond: 100, pageSize: 4096) == nil)
    }

    private func fetch(_ url: String, method: String = "GET") async throws -> (String, HTTPURLResponse) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        request.timeoutInterval = 10
        let (data, response) = try await URLSession.shared.data(for: request)
        return (String(decoding: data, as: UTF8.self), response as! HTTPURLResponse)
    }
}
