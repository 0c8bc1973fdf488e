import Foundation
import Synchronization
import Testing
@testable import HTTP2

/// The pool's decisions without sockets: events in, actions out, time given explicitly.
@Suite("HTTP2 pool state machine")
struct PoolStateMachineTests {
    typealias Action = PoolStateMachine.Action
    let a = HTTP2Origin(scheme: .https, host: "a.example", port: 443)
    let b = HTTP2Origin(scheme: .https, host: "b.example", port: 443)
    let c = HTTP2Origin(scheme: .https, host: "c.example", port: 443)
    let t0 = ContinuousClock.now

    func machine(_ adjust: (inout HTTP2ClientConfiguration) -> Void = { _ in }) -> PoolStateMachine {
        var configuration = HTTP2ClientConfiguration()
        adjust(&configuration)
        return PoolStateMachine(limits: .init(configuration))
    }

    /// The actions as short strings, for comparing whole sequences.
    func describe(_ actions: [Action]) -> [String] {
        actions.map { action in
            switch action {
            case .open(let id, let origin): "open \(id) \(origin.host)"
            case .start(let request, let connection, let tenant): "start \(request) on \(connection)\(tenant.map { " for \($0.key)" } ?? "")"
            case .fail(let ids, let error): "fail \(ids) \(error.code)\(error.isSafeToRetry ? " safe" : "")"
            case .close(let id): "close \(id)"
            case .wakeUp(let origin, let delay): "wake \(origin.host) after \(delay)"
            }
        }
    }

    @Test func opensOnceThenDispatchesWithinThePeersStreamLimit() {
        var pool = machine()
        #expect(describe(pool.enqueue(1, to: a, now: t0)) == ["open 1 a.example"])
        // Still connecting: requests wait, no second connect.
        #expect(describe(pool.enqueue(2, to: a, now: t0)).isEmpty)
        #expect(describe(pool.enqueue(3, to: a, now: t0)).isEmpty)
        pool.connected(1, maxStreams: 2, now: t0)
        // Two streams allowed; the third request opens a second connection (2 per origin by default).
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1", "start 2 on 1", "open 2 a.example"])
        pool.connected(2, maxStreams: 2, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 3 on 2"])
        #expect(pool.inFlight(at: a) == 3)
    }

    /// Requests queued together get the actions the same requests get queued one by one and dispatched after
    /// the last.
    @Test func aBatchEnqueuedAtOnceIsDispatchedAsOneByOne() {
        var together = machine()
        var alone = machine()
        #expect(describe(together.enqueue([1, 2, 3], to: a, now: t0)) == ["open 1 a.example"])
        for id: UInt64 in 1...3 { _ = alone.enqueue(id, to: a, now: t0) }
        together.connected(1, maxStreams: 2, now: t0)
        alone.connected(1, maxStreams: 2, now: t0)
        #expect(describe(together.dispatch(a, now: t0)) == describe(alone.dispatch(a, now: t0)))
        #expect(describe(together.enqueue([4, 5], to: a, now: t0)) == describe({
            _ = alone.enqueue(4, to: a, now: t0)
            return alone.enqueue(5, to: a, now: t0)
        }()))
        #expect(together.waiting(at: a) == alone.waiting(at: a))
    }

    @Test func inFlightPerOriginCapHoldsRequestsInTheQueue() {
        var pool = machine { $0.maximumInFlightPerOrigin = 2 }
        _ = pool.enqueue(1, to: a, now: t0)
        for id in 2...5 { _ = pool.enqueue(UInt64(id), to: a, now: t0) }
        pool.connected(1, maxStreams: 1000, now: t0)
        // The peer allows 1000 streams, the cap 2; no second connection is opened for the rest either.
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1", "start 2 on 1"])
        #expect(pool.waiting(at: a) == 3)
        // Another origin is not held up by a's waiting requests.
        #expect(describe(pool.enqueue(9, to: b, now: t0)) == ["open 2 b.example"])
        pool.streamClosed(1, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 3 on 1"])
    }

    @Test func failedConnectFailsWaitingRequestsSafelyAndBacksOff() {
        var pool = machine()
        _ = pool.enqueue(1, to: a, now: t0)
        _ = pool.enqueue(2, to: a, now: t0)
        let refused = HTTP2Error(.connectFailed, "connect failed: Connection refused", isSafeToRetry: true)
        #expect(describe(pool.connectionClosed(1, error: refused, now: t0)) == ["fail [1, 2] connectFailed safe"])
        // Within the backoff (100 ms after one failure) a new request waits for the wake-up.
        #expect(describe(pool.enqueue(3, to: a, now: t0 + .milliseconds(10))) == ["wake a.example after 0.09 seconds"])
        #expect(describe(pool.enqueue(4, to: a, now: t0 + .milliseconds(20))).isEmpty)
        #expect(describe(pool.wokeUp(a, now: t0 + .milliseconds(100))) == ["open 2 a.example"])
        // A second failure doubles the wait.
        _ = pool.connectionClosed(2, error: refused, now: t0 + .milliseconds(100))
        #expect(describe(pool.enqueue(5, to: a, now: t0 + .milliseconds(100))) == ["wake a.example after 0.2 seconds"])
        // Success resets it.
        _ = pool.wokeUp(a, now: t0 + .milliseconds(300))
        pool.connected(3, maxStreams: 10, now: t0 + .milliseconds(300))
        #expect(describe(pool.dispatch(a, now: t0 + .milliseconds(300))) == ["start 5 on 3"])
    }

    @Test func anOriginTheEgressPolicyRefusedFailsNewRequestsAtOnceUntilItsBackoffEnds() {
        var pool = machine()
        _ = pool.enqueue(1, to: a, now: t0)
        let forbidden = HTTP2Error(.forbiddenAddress, "a.example resolves to a loopback address")
        #expect(describe(pool.connectionClosed(1, error: forbidden, now: t0)) == ["fail [1] forbiddenAddress safe"])
        // Within the backoff a new request fails with the refusal instead of waiting for the wake-up.
        #expect(describe(pool.enqueue(2, to: a, now: t0 + .milliseconds(10))) == ["fail [2] forbiddenAddress safe"])
        // Other origins are untouched; after the backoff the name is resolved (and checked) again.
        #expect(describe(pool.enqueue(3, to: b, now: t0 + .milliseconds(10))) == ["open 2 b.example"])
        #expect(describe(pool.enqueue(4, to: a, now: t0 + .milliseconds(100))) == ["open 3 a.example"])
        // A plain connect failure keeps the old rule: wait for the wake-up.
        let refused = HTTP2Error(.connectFailed, "connect failed: Connection refused", isSafeToRetry: true)
        _ = pool.connectionClosed(3, error: refused, now: t0 + .milliseconds(100))
        #expect(describe(pool.enqueue(5, to: a, now: t0 + .milliseconds(110))) == ["wake a.example after 0.19 seconds"])
    }

    @Test func globalCapClosesTheLeastRecentlyUsedIdleConnection() {
        var pool = machine { $0.maximumConnections = 2 }
        _ = pool.enqueue(1, to: a, now: t0)
        pool.connected(1, maxStreams: 10, now: t0)
        _ = pool.dispatch(a, now: t0)
        _ = pool.enqueue(2, to: b, now: t0)
        pool.connected(2, maxStreams: 10, now: t0)
        _ = pool.dispatch(b, now: t0)
        // b's stream ends later than a's: a's connection is the least recently used.
        pool.streamClosed(1, now: t0 + .seconds(1))
        pool.streamClosed(2, now: t0 + .seconds(2))
        #expect(describe(pool.enqueue(3, to: c, now: t0 + .seconds(3))) == ["close 1", "open 3 c.example"])
        #expect(pool.openConnections == 2)
    }

    @Test func atTheGlobalCapWithEveryConnectionBusyTheNewOriginWaits() {
        var pool = machine { $0.maximumConnections = 1 }
        _ = pool.enqueue(1, to: a, now: t0)
        pool.connected(1, maxStreams: 10, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1"])
        #expect(describe(pool.enqueue(2, to: b, now: t0)).isEmpty)
        #expect(pool.waiting(at: b) == 1)
        // a's stream ends: b is dispatched again, which closes a's now idle connection.
        pool.streamClosed(1, now: t0 + .seconds(1))
        #expect(pool.takeStarved() == [b])
        #expect(describe(pool.dispatch(b, now: t0 + .seconds(1))) == ["close 1", "open 2 b.example"])
        #expect(pool.takeStarved().isEmpty)
    }

    @Test func idleConnectionsCloseAndIdleOriginsAreForgotten() {
        var pool = machine { $0.idleTimeout = .seconds(60) }
        _ = pool.enqueue(1, to: a, now: t0)
        pool.connected(1, maxStreams: 10, now: t0)
        _ = pool.dispatch(a, now: t0)
        pool.streamClosed(1, now: t0 + .seconds(1))
        #expect(pool.keepaliveWanted(1, now: t0 + .seconds(30)))
        #expect(describe(pool.sweep(now: t0 + .seconds(60))).isEmpty)
        #expect(describe(pool.sweep(now: t0 + .seconds(61))) == ["close 1"])
        // Closing: no PING, no new streams, not counted against the cap.
        #expect(!pool.keepaliveWanted(1, now: t0 + .seconds(61)))
        #expect(pool.openConnections == 0)
        #expect(describe(pool.connectionClosed(1, error: nil, now: t0 + .seconds(62))).isEmpty)
        #expect(pool.originCount == 1)
        _ = pool.sweep(now: t0 + .seconds(63))
        #expect(pool.originCount == 0)
    }

    @Test func keepaliveOnlyOnIdleRecentlyUsedConnections() {
        var pool = machine { $0.idleTimeout = .seconds(60) }
        _ = pool.enqueue(1, to: a, now: t0)
        #expect(!pool.keepaliveWanted(1, now: t0))  // not ready yet
        pool.connected(1, maxStreams: 10, now: t0)
        _ = pool.dispatch(a, now: t0)
        #expect(!pool.keepaliveWanted(1, now: t0 + .seconds(5)))  // a stream is open: its deadline covers it
        pool.streamClosed(1, now: t0 + .seconds(5))
        #expect(pool.keepaliveWanted(1, now: t0 + .seconds(50)))
        #expect(!pool.keepaliveWanted(1, now: t0 + .seconds(65)))  // unused for the idle timeout: closed, not pinged
    }

    @Test func unprocessedRequestsGoFirstAndGiveUpAfterTheRetryLimit() {
        var pool = machine { $0.maximumRetries = 2 }
        _ = pool.enqueue(1, to: a, now: t0)
        pool.connected(1, maxStreams: 1, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1"])
        #expect(describe(pool.enqueue(2, to: a, now: t0)) == ["open 2 a.example"])
        // REFUSED_STREAM on request 1: it goes before request 2.
        pool.streamClosed(1, now: t0)
        #expect(pool.unprocessed(1, at: a, retries: 1, now: t0) == .requeued)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1"])
        pool.streamClosed(1, now: t0)
        #expect(pool.unprocessed(1, at: a, retries: 2, now: t0) == .requeued)
        #expect(pool.unprocessed(1, at: a, retries: 3, now: t0) == .giveUp)
    }

    /// Starts `count` requests (ids 1...count) on connection 1 of `a`, which allows `maxStreams`.
    func busy(_ pool: inout PoolStateMachine, count: Int, maxStreams: Int) {
        for id in 1...count { _ = pool.enqueue(UInt64(id), to: a, now: t0) }
        pool.connected(1, maxStreams: maxStreams, now: t0)
        #expect(pool.dispatch(a, now: t0).count == count)
    }

    @Test func refusalsLowerTheStreamLimitToTheStreamsThePeerAcceptedAndCostNoRetry() {
        var pool = machine { $0.maximumRetries = 1; $0.maximumConnectionsPerOrigin = 1 }
        busy(&pool, count: 8, maxStreams: 100)
        // The peer takes 5 at once: streams 6, 7 and 8 come back refused, each while the others are still open.
        for id in [6, 7, 8] as [UInt64] {
            let answer = pool.refused(id, on: 1, at: a, retries: 0, now: t0)
            #expect(answer.decision == .requeued && !answer.counted)
            pool.streamClosed(1, now: t0, processed: false)
        }
        #expect(pool.streamLimit(of: 1) == 5)
        // Nothing more starts while 5 are open; each processed stream frees one slot for a refused request.
        #expect(describe(pool.dispatch(a, now: t0)).isEmpty)
        pool.streamClosed(1, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 8 on 1"])
        // Refused again with 4 others open: the peer takes fewer now; lower again, still free.
        #expect(pool.refused(8, on: 1, at: a, retries: 0, now: t0) == (.requeued, false))
        #expect(pool.streamLimit(of: 1) == 4)
    }

    @Test func aRefusedStreamAloneOnItsConnectionLeavesTheLimitAndCountsUpToTheRetryLimit() {
        var pool = machine { $0.maximumRetries = 1 }
        busy(&pool, count: 1, maxStreams: 100)
        // Not explained by concurrency: it counts, and past maximumRetries the request gives up.
        #expect(pool.refused(1, on: 1, at: a, retries: 0, now: t0) == (.requeued, true))
        #expect(pool.streamLimit(of: 1) == 100)
        pool.streamClosed(1, now: t0, processed: false)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1"])
        #expect(pool.refused(1, on: 1, at: a, retries: 1, now: t0) == (.giveUp, true))
    }

    @Test func aLoweredLimitGrowsBackOneStreamPerWindowAndIntervalUpToThePeersLimit() {
        var pool = machine { $0.streamLimitRecoveryInterval = .seconds(1); $0.maximumConnectionsPerOrigin = 1 }
        busy(&pool, count: 4, maxStreams: 4)
        _ = pool.refused(4, on: 1, at: a, retries: 0, now: t0)
        pool.streamClosed(1, now: t0, processed: false)
        #expect(pool.streamLimit(of: 1) == 3)
        // A window of 3 processed streams within the interval: not yet.
        for _ in 0..<3 { pool.streamClosed(1, now: t0 + .milliseconds(500)) }
        #expect(pool.streamLimit(of: 1) == 3)
        // After the interval, the next processed stream completes a window: one more stream, never above the
        // peer's 4.
        pool.streamClosed(1, now: t0 + .seconds(1))
        #expect(pool.streamLimit(of: 1) == 4)
        for step in 2...20 { pool.streamClosed(1, now: t0 + .seconds(step)) }
        #expect(pool.streamLimit(of: 1) == 4)
        // The peer lowering its SETTINGS_MAX_CONCURRENT_STREAMS wins over any learned limit.
        pool.settingsChanged(1, maxStreams: 2)
        #expect(pool.streamLimit(of: 1) == 2)
    }

    @Test func aNewConnectionOfTheOriginStartsFromTheLearnedLimit() {
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        busy(&pool, count: 6, maxStreams: 100)
        for id in [5, 6] as [UInt64] {
            _ = pool.refused(id, on: 1, at: a, retries: 0, now: t0)
            pool.streamClosed(1, now: t0, processed: false)
        }
        #expect(pool.streamLimit(of: 1) == 4)
        pool.goingAway(1)
        // The origin's one connection is draining; its successor opens (the cap counts usable connections).
        #expect(describe(pool.enqueue(7, to: a, now: t0)) == ["open 2 a.example"])
        pool.connected(2, maxStreams: 100, now: t0)
        #expect(pool.streamLimit(of: 2) == 4)
    }

    @Test func answeredQueuedRequestsAreSkippedAndDroppedInBulk() {
        var pool = machine()
        for id in 1...100 { _ = pool.enqueue(UInt64(id), to: a, now: t0) }
        for id in 1...60 where id != 7 { pool.answeredWhileQueued(UInt64(id), at: a) }
        #expect(pool.waiting(at: a) == 41)
        #expect(pool.storedCount(at: a) <= 41 + 31)
        pool.connected(1, maxStreams: 2, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)).prefix(2) == ["start 7 on 1", "start 61 on 1"])
    }

    @Test func requestsWaitingAtAnOriginWithEveryStreamInUseFailUnsentAfterTheQueueWait() {
        var pool = machine { $0.maximumInFlightPerOrigin = 2; $0.maximumQueueWait = .seconds(2) }
        for id in 1...4 { _ = pool.enqueue(UInt64(id), to: a, now: t0) }
        pool.connected(1, maxStreams: 1000, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1", "start 2 on 1"])
        #expect(describe(pool.expireWaits(now: t0 + .seconds(1))).isEmpty)
        _ = pool.enqueue(5, to: a, now: t0 + .seconds(1))
        pool.answeredWhileQueued(4, at: a)
        // 3 waited 2 s (4 was answered meanwhile: skipped); 5 only 1 s.
        #expect(describe(pool.expireWaits(now: t0 + .seconds(2))) == ["fail [3] originBusy safe"])
        #expect(pool.waiting(at: a) == 1)
        #expect(describe(pool.expireWaits(now: t0 + .seconds(3))) == ["fail [5] originBusy safe"])
        // Another origin's queue is its own.
        #expect(describe(pool.expireWaits(now: t0 + .seconds(30))).isEmpty)
    }

    /// A connection that does not open (a TLS handshake a black hole never answers) holds its requests no longer
    /// than a full origin does; the attempt goes on, and a request that comes later uses it once it is ready.
    @Test func requestsWaitingForAConnectionThatDoesNotOpenFailUnsentAfterTheQueueWait() {
        var pool = machine { $0.maximumQueueWait = .seconds(2) }
        #expect(describe(pool.enqueue(1, to: a, now: t0)) == ["open 1 a.example"])
        _ = pool.enqueue(2, to: a, now: t0 + .seconds(1))
        #expect(describe(pool.expireWaits(now: t0 + .seconds(2))) == ["fail [1] originBusy safe"])
        #expect(describe(pool.expireWaits(now: t0 + .seconds(3))) == ["fail [2] originBusy safe"])
        #expect(describe(pool.enqueue(3, to: a, now: t0 + .seconds(4))).isEmpty)  // the attempt under way serves it
        pool.connected(1, maxStreams: 10, now: t0 + .seconds(4))
        #expect(describe(pool.dispatch(a, now: t0 + .seconds(4))) == ["start 3 on 1"])
    }

    @Test func withoutAQueueWaitRequestsWaitUntilTheirDeadline() {
        var pool = machine { $0.maximumInFlightPerOrigin = 1; $0.maximumQueueWait = nil }
        for id in 1...2 { _ = pool.enqueue(UInt64(id), to: a, now: t0) }
        pool.connected(1, maxStreams: 10, now: t0)
        _ = pool.dispatch(a, now: t0)
        #expect(describe(pool.expireWaits(now: t0 + .seconds(3600))).isEmpty)
        #expect(pool.waiting(at: a) == 1)
    }

    @Test func goingAwayConnectionsTakeNoNewStreams() {
        var pool = machine()
        _ = pool.enqueue(1, to: a, now: t0)
        pool.connected(1, maxStreams: 10, now: t0)
        _ = pool.dispatch(a, now: t0)
        pool.goingAway(1)
        #expect(describe(pool.enqueue(2, to: a, now: t0)) == ["open 2 a.example"])
        // The draining connection still counts against the global cap until it closes.
        #expect(pool.openConnections == 2)
    }
}

/// The same bounds with real sockets: the client carries out the machine's actions.
@Suite("HTTP2 pool bounds over real sockets")
struct HTTP2PoolBoundsTests {
    /// Waits (up to ~5 s) until `condition` holds on the loop thread; a condition, not a timing assertion.
    func eventually(_ loop: HTTP2EventLoop, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
        for _ in 0..<250 {
            let holds = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                if !loop.execute({ c.resume(returning: condition()) }) { c.resume(returning: false) }
            }
            if holds { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    @Test func idleConnectionsCloseAndTheOriginIsForgotten() async throws {
        let loop = try HTTP2EventLoop(name: "test-idle")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.idleTimeout = .milliseconds(100)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        #expect(try await client.send(HTTP2Request(path: "/1"), to: origin).status == 200)
        let core = client.core
        #expect(await eventually(loop) { core.machine.openConnections == 0 && core.machine.originCount == 0 })
        // A later request opens a fresh connection.
        #expect(try await client.send(HTTP2Request(path: "/2"), to: origin).status == 200)
        #expect(server.core.acceptedConnections.load(ordering: .relaxed) == 2)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func theGlobalCapClosesAnIdleConnectionOfAnotherOrigin() async throws {
        let loop = try HTTP2EventLoop(name: "test-global-cap")
        defer { loop.shutdown() }
        let first = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        let second = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        let a = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: try first.start())
        let b = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: try second.start())
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumConnections = 1
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        for origin in [a, b, a, b] {
            #expect(try await client.send(HTTP2Request(path: "/"), to: origin).status == 200)
            let core = client.core
            #expect(await eventually(loop) { core.machine.openConnections <= 1 })
        }
        #expect(first.core.acceptedConnections.load(ordering: .relaxed) == 2)
        #expect(second.core.acceptedConnections.load(ordering: .relaxed) == 2)
        await client.shutdown()
        await first.shutdown()
        await second.shutdown()
    }

    /// A server that holds every answer: two requests get streams (the cap), the other three fail unsent with
    /// `.originBusy` once they have waited the queue wait, long before their deadline, and never reach it.
    @Test func requestsQueuedBehindASlowOriginComeBackUnsent() async throws {
        let loop = try HTTP2EventLoop(name: "test-queue-wait")
        defer { loop.shutdown() }
        let received = Mutex(0)
        let release = Mutex(false)
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            received.withLock { $0 += 1 }
            while !release.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(10)) }
            return HTTP2ServerResponse(status: 200, body: request.body)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumInFlightPerOrigin = 2
        configuration.maximumQueueWait = .milliseconds(200)
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let sends = Task {
            await client.send((0..<5).map { HTTP2Request(path: "/", body: [UInt8($0)], timeout: .seconds(60)) }, to: origin)
        }
        // The three waiting ones fail while the first two are still held.
        let core = client.core
        #expect(await eventually(loop) { received.withLock { $0 } == 2 })
        #expect(await eventually(loop) { core.machine.waiting(at: origin) == 0 })
        release.withLock { $0 = true }
        let results = await sends.value
        #expect(results.prefix(2).allSatisfy { (try? $0.get().status) == 200 })
        for result in results.suffix(3) {
            guard case .failure(let error as HTTP2Error) = result else {
                Issue.record("expected originBusy, got \(result)")
                continue
            }
            #expect(error.code == .originBusy && error.isSafeToRetry)
        }
        #expect(received.withLock { $0 } == 2)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func oneOriginNeverHasMoreStreamsThanItsCap() async throws {
        let loop = try HTTP2EventLoop(name: "test-inflight-cap")
        defer { loop.shutdown() }
        let inFlight = Mutex((now: 0, max: 0))
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            inFlight.withLock { $0.now += 1; $0.max = max($0.max, $0.now) }
            try? await Task.sleep(for: .milliseconds(5))
            inFlight.withLock { $0.now -= 1 }
            return HTTP2ServerResponse(status: 200, body: request.body)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumInFlightPerOrigin = 3
        // Queued requests wait as long as the machine's load makes them: this test is about the cap, not the wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let results = await client.send((0..<60).map { HTTP2Request(path: "/", body: [UInt8($0)]) },
                                        to: HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port))
        #expect(results.enumerated().allSatisfy { (try? $1.get().body) == [UInt8($0)] })
        #expect(inFlight.withLock { $0.max } <= 3)
        #expect(inFlight.withLock { $0.max } >= 2)
        await client.shutdown()
        await server.shutdown()
    }
}
