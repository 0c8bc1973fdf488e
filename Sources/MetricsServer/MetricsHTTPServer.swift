import Foundation
import Metrics
import Synchronization
internal import CMicroHTTPD
internal import CPushizoMicroHTTPDShims
internal import Glibc

/// A page the listener serves besides `/metrics` (`/healthz`, `/readyz`, the status page at `/`): made by its
/// owner on the connection's own thread for each `GET` or `HEAD`; answered with `Cache-Control: no-store`, so a
/// probe or a browser never sees a stored copy.
public struct ListenerPage: Sendable, Equatable {
    /// The HTTP status code (RFC 9110 §15): 200, or 503 for a probe that fails.
    public var status: Int
    /// E.g. `text/plain; charset=utf-8`, `text/html; charset=utf-8`.
    public var contentType: String
    public var body: String

    public init(status: Int, contentType: String, body: String) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    /// A plain-text page (`text/plain; charset=utf-8`).
    public static func plainText(status: Int, _ body: String) -> ListenerPage {
        ListenerPage(status: status, contentType: "text/plain; charset=utf-8", body: body)
    }
}

/// What the listener answers, decided without sockets: `GET` or `HEAD /metrics` gets the registry's text (200,
/// Prometheus text format 0.0.4); `GET` or `HEAD` on a path of `pages` gets that page (with
/// `Cache-Control: no-store`, RFC 9111 §5.2.2.5); another path 404; another method on a known path 405 with
/// `Allow: GET, HEAD` (RFC 9110 §15.5.6). Nothing is ever written.
public struct MetricsAnswer: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var allow: String?
    /// `no-store` for the pages, nil for `/metrics` (Prometheus never stores a scrape).
    public var cacheControl: String? = nil
    public var body: String

    /// - Parameters:
    ///   - path: the request target's path (libmicrohttpd passes it without the query string).
    ///   - pages: makers of the other pages by exact path; each is called only for a `GET` or `HEAD` of its path.
    ///   - render: produces the exposition text (called only for a 200 of `/metrics`).
    public static func answer(
        method: String, path: String, pages: [String: @Sendable () -> ListenerPage] = [:], render: () -> String
    ) -> MetricsAnswer {
        let page = pages[path]
        guard path == "/metrics" || page != nil else {
            let known = (["/metrics"] + pages.keys.sorted()).joined(separator: ", ")
            return MetricsAnswer(status: 404, contentType: "text/plain; charset=utf-8", body: "not found: GET \(known)\n")
        }
        guard method == "GET" || method == "HEAD" else {
            return MetricsAnswer(
                status: 405, contentType: "text/plain; charset=utf-8", allow: "GET, HEAD", body: "method not allowed\n")
        }
        if let page {
            let made = page()
            return MetricsAnswer(status: made.status, contentType: made.contentType, cacheControl: "no-store", body: made.body)
        }
        return MetricsAnswer(status: 200, contentType: MetricsRegistry.contentType, body: render())
    }
}

/// The `GET /metrics` listener, and the pages its owner adds (``ListenerPage``): libmicrohttpd (Debian
/// `libmicrohttpd-dev`) with a thread per connection, so a request never runs on Swift's cooperative pool and a
/// page that waits (the status page reading the database) holds up only its own connection, never a scrape. The
/// registry is rendered on the connection's thread; its families' locks are held only while values are copied,
/// never while the answer is sent. Connections (and so threads) are bounded (``connectionLimit``) and idle ones
/// closed after ``connectionTimeout`` seconds, so slow or many clients cannot pile up.
public final class MetricsHTTPServer: Sendable {
    /// Most connections served at once; more are refused by libmicrohttpd.
    public static let connectionLimit: UInt32 = 16
    /// Seconds an idle connection is kept.
    public static let connectionTimeout: UInt32 = 10

    /// The handler's context: kept alive by this object, which stops the daemon before releasing it.
    private let endpoint: Endpoint
    private let daemon: Mutex<OpaquePointer?>
    /// The bound port (the requested one, or the kernel's choice for port 0).
    public let port: UInt16

    /// Starts listening at once.
    /// - Throws: ``MetricsListenAddressError`` when libmicrohttpd cannot start (the address is in use or not
    ///   available on this host).
    /// - Parameter pages: the pages served besides `/metrics`, by exact path (``MetricsAnswer``).
    public init(
        address: MetricsListenAddress, registry: MetricsRegistry, pages: [String: @Sendable () -> ListenerPage] = [:]
    ) throws(MetricsListenAddressError) {
        let endpoint = Endpoint(registry: registry, pages: pages)
        self.endpoint = endpoint
        let context = Unmanaged.passUnretained(endpoint).toOpaque()
        let started = address.withSocketAddress { socketAddress in
            pz_mhd_start(
                socketAddress, address.isIPv6 ? 1 : 0, Self.connectionLimit, Self.connectionTimeout, handleRequest,
                context)
        }
        guard let started else {
            throw MetricsListenAddressError("cannot listen on \(address): \(String(cString: strerror(errno)))")
        }
        port = pz_mhd_bound_port(started)
        daemon = Mutex(started)
    }

    deinit {
        if let running = daemon.withLock({ $0 }) { MHD_stop_daemon(running) }
    }

    /// Closes the listener and waits for its thread to end (a few milliseconds; called from a thread that may
    /// block, or through ``shutdown()``).
    public func stop() {
        guard let running = daemon.withLock({ state -> OpaquePointer? in
            defer { state = nil }
            return state
        }) else { return }
        MHD_stop_daemon(running)
    }

    /// ``stop()`` on a thread of its own, so an async caller never blocks its executor.
    public func shutdown() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let thread = Thread { [self] in
                stop()
                continuation.resume()
            }
            thread.start()
        }
    }

    /// What the request handler reaches through its context pointer.
    fileprivate final class Endpoint: Sendable {
        let registry: MetricsRegistry
        let pages: [String: @Sendable () -> ListenerPage]

        init(registry: MetricsRegistry, pages: [String: @Sendable () -> ListenerPage]) {
            self.registry = registry
            self.pages = pages
        }

        func answer(method: String, path: String) -> MetricsAnswer {
            MetricsAnswer.answer(method: method, path: path, pages: pages, render: registry.render)
        }
    }
}

/// libmicrohttpd's access handler: one call per request (the first, once its headers are in), on the
/// connection's thread. libmicrohttpd leaves the body out of the answer to a `HEAD` itself.
private func handleRequest(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
    uploadDataSize: UnsafeMutablePointer<Int>?, requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let context, let connection else { return .NO }
    let server = Unmanaged<MetricsHTTPServer.Endpoint>.fromOpaque(context).takeUnretainedValue()
    let answer = server.answer(
        method: method.map { String(cString: $0) } ?? "", path: url.map { String(cString: $0) } ?? "")
    var body = Array(answer.body.utf8)
    let response = body.withUnsafeMutableBytes { bytes in
        MHD_create_response_from_buffer(bytes.count, bytes.baseAddress, MHD_ResponseMemoryMode(rawValue: 2)!)  // MHD_RESPMEM_MUST_COPY
    }
    guard let response else { return .NO }
    defer { MHD_destroy_response(response) }
    _ = MHD_add_response_header(response, "Content-Type", answer.contentType)
    if let allow = answer.allow { _ = MHD_add_response_header(response, "Allow", allow) }
    if let cacheControl = answer.cacheControl { _ = MHD_add_response_header(response, "Cache-Control", cacheControl) }
    return MHD_queue_response(connection, UInt32(answer.status), response)
}
