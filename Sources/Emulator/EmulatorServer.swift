import Foundation
import HTTP2

/// The provider emulator on the project's own HTTP/2 stack (nghttp2 + OpenSSL), TLS or cleartext h2c.
/// Requests are routed by path prefix to an ``EmulatedProvider`` (APNs: `/3/device/`); anything else gets
/// 404 `{"reason": "BadPath"}`.
public final class EmulatorServer: Sendable {
    /// A provider and the path prefix its requests start with.
    public struct Route: Sendable {
        public var pathPrefix: String
        public var provider: any EmulatedProvider
        public init(pathPrefix: String, provider: any EmulatedProvider) {
            self.pathPrefix = pathPrefix
            self.provider = provider
        }
    }

    private let server: HTTP2Server

    /// - Parameters:
    ///   - port: 0 picks a free port (see ``start()``'s result).
    ///   - tls: `nil` serves cleartext h2c with prior knowledge.
    ///   - maxConcurrentStreams: `SETTINGS_MAX_CONCURRENT_STREAMS` announced to clients (APNs announces 1000
    ///     once a connection is authorized).
    ///   - latency: seconds each answer is held back, to imitate a provider's round trip (benchmarks,
    ///     shutdown tests); 0 answers at once.
    ///   - refuseStreamsBeyond: streams one connection may have open before further ones are reset with
    ///     REFUSED_STREAM (RFC 9113 §8.7) although `maxConcurrentStreams` allowed them (a provider refusing
    ///     under load); nil: never.
    public init(
        eventLoop: HTTP2EventLoop, host: String = "127.0.0.1", port: Int = 0, tls: TLSServerConfiguration?,
        routes: [Route], maxConcurrentStreams: UInt32 = 1000, latency: Double = 0, refuseStreamsBeyond: Int? = nil
    ) {
        var limits = HTTP2ServerLimits()
        limits.refuseStreamsBeyond = refuseStreamsBeyond
        // Every provider's request is a few KB (APNs at most 5 KB of payload, an FCM message or token request,
        // a Web Push record of at most 4 KB): anything larger is answered 413 unread, so one client's large body
        // neither holds memory per stream nor, parsed on the I/O thread, stalls the other connections.
        limits.maximumRequestBodySize = Self.maximumRequestBodySize
        guard latency > 0 else {
            // The providers judge without blocking (``EmulatedProvider``): answered on the loop thread.
            server = HTTP2Server(
                eventLoop: eventLoop, host: host, port: port, tls: tls, maxConcurrentStreams: maxConcurrentStreams,
                limits: limits, answeringOnLoop: { Self.answer($0, routes: routes) })
            return
        }
        server = HTTP2Server(
            eventLoop: eventLoop, host: host, port: port, tls: tls, maxConcurrentStreams: maxConcurrentStreams,
            limits: limits
        ) { request in
            try? await Task.sleep(for: .seconds(latency))
            return Self.answer(request, routes: routes)
        }
    }

    /// Largest request body the emulator reads, in bytes: 64 KiB.
    public static let maximumRequestBodySize = 64 * 1024

    /// The answer of the route whose path prefix the request's path has (404 `BadPath` when none).
    private static func answer(_ request: HTTP2ServerRequest, routes: [Route]) -> HTTP2ServerResponse {
        guard let route = routes.first(where: { request.path.hasPrefix($0.pathPrefix) }) else {
            return HTTP2ServerResponse(
                status: 404, headers: [HTTP2Header("content-type", "application/json")],
                body: Array(#"{"reason":"BadPath"}"#.utf8))
        }
        let emulated = EmulatorRequest(
            method: request.method, path: request.path, authority: request.authority,
            headers: request.headers.map { EmulatorHeader($0.name, $0.value) }, body: request.body,
            clientCertificate: request.clientCertificateDER.map {
                EmulatorClientCertificate(der: $0, verified: request.clientCertificateVerified)
            })
        let response = route.provider.handle(emulated)
        return HTTP2ServerResponse(
            status: response.status, headers: response.headers.map { HTTP2Header($0.name, $0.value) }, body: response.body)
    }

    /// Binds and listens.
    /// - Returns: the bound TCP port.
    /// - Throws: `HTTP2Error` when the address cannot be bound or the TLS files cannot be loaded.
    public func start() throws -> Int {
        try server.start()
    }

    /// Streams reset with REFUSED_STREAM because `refuseStreamsBeyond` were open on their connection.
    public var refusedStreamCount: Int { server.refusedStreamCount }

    /// Stops accepting, lets in-flight streams finish, closes connections.
    public func shutdown() async {
        await server.shutdown()
    }
}

/// Appends lines to a file off the caller's thread (a serial Dispatch queue), so the emulator's request
/// handlers never wait for the disk.
public final class JSONLinesFile: Sendable {
    private let queue = DispatchQueue(label: "pushizo.emulator.log")
    private let handle: FileHandle

    /// Opens `path` for appending, creating it when missing.
    /// - Throws: the file system's error when the file cannot be created or opened.
    public init(path: String) throws {
        if !FileManager.default.fileExists(atPath: path) {
            guard FileManager.default.createFile(atPath: path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
            }
        }
        handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
    }

    /// Queues `line` (a newline is added).
    public func append(_ line: String) {
        queue.async { [handle] in
            handle.write(Data((line + "\n").utf8))
        }
    }

    /// Waits until every queued line is written.
    public func flush() {
        queue.sync { try? handle.synchronize() }
    }
}
