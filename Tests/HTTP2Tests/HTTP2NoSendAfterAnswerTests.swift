import Dispatch
import Glibc
import SocketTestSupport
import Testing
import Synchronization
@testable import HTTP2

/// Once `send` has answered (timeout, cancellation, error), the request must never reach the server afterwards:
/// the caller schedules its own retry, and a late first copy would be a duplicate notification.
@Suite("HTTP2 client never sends a request after answering it")
struct HTTP2NoSendAfterAnswerTests {
    /// Paths the server saw, in order.
    final class Seen: Sendable {
        let paths = Mutex<[String]>([])
        func add(_ path: String) { paths.withLock { $0.append(path) } }
        var all: [String] { paths.withLock { $0 } }
    }

    private static func expectAllFailedSafely(_ results: [Result<HTTP2Response, any Error>], _ codes: Set<String>) {
        for result in results {
            guard case .failure(let error as HTTP2Error) = result else {
                Issue.record("expected an HTTP2Error, got \(result)")
                continue
            }
            #expect(codes.contains(error.code.description), "\(error)")
            // Still queued when answered: never left the process (item: not counted as an attempt).
            #expect(error.isSafeToRetry, "\(error)")
        }
    }

    @Test func listenerThatNeverAnswersSettingsThenComesBack() async throws {
        // The kernel completes the TCP handshake from the backlog; nobody reads the preface or sends SETTINGS.
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        let loop = try HTTP2EventLoop(name: "test-no-settings")
        defer { loop.shutdown() }
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let requests = (0..<200).map { HTTP2Request(path: "/early-\($0)", timeout: .milliseconds(300)) }
        let early = await client.send(requests, to: origin)
        Self.expectAllFailedSafely(early, ["requestTimeout"])
        // Answered requests leave the queue in bulk (a handful may stay until the next dispatch skips them).
        let core = client.core
        let stored = await onLoop(loop) { core.machine.storedCount(at: origin) }
        #expect(stored < 32)

        // The server comes back on the same listening socket and accepts the waiting connection.
        let seen = Seen()
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            seen.add(request.path)
            return HTTP2ServerResponse(status: 200)
        }
        let serverCore = server.core
        #expect(loop.execute { serverCore.startListening(fd: fd, tls: nil) })
        // Requests are dispatched in order, so the early ones would have gone out before this one.
        let probe = try await client.send(HTTP2Request(path: "/probe"), to: origin)
        #expect(probe.status == 200)
        #expect(seen.all == ["/probe"])
        await client.shutdown()
        await server.shutdown()
    }

    @Test func closedPortThenServerStarts() async throws {
        let port = try freePort()
        let loop = try HTTP2EventLoop(name: "test-closed-port")
        defer { loop.shutdown() }
        var configuration = HTTP2ClientConfiguration()
        configuration.reconnectBackoffInitial = .milliseconds(20)
        configuration.reconnectBackoffMaximum = .milliseconds(50)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        // Two waves: the second arrives while the pool is backing off after the first connect failure.
        async let first = client.send((0..<100).map { HTTP2Request(path: "/a-\($0)", timeout: .milliseconds(300)) }, to: origin)
        async let second = client.send((0..<100).map { HTTP2Request(path: "/b-\($0)", timeout: .milliseconds(300)) }, to: origin)
        let results = await first + second
        Self.expectAllFailedSafely(results, ["requestTimeout", "connectFailed"])

        let seen = Seen()
        let server = HTTP2Server(eventLoop: loop, port: port, tls: nil) { request in
            seen.add(request.path)
            return HTTP2ServerResponse(status: 200)
        }
        _ = try server.start()
        let probe = try await client.send(HTTP2Request(path: "/probe", timeout: .seconds(10)), to: origin)
        #expect(probe.status == 200)
        #expect(seen.all == ["/probe"])
        await client.shutdown()
        await server.shutdown()
    }

    @Test func stalledServerDoesNotGetRequestsThatTimedOutBeforeTheirHeadersLeft() async throws {
        let clientLoop = try HTTP2EventLoop(name: "test-stalled-client")
        defer { clientLoop.shutdown() }
        let serverLoop = try HTTP2EventLoop(name: "test-stalled-server")
        defer { serverLoop.shutdown() }
        let seen = Seen()
        let server = HTTP2Server(eventLoop: serverLoop, tls: nil) { request in
            seen.add(request.path)
            return HTTP2ServerResponse(status: 200)
        }
        // A fixed, small receive buffer (inherited by accepted sockets) keeps the kernel from taking in more
        // bytes later on (autotuning, queue collapsing), so "the socket is full" stays true while the server stalls.
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        var size: Int32 = 16 * 1024
        #expect(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let core = server.core
        #expect(serverLoop.execute { core.startListening(fd: fd, tls: nil) })
        var configuration = HTTP2ClientConfiguration()
        configuration.testingSendBufferSize = 64 * 1024
        let client = HTTP2Client(eventLoop: clientLoop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        _ = try await client.send(HTTP2Request(path: "/warm-up"), to: origin)

        // Stall the server (a provider that stops reading), then fill the socket buffers with request bodies
        // (12 × 1 MiB fits the server's flow-control windows, not the small fixed kernel buffers).
        let stall = DispatchSemaphore(value: 0)
        #expect(serverLoop.execute { stall.wait() })
        let filler = (0..<12).map { HTTP2Request(path: "/filler-\($0)", body: [UInt8](repeating: 7, count: 1 << 20), timeout: .seconds(60)) }
        async let fillerResults = client.send(filler, to: origin)
        // Setup wait (not an assertion): let the client reach "socket full, bytes left over".
        try await Task.sleep(for: .seconds(1))

        let victims = (0..<200).map { HTTP2Request(path: "/victim-\($0)", timeout: .milliseconds(300)) }
        let victimResults = await client.send(victims, to: origin)
        for result in victimResults {
            guard case .failure(let error as HTTP2Error) = result else {
                Issue.record("expected a timeout, got \(result)")
                continue
            }
            #expect(error.code == .requestTimeout)
            // Reset before their HEADERS were written: certainly never sent.
            #expect(error.isSafeToRetry, "\(error)")
        }

        stall.signal()
        for result in await fillerResults { #expect((try? result.get())?.status == 200) }
        _ = try await client.send(HTTP2Request(path: "/probe"), to: origin)
        let reached = seen.all.filter { $0.hasPrefix("/victim-") }
        #expect(reached.isEmpty, "\(reached.count) victims reached the server, first \(reached.prefix(3)), order \(seen.all.prefix(20))")
        await client.shutdown()
        await server.shutdown()
    }

    @Test func loopShutdownReportsRequestsWhoseHeadersNeverLeftAsSafe() async throws {
        let clientLoop = try HTTP2EventLoop(name: "test-stalled-stop")
        defer { clientLoop.shutdown() }
        let serverLoop = try HTTP2EventLoop(name: "test-stalled-srv2")
        defer { serverLoop.shutdown() }
        let seen = Seen()
        let server = HTTP2Server(eventLoop: serverLoop, tls: nil) { request in
            seen.add(request.path)
            return HTTP2ServerResponse(status: 200)
        }
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        var size: Int32 = 16 * 1024
        #expect(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let serverCore = server.core
        #expect(serverLoop.execute { serverCore.startListening(fd: fd, tls: nil) })
        var configuration = HTTP2ClientConfiguration()
        configuration.testingSendBufferSize = 64 * 1024
        let client = HTTP2Client(eventLoop: clientLoop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        _ = try await client.send(HTTP2Request(path: "/warm-up"), to: origin)

        let stall = DispatchSemaphore(value: 0)
        #expect(serverLoop.execute { stall.wait() })
        let filler = (0..<4).map { HTTP2Request(path: "/filler-\($0)", body: [UInt8](repeating: 7, count: 1 << 20), timeout: .seconds(60)) }
        async let fillerResults = client.send(filler, to: origin)
        try await Task.sleep(for: .milliseconds(500))
        // On the connection (streams opened in nghttp2) but stuck behind the full socket.
        async let stuckResults = client.send((0..<50).map { HTTP2Request(path: "/stuck-\($0)", timeout: .seconds(60)) }, to: origin)
        try await Task.sleep(for: .milliseconds(200))
        clientLoop.shutdown()

        for result in await stuckResults {
            guard case .failure(let error as HTTP2Error) = result else {
                Issue.record("expected .shutdown, got \(result)")
                continue
            }
            #expect(error.code == .shutdown)
            #expect(error.isSafeToRetry, "\(error)")
        }
        for result in await fillerResults {
            // Their bodies were partly written: the peer may have started processing them.
            if case .failure(let error as HTTP2Error) = result { #expect(!error.isSafeToRetry, "\(error)") }
        }
        stall.signal()
        await server.shutdown()
        #expect(!seen.all.contains { $0.hasPrefix("/stuck-") })
    }
}
