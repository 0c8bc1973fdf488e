import Foundation
import SocketTestSupport
import Synchronization
import Testing
@testable import HTTP2

@Suite("HTTP2 client and server over real sockets")
struct HTTP2ClientServerTests {
    @Test func cleartextRoundTripWithLargeBodies() async throws {
        let loop = try HTTP2EventLoop(name: "test-h2c")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, limits: .largeBodies, handler: echoHandler)
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop, configuration: .largeBodies)
        let origin = try HTTP2Origin(parsing: "http://127.0.0.1:\(port)")

        let small = try await client.send(HTTP2Request(path: "/3/device/abc", headers: [HTTP2Header("Apns-Topic", "com.example")],
                                                       body: Array("hello".utf8)), to: origin)
        #expect(small.status == 200)
        #expect(small.header("X-PATH") == "/3/device/abc")
        #expect(small.header("x-authority") == "127.0.0.1:\(port)")
        #expect(small.body == Array("hello".utf8))

        // 3 MB each way: beyond every flow-control window, so WINDOW_UPDATEs and the data provider must work.
        let big = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let echoed = try await client.send(HTTP2Request(path: "/big", body: big), to: origin)
        #expect(echoed.status == 200 && echoed.body == big)

        let get = try await client.send(HTTP2Request(method: "GET", path: "/get"), to: origin)
        #expect(get.header("x-method") == "GET" && get.body.isEmpty)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func tlsRoundTripWithLocalCertificateAuthority() async throws {
        let directory = temporaryDirectory("tls")
        let files = try LocalCertificateAuthority.generate(in: directory)
        let attributes = try FileManager.default.attributesOfItem(atPath: files.privateKey)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        let loop = try HTTP2EventLoop(name: "test-tls")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: TLSServerConfiguration(certificateChainFile: files.certificateChain,
                                                                                privateKeyFile: files.privateKey),
                                 limits: .largeBodies, handler: echoHandler)
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(files.caCertificate)),
                                 configuration: .largeBodies)
        for host in ["localhost", "127.0.0.1"] {  // DNS SAN and IP SAN
            let response = try await client.send(HTTP2Request(path: "/tls", body: Array(host.utf8)),
                                                 to: HTTP2Origin(scheme: .https, host: host, port: port))
            #expect(response.status == 200)
            #expect(response.body == Array(host.utf8))
            #expect(response.header("x-authority") == "\(host):\(port)")
        }
        // 2 MB through TLS records, partial writes and flow control.
        let big = (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let echoed = try await client.send(HTTP2Request(path: "/big", body: big), to: HTTP2Origin(scheme: .https, host: "localhost", port: port))
        #expect(echoed.body == big)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func ipv6LoopbackWithIPCertificate() async throws {
        let files = try LocalCertificateAuthority.generate(in: temporaryDirectory("v6"), hostnames: ["::1"])
        let loop = try HTTP2EventLoop(name: "test-v6")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, host: "::1", tls: TLSServerConfiguration(certificateChainFile: files.certificateChain,
                                                                                             privateKeyFile: files.privateKey),
                                 handler: echoHandler)
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(files.caCertificate)))
        let response = try await client.send(HTTP2Request(path: "/v6"), to: HTTP2Origin(parsing: "https://[::1]:\(port)"))
        #expect(response.status == 200)
        #expect(response.header("x-authority") == "[::1]:\(port)")
        await client.shutdown()
        await server.shutdown()
    }

    /// Fields equal to the previous response's are shared with it (the client compares bytes): each response
    /// still reads exactly its own fields, whether they repeat, change, move or go.
    @Test func responseHeadersAreEachResponsesOwnWhenFieldsRepeatChangeOrMove() async throws {
        let loop = try HTTP2EventLoop(name: "test-header-reuse")
        defer { loop.shutdown() }
        @Sendable func fields(for path: String) -> [HTTP2Header] {
            let n = Int(path.dropFirst()) ?? 0
            var fields = [HTTP2Header("server", "test"), HTTP2Header("x-n", "\(n % 3)")]
            if n % 2 == 0 { fields.append(HTTP2Header("x-even", "yes")) }
            if n % 5 == 0 { fields.swapAt(0, 1) }
            fields.append(HTTP2Header("x-path", path))
            return fields
        }
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            HTTP2ServerResponse(status: 200, headers: fields(for: request.path))
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnectionsPerOrigin = 1
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        for n in 0..<40 {
            let response = try await client.send(HTTP2Request(method: "GET", path: "/\(n)"), to: origin)
            #expect(response.headers == fields(for: "/\(n)"), "response \(n)")
        }
        await client.shutdown()
        await server.shutdown()
    }

    @Test func fiveHundredConcurrentRequestsOverOneConnectionWithTenStreams() async throws {
        let loop = try HTTP2EventLoop(name: "test-concurrency")
        defer { loop.shutdown() }
        let inFlight = Mutex((now: 0, max: 0))
        let server = HTTP2Server(eventLoop: loop, tls: nil, maxConcurrentStreams: 10) { request in
            inFlight.withLock { $0.now += 1; $0.max = max($0.max, $0.now) }
            try? await Task.sleep(for: .milliseconds(2))
            inFlight.withLock { $0.now -= 1 }
            return HTTP2ServerResponse(status: 200, body: request.body)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnectionsPerOrigin = 1
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)

        let results = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<500 {
                group.addTask {
                    let body = Array("request-\(i)".utf8)
                    let response = try? await client.send(HTTP2Request(path: "/n/\(i)", body: body), to: origin)
                    return response?.status == 200 && response?.body == body
                }
            }
            var ok = 0
            for await success in group where success { ok += 1 }
            return ok
        }
        #expect(results == 500)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 1)
        #expect(inFlight.withLock { $0.max } <= 10)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func opensASecondConnectionWhenTheFirstIsFull() async throws {
        let loop = try HTTP2EventLoop(name: "test-two-connections")
        defer { loop.shutdown() }
        // Handlers hold until 10 requests are in flight at once: with 5 streams per connection only a second
        // connection makes that possible.
        let everyoneHere = Gate()
        let arrivals = Mutex(0)
        let server = HTTP2Server(eventLoop: loop, tls: nil, maxConcurrentStreams: 5) { request in
            if arrivals.withLock({ $0 += 1; return $0 }) == 10 { everyoneHere.open() }
            await everyoneHere.wait()
            return HTTP2ServerResponse(status: 200, body: request.body)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnectionsPerOrigin = 2
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        // A hang guard only: under a loaded full suite the handler tasks may wait long for the cooperative pool.
        configuration.requestTimeout = .seconds(60)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let ok = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<40 {
                group.addTask {
                    let response = try? await client.send(HTTP2Request(path: "/\(i)", body: [UInt8(i)]), to: origin)
                    return response?.body == [UInt8(i)]
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(ok == 40)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 2)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func cancellingTheCallerResetsTheStream() async throws {
        let loop = try HTTP2EventLoop(name: "test-cancel")
        let arrived = Gate()
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            if request.path == "/hold" {
                arrived.open()
                await release.wait()
            }
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let task = Task { try await client.send(HTTP2Request(path: "/hold"), to: origin) }
        await arrived.wait()
        task.cancel()
        await #expect(throws: CancellationError.self) { _ = try await task.value }
        #expect(try await client.send(HTTP2Request(path: "/next"), to: origin).status == 200)
        release.open()
        await client.shutdown()
        await server.shutdown()
        // After the loop stops, nothing hangs: sends fail with .shutdown.
        loop.shutdown()
        let late = HTTP2Client(eventLoop: loop)
        await #expect {
            _ = try await late.send(HTTP2Request(path: "/"), to: origin)
        } throws: { error in
            (error as? HTTP2Error)?.code == .shutdown
        }
    }

    @Test func batchSendKeepsResultsInRequestOrder() async throws {
        let loop = try HTTP2EventLoop(name: "test-batch")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, maxConcurrentStreams: 16) { request in
            HTTP2ServerResponse(status: request.path == "/missing" ? 404 : 200, body: request.body)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let requests = (0..<300).map { i in
            HTTP2Request(path: i % 50 == 0 ? "/missing" : "/ok", body: Array("\(i)".utf8))
        }
        let results = await client.send(requests, to: origin)
        #expect(results.count == 300)
        for (i, result) in results.enumerated() {
            let response = try result.get()
            #expect(response.body == Array("\(i)".utf8))
            #expect(response.status == (i % 50 == 0 ? 404 : 200))
        }
        // Every request of a batch to a dead port fails the same, safe-to-retry way.
        let dead = await client.send([HTTP2Request(path: "/a"), HTTP2Request(path: "/b")],
                                     to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 1))
        #expect(dead.count == 2)
        for result in dead {
            #expect(throws: HTTP2Error.self) { try result.get() }
            if case .failure(let error as HTTP2Error) = result { #expect(error.code == .connectFailed && error.isSafeToRetry) }
        }
        await client.shutdown()
        await server.shutdown()
    }

    /// `submit` reports the answers as they come, in bursts: the quick ones while a held one is still open,
    /// an invalid request at once (before anything is queued), and the held one as `CancellationError` once
    /// cancelled; every request in exactly one burst.
    @Test func submitReportsEachAnswerAsItArrivesAndCancelsThePendingOnes() async throws {
        let loop = try HTTP2EventLoop(name: "test-submit")
        defer { loop.shutdown() }
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil, maxConcurrentStreams: 16) { request in
            if request.path == "/hold" { await release.wait() }
            return HTTP2ServerResponse(status: 200, body: request.body)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        var requests = (0..<40).map { HTTP2Request(path: "/ok", body: Array("\($0)".utf8)) }
        requests[7] = HTTP2Request(path: "/hold")
        requests[11] = HTTP2Request(path: "/bad", headers: [HTTP2Header("connection", "close")])
        let (bursts, answered) = AsyncStream.makeStream(of: [HTTP2Answer].self)
        let submission = client.submit(requests, to: origin) { answered.yield($0) }
        var seen: [Int: Result<HTTP2Response, any Error>] = [:]
        bursts: for await burst in bursts {
            for answer in burst {
                #expect(seen[answer.index] == nil, "each request reported once")
                seen[answer.index] = answer.result
            }
            if seen.count == 39 { break bursts }
        }
        // Everything but the held request, the invalid one among them.
        #expect(seen.count == 39 && seen[7] == nil)
        if case .failure(let error as HTTP2Error)? = seen[11] { #expect(error.code == .invalidRequest) } else { Issue.record("not refused") }
        for index in 0..<40 where index != 7 && index != 11 {
            #expect((try? seen[index]?.get())?.body == Array("\(index)".utf8))
        }
        submission.cancel()
        for await burst in bursts {
            #expect(burst.map(\.index) == [7])
            #expect(throws: CancellationError.self) { try burst.first?.result.get() }
            break
        }
        release.open()
        #expect(try await client.send(HTTP2Request(path: "/after"), to: origin).status == 200)
        // Requests that end in the same turn of the loop come in one burst: all of a submission to a port where
        // nothing listens fail together when the connection attempt does.
        let (deadBursts, deadAnswered) = AsyncStream.makeStream(of: [HTTP2Answer].self)
        _ = client.submit(Array(repeating: HTTP2Request(path: "/"), count: 30), to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 1)) {
            deadAnswered.yield($0)
        }
        for await burst in deadBursts {
            #expect(burst.count == 30)
            #expect(burst.allSatisfy { if case .failure(let error as HTTP2Error) = $0.result { error.code == .connectFailed } else { false } })
            break
        }
        await client.shutdown()
        await server.shutdown()
    }

    /// A submission's requests share their deadline: held ones all end as `.requestTimeout`, quick ones
    /// answer, and the connection serves the next request.
    @Test func aSubmissionsRequestsTimeOutTogetherAndTheQuickOnesAnswer() async throws {
        let loop = try HTTP2EventLoop(name: "test-submit-timeout")
        defer { loop.shutdown() }
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil, maxConcurrentStreams: 16) { request in
            if request.path == "/hold" { await release.wait() }
            return HTTP2ServerResponse(status: 204)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        // The connection first, so the deadline below is the requests' own; 3 s leaves the quick ones time to be
        // answered by a server whose handlers share a busy test process's threads.
        #expect(try await client.send(HTTP2Request(path: "/fast"), to: origin).status == 204)
        let requests = (0..<12).map { HTTP2Request(path: $0 % 3 == 0 ? "/fast" : "/hold", timeout: .seconds(3)) }
        let (bursts, answered) = AsyncStream.makeStream(of: [HTTP2Answer].self)
        _ = client.submit(requests, to: origin) { answered.yield($0) }
        var results: [Int: Result<HTTP2Response, any Error>] = [:]
        bursts: for await burst in bursts {
            for answer in burst { results[answer.index] = answer.result }
            if results.count == 12 { break bursts }
        }
        for index in 0..<12 {
            if index % 3 == 0 {
                #expect((try? results[index]?.get())?.status == 204)
            } else if case .failure(let error as HTTP2Error)? = results[index] {
                #expect(error.code == .requestTimeout)
            } else {
                Issue.record("request \(index) did not time out")
            }
        }
        release.open()
        #expect(try await client.send(HTTP2Request(path: "/fast"), to: origin).status == 204)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func requestTimeoutResetsOnlyThatStream() async throws {
        let loop = try HTTP2EventLoop(name: "test-timeout")
        defer { loop.shutdown() }
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            if request.path == "/slow" { await release.wait() }
            return HTTP2ServerResponse(status: 204)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/slow", timeout: .milliseconds(200)), to: origin)
        } throws: { error in
            (error as? HTTP2Error)?.code == .requestTimeout
        }
        // The connection survives the RST_STREAM.
        let fast = try await client.send(HTTP2Request(path: "/fast"), to: origin)
        #expect(fast.status == 204)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 1)
        release.open()
        await client.shutdown()
        await server.shutdown()
    }

    @Test func goAwayBelowAnOpenStreamRetriesItOnANewConnection() async throws {
        let loop = try HTTP2EventLoop(name: "test-goaway")
        defer { loop.shutdown() }
        let arrived = Gate()
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            if request.path == "/hold" {
                arrived.open()
                await release.wait()
            }
            return HTTP2ServerResponse(status: 200, body: Array(request.path.utf8))
        }
        server.testingGoAwayAboveStreamID(1)
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnectionsPerOrigin = 1
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)

        async let held = client.send(HTTP2Request(path: "/hold"), to: origin)
        await arrived.wait()
        // Stream 3 on the first connection gets GOAWAY(last-stream-id 1): unprocessed, so resent elsewhere.
        let second = try await client.send(HTTP2Request(path: "/second"), to: origin)
        #expect(second.status == 200 && second.body == Array("/second".utf8))
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 2)
        release.open()
        let first = try await held
        #expect(first.status == 200 && first.body == Array("/hold".utf8))
        await client.shutdown()
        await server.shutdown()
    }

    /// A server that announces 1000 streams but refuses every stream beyond 5 open on a connection: the
    /// refusals lower the connection's limit instead of using up the requests' retries, so 2,000 requests sent
    /// at once (256 in flight) all succeed with at most 2 counted retries each, each processed once.
    @Test func refusalsBeyondThePeersRealLimitLowerTheStreamLimitInsteadOfFailing() async throws {
        let loop = try HTTP2EventLoop(name: "test-refuse-beyond")
        defer { loop.shutdown() }
        let hits = Mutex(0)
        var limits = HTTP2ServerLimits()
        limits.refuseStreamsBeyond = 5
        let server = HTTP2Server(eventLoop: loop, tls: nil, limits: limits) { request in
            hits.withLock { $0 += 1 }
            return HTTP2ServerResponse(status: 200, body: Array(request.path.utf8))
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumRetries = 2
        configuration.maximumConnectionsPerOrigin = 1
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let requests = (0..<2000).map { HTTP2Request(path: "/\($0)") }
        let results = await client.send(requests, to: origin)
        let bodies = results.map { (try? $0.get()).map { String(decoding: $0.body, as: UTF8.self) } }
        #expect(bodies == requests.map(\.path))
        #expect(hits.withLock { $0 } == 2000)
        #expect(server.refusedStreamCount > 0)
        let limit = await onLoop(loop) { client.core.machine.streamLimit(of: 1) }
        #expect(limit.map { $0 < 1000 } == true)  // still below what the server announced
        await client.shutdown()
        await server.shutdown()
    }

    @Test func refusedStreamsAreRetriedThenGivenUp() async throws {
        let loop = try HTTP2EventLoop(name: "test-refused-stream")
        defer { loop.shutdown() }
        let hits = Mutex(0)
        let server = HTTP2Server(eventLoop: loop, tls: nil) { _ in
            hits.withLock { $0 += 1 }
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumRetries = 3
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        // Two refusals, then processed: the caller sees one success.
        server.testingRefuseStreams(2)
        #expect(try await client.send(HTTP2Request(path: "/a"), to: origin).status == 200)
        #expect(hits.withLock { $0 } == 1)
        // Refused every time: fails after 1 + 3 attempts, marked safe to retry (never processed).
        server.testingRefuseStreams(4)
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/b"), to: origin)
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == .refusedStream && error.isSafeToRetry
        }
        #expect(hits.withLock { $0 } == 1)
        #expect(try await client.send(HTTP2Request(path: "/c"), to: origin).status == 200)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func serverShutdownFinishesInFlightThenClientFailsCleanly() async throws {
        let loop = try HTTP2EventLoop(name: "test-shutdown")
        defer { loop.shutdown() }
        let arrived = Gate()
        let release = Gate()
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            arrived.open()
            await release.wait()
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        async let held = client.send(HTTP2Request(path: "/hold"), to: origin)
        await arrived.wait()
        async let stopped: Void = server.shutdown()
        try await Task.sleep(for: .milliseconds(100))  // ordering only: let GOAWAY go out before the answer
        release.open()
        #expect(try await held.status == 200)
        await stopped
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/after"), to: origin)
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == .connectFailed && error.isSafeToRetry
        }
        await client.shutdown()
    }

    @Test func abruptServerDeathFailsInFlightRequestsAsUnsafe() async throws {
        let serverLoop = try HTTP2EventLoop(name: "test-abrupt-srv")
        let clientLoop = try HTTP2EventLoop(name: "test-abrupt-cli")
        defer { clientLoop.shutdown() }
        let arrived = Gate()
        let never = Gate()
        let server = HTTP2Server(eventLoop: serverLoop, tls: nil) { _ in
            arrived.open()
            await never.wait()
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: clientLoop)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        async let held = client.send(HTTP2Request(path: "/hold"), to: origin)
        await arrived.wait()
        serverLoop.shutdown()  // sockets close without GOAWAY
        do {
            _ = try await held
            Issue.record("the request should have failed")
        } catch let error as HTTP2Error {
            // The server may have processed it: not safe to resend blindly.
            #expect(error.code == .connectionClosed)
            #expect(!error.isSafeToRetry)
        }
        never.open()
        await client.shutdown()
    }

    @Test func connectFailureIsReportedAndSafeToRetry() async throws {
        let loop = try HTTP2EventLoop(name: "test-refused")
        defer { loop.shutdown() }
        let client = HTTP2Client(eventLoop: loop)
        // Port 1 on loopback: nothing listens there.
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 1))
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == .connectFailed && error.isSafeToRetry
        }
        await client.shutdown()
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 1))
        } throws: { error in
            (error as? HTTP2Error)?.code == .shutdown
        }
    }
}

@Suite("HTTP2 client timing behaviour")
struct HTTP2ClientTimingTests {
    @Test func connectTimeoutWhenTheHandshakeNeverCompletes() async throws {
        // The kernel completes the TCP handshake from the backlog, but nobody ever speaks TLS.
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        defer { close(fd) }
        let loop = try HTTP2EventLoop(name: "test-connect-timeout")
        defer { loop.shutdown() }
        var configuration = HTTP2ClientConfiguration()
        configuration.connectTimeout = .milliseconds(300)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .https, host: "127.0.0.1", port: port))
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == .connectTimeout && error.isSafeToRetry
        }
        await client.shutdown()
    }

    @Test func keepalivePingsKeepTheConnection() async throws {
        let loop = try HTTP2EventLoop(name: "test-ping")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.pingInterval = .milliseconds(50)
        configuration.pingTimeout = .milliseconds(500)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        #expect(try await client.send(HTTP2Request(path: "/1"), to: origin).status == 200)
        try await Task.sleep(for: .milliseconds(1200))  // several idle ping rounds, each must be answered
        #expect(try await client.send(HTTP2Request(path: "/2"), to: origin).status == 200)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 1)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func unansweredPingDropsTheConnection() async throws {
        let loop = try HTTP2EventLoop(name: "test-no-pong")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        server.testingIgnorePings()
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.pingInterval = .milliseconds(50)
        configuration.pingTimeout = .milliseconds(100)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        #expect(try await client.send(HTTP2Request(path: "/1"), to: origin).status == 200)
        try await Task.sleep(for: .milliseconds(1000))  // idle, PING sent, no answer: connection dropped
        #expect(try await client.send(HTTP2Request(path: "/2"), to: origin).status == 200)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 2)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func honoursAPeerLimitOfOneStream() async throws {
        // nghttpd with MAX_CONCURRENT_STREAMS 1 echoing uploads: 50 requests share one connection, one at a time.
        let (nghttpd, port) = try await startListeningProcess("/usr/sbin/nghttpd") { ["-a", "127.0.0.1", "--no-tls", "--echo-upload", "-m", "1", String($0)] }
        defer { nghttpd.stop() }
        let loop = try HTTP2EventLoop(name: "test-limit-one")
        defer { loop.shutdown() }
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnectionsPerOrigin = 1
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let ok = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<50 {
                group.addTask {
                    let body = Array("payload \(i)".utf8)
                    let response = try? await client.send(HTTP2Request(path: "/echo", body: body), to: origin)
                    return response?.status == 200 && response?.body == body
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(ok == 50)
        await client.shutdown()
    }
}

/// A cancellation that reaches the event loop after its request has finished is kept like one that arrived
/// before its request, but only for a bounded time: a stream of late cancellations does not grow the client.
@Suite("HTTP2 client: late cancellations")
struct HTTP2LateCancellationTests {
    @Test func lateCancellationsAreForgottenWithinTwoRotations() async throws {
        let loop = try HTTP2EventLoop(name: "test-late-cancel")
        defer { loop.shutdown() }
        var configuration = HTTP2ClientConfiguration()
        configuration.idleTimeout = .milliseconds(100)  // a sweep every 25 ms
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let core = client.core
        func remembered() async -> Int {
            await withCheckedContinuation { continuation in
                _ = loop.execute { continuation.resume(returning: core.cancelledEarlyCount) }
            }
        }
        // As `send`'s cancellation handler does for requests no longer pending (ids never enqueued here).
        _ = loop.execute { for id in UInt64(1_000)..<1_100 { core.cancel(id: id) } }
        #expect(await remembered() == 100)
        // Two rotations of at least a second each; polled, since a starved machine may sweep late.
        for _ in 0..<200 where await remembered() > 0 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(await remembered() == 0)
        await client.shutdown()
    }
}
