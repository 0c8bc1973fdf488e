import Synchronization
import Testing
@testable import HTTP2

/// An origin's queue by tenant (`TenantQueues`), through the pool's events and actions: turns across tenants,
/// arrival order within one, the share bound, requeues, expiry, answered entries and forgetting.
extension PoolStateMachineTests {
    static let tenantA = HTTP2Tenant("A")
    static let tenantB = HTTP2Tenant("B")
    static let tenantC = HTTP2Tenant("C")
    static let tenantD = HTTP2Tenant("D")

    @Test func tenantsTakeTurnsAndEachKeepsItsArrivalOrder() {
        let (A, B, C, D) = (Self.tenantA, Self.tenantB, Self.tenantC, Self.tenantD)
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        #expect(describe(pool.enqueue(Array(1...100), tenant: A, to: a, now: t0)) == ["open 1 a.example"])
        _ = pool.enqueue([101, 102, 103], tenant: B, to: a, now: t0)
        _ = pool.enqueue(201, tenant: C, to: a, now: t0)
        pool.connected(1, maxStreams: 7, now: t0)
        // One stream per tenant in turn, A's hundred requests notwithstanding; each tenant's in its order.
        #expect(describe(pool.dispatch(a, now: t0)) == [
            "start 1 on 1 for A", "start 101 on 1 for B", "start 201 on 1 for C", "start 2 on 1 for A",
            "start 102 on 1 for B", "start 3 on 1 for A", "start 103 on 1 for B",
        ])
        #expect(pool.waiting(at: a) == 97)
        // A newcomer gets the next stream that ends, before A's 97 (A holds 3, above a quarter of 7).
        _ = pool.enqueue(301, tenant: D, to: a, now: t0)
        pool.streamClosed(1, tenant: B, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 301 on 1 for D"])
        // C's one stream ends and C, with nothing waiting, is forgotten; A, the only tenant waiting, goes on.
        #expect(pool.tenantCount(at: a) == 4)
        pool.streamClosed(1, tenant: C, now: t0)
        #expect(pool.tenantCount(at: a) == 3)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 4 on 1 for A"])
    }

    /// A tenant whose answers never come keeps the streams it has, and gets no more while another tenant below
    /// its share waits: plain turns would hand it every other stream that ends until it held them all.
    @Test func aTenantAtItsShareGetsNoStreamWhileATenantBelowItWaits() {
        let (A, B) = (Self.tenantA, Self.tenantB)
        var pool = machine { $0.maximumInFlightPerOrigin = 4; $0.maximumConnectionsPerOrigin = 1 }
        _ = pool.enqueue(Array(1...10), tenant: A, to: a, now: t0)
        _ = pool.enqueue(Array(101...110), tenant: B, to: a, now: t0)
        pool.connected(1, maxStreams: 100, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == [
            "start 1 on 1 for A", "start 101 on 1 for B", "start 2 on 1 for A", "start 102 on 1 for B",
        ])
        // A's answers never come; each of B's that ends gives B the next stream.
        for id in 103...110 {
            pool.streamClosed(1, tenant: B, now: t0)
            #expect(describe(pool.dispatch(a, now: t0)) == ["start \(id) on 1 for B"])
        }
        // Nothing of B waits: A takes what B leaves, beyond its share (no stream stays unused for the bound).
        pool.streamClosed(1, tenant: B, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 3 on 1 for A"])
        pool.streamClosed(1, tenant: B, now: t0)
        #expect(pool.tenantCount(at: a) == 1)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 4 on 1 for A"])
        #expect(pool.inFlight(at: a) == 4)
    }

    /// The share is of the streams the origin's connections take now, not of the cap alone.
    @Test func theShareIsTakenFromTheStreamsThePeerAllows() {
        let (A, B) = (Self.tenantA, Self.tenantB)
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        _ = pool.enqueue(Array(1...10), tenant: A, to: a, now: t0)
        pool.connected(1, maxStreams: 4, now: t0)
        #expect(pool.dispatch(a, now: t0).count == 4)
        _ = pool.enqueue(Array(101...110), tenant: B, to: a, now: t0)
        // A holds all 4 of the peer's streams, twice its share of them (256 / 2 would be 128): B gets the next two.
        for id in 101...102 {
            pool.streamClosed(1, tenant: A, now: t0)
            #expect(describe(pool.dispatch(a, now: t0)) == ["start \(id) on 1 for B"])
        }
        pool.streamClosed(1, tenant: A, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 5 on 1 for A"])
    }

    @Test func aRefusedRequestGoesBackToTheFrontOfItsTenantsQueue() {
        let (A, B) = (Self.tenantA, Self.tenantB)
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        _ = pool.enqueue([1, 2, 3], tenant: A, to: a, now: t0)
        _ = pool.enqueue([101, 102], tenant: B, to: a, now: t0)
        pool.connected(1, maxStreams: 3, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1 for A", "start 101 on 1 for B", "start 2 on 1 for A"])
        // 2 is refused beside two open streams: the limit drops to 2 and 2 goes before 3, in A's turn.
        #expect(pool.refused(2, tenant: A, on: 1, at: a, retries: 0, now: t0) == (.requeued, false))
        pool.streamClosed(1, tenant: A, now: t0, processed: false)
        #expect(describe(pool.dispatch(a, now: t0)).isEmpty)
        pool.streamClosed(1, tenant: B, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 102 on 1 for B"])
        pool.streamClosed(1, tenant: A, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 2 on 1 for A"])
        pool.streamClosed(1, tenant: B, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 3 on 1 for A"])
    }

    /// A refused request of a tenant with nothing else waiting joins the turns at the back: it just had one.
    @Test func aRefusedRequestOfATenantWithNothingWaitingJoinsTheTurnsLast() {
        let (A, B, C) = (Self.tenantA, Self.tenantB, Self.tenantC)
        var pool = machine { $0.maximumConnectionsPerOrigin = 1; $0.maximumInFlightPerOrigin = 3 }
        _ = pool.enqueue(1, tenant: A, to: a, now: t0)
        _ = pool.enqueue([101, 102], tenant: B, to: a, now: t0)
        _ = pool.enqueue([201, 202], tenant: C, to: a, now: t0)
        pool.connected(1, maxStreams: 100, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1 for A", "start 101 on 1 for B", "start 201 on 1 for C"])
        #expect(pool.unprocessed(1, tenant: A, at: a, retries: 1, now: t0) == .requeued)
        pool.streamClosed(1, tenant: A, now: t0, processed: false)
        pool.streamClosed(1, tenant: B, now: t0)
        pool.streamClosed(1, tenant: C, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 102 on 1 for B", "start 202 on 1 for C", "start 1 on 1 for A"])
    }

    @Test func eachTenantsRequestsExpireFromTheFrontOfItsOwnQueue() {
        let (A, B) = (Self.tenantA, Self.tenantB)
        var pool = machine { $0.maximumInFlightPerOrigin = 1; $0.maximumQueueWait = .seconds(2) }
        _ = pool.enqueue(1, tenant: A, to: a, now: t0)
        pool.connected(1, maxStreams: 10, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == ["start 1 on 1 for A"])
        _ = pool.enqueue([2, 3], tenant: A, to: a, now: t0)
        _ = pool.enqueue(101, tenant: B, to: a, now: t0 + .seconds(1))
        _ = pool.enqueue(4, tenant: A, to: a, now: t0 + .milliseconds(1500))
        #expect(describe(pool.expireWaits(now: t0 + .seconds(2))) == ["fail [2, 3] originBusy safe"])
        #expect(describe(pool.expireWaits(now: t0 + .seconds(3))) == ["fail [101] originBusy safe"])
        // B, with nothing waiting and no stream, is forgotten.
        #expect(pool.tenantCount(at: a) == 1)
        #expect(describe(pool.expireWaits(now: t0 + .milliseconds(3500))) == ["fail [4] originBusy safe"])
        #expect(pool.waiting(at: a) == 0)
    }

    @Test func answeredRequestsOfEveryTenantAreSkippedAndDroppedInBulk() {
        let (A, B, C) = (Self.tenantA, Self.tenantB, Self.tenantC)
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        _ = pool.enqueue(Array(1...100), tenant: A, to: a, now: t0)
        _ = pool.enqueue(Array(101...110), tenant: B, to: a, now: t0)
        for id in 1...60 where id != 7 { pool.answeredWhileQueued(UInt64(id), tenant: A, at: a) }
        #expect(pool.waiting(at: a) == 51)
        #expect(pool.storedCount(at: a) <= 51 + 31)
        // A tenant whose every queued request was answered is forgotten.
        _ = pool.enqueue([201, 202], tenant: C, to: a, now: t0)
        #expect(pool.tenantCount(at: a) == 3)
        pool.answeredWhileQueued(201, tenant: C, at: a)
        pool.answeredWhileQueued(202, tenant: C, at: a)
        #expect(pool.tenantCount(at: a) == 2)
        pool.connected(1, maxStreams: 4, now: t0)
        #expect(describe(pool.dispatch(a, now: t0)) == [
            "start 7 on 1 for A", "start 101 on 1 for B", "start 61 on 1 for A", "start 102 on 1 for B",
        ])
    }

    /// Tenants are remembered only while they have streams or waiting requests, however many came.
    @Test func tenantsWithNothingLeftAreForgotten() {
        var pool = machine { $0.maximumConnectionsPerOrigin = 1 }
        let tenants = (0..<50).map { HTTP2Tenant("app-\($0)") }
        func startOnePerTenant(_ base: UInt64) {
            for (index, tenant) in tenants.enumerated() { _ = pool.enqueue(base + UInt64(index), tenant: tenant, to: a, now: t0) }
        }
        startOnePerTenant(1000)
        pool.connected(1, maxStreams: 100, now: t0)
        #expect(pool.dispatch(a, now: t0).count == 50)
        #expect(pool.tenantCount(at: a) == 50)
        for tenant in tenants { pool.streamClosed(1, tenant: tenant, now: t0) }
        #expect(pool.tenantCount(at: a) == 1)
        // Streams still open when their connection closes count off their tenants too.
        startOnePerTenant(2000)
        #expect(pool.inFlight(at: a) == 50)
        _ = pool.connectionClosed(1, error: nil, now: t0, openStreams: tenants)
        #expect(pool.tenantCount(at: a) == 1)
        // A close that names no tenant leaves counts above zero; the next dispatch with no stream open clears them.
        #expect(describe(pool.enqueue(3000, to: a, now: t0)) == ["open 2 a.example"])
        pool.connected(2, maxStreams: 100, now: t0)
        startOnePerTenant(4000)
        _ = pool.dispatch(a, now: t0)
        #expect(pool.tenantCount(at: a) == 51)
        _ = pool.connectionClosed(2, error: nil, now: t0)
        _ = pool.enqueue(5000, tenant: tenants[0], to: a, now: t0)
        #expect(pool.tenantCount(at: a) == 1)
        #expect(pool.waiting(at: a) == 1)
    }

    /// Requests of one tenant, named or not, are dispatched as they were before tenants: every stream to them.
    @Test func oneTenantAloneGetsEveryStreamInArrivalOrder() {
        var named = machine { $0.maximumInFlightPerOrigin = 4 }
        var unnamed = machine { $0.maximumInFlightPerOrigin = 4 }
        _ = named.enqueue(Array(1...10), tenant: Self.tenantA, to: a, now: t0)
        _ = unnamed.enqueue(Array(1...10), to: a, now: t0)
        named.connected(1, maxStreams: 100, now: t0)
        unnamed.connected(1, maxStreams: 100, now: t0)
        #expect(describe(named.dispatch(a, now: t0)) == (1...4).map { "start \($0) on 1 for A" })
        #expect(describe(unnamed.dispatch(a, now: t0)) == (1...4).map { "start \($0) on 1" })
        named.streamClosed(1, tenant: Self.tenantA, now: t0)
        #expect(describe(named.dispatch(a, now: t0)) == ["start 5 on 1 for A"])
        #expect(named.tenantCount(at: a) == 1)
    }
}

extension HTTP2PoolBoundsTests {
    /// One tenant's 500 requests wait at an origin whose two streams are held: the request another tenant sends
    /// after them is the next one the server receives when a stream comes free.
    @Test func anotherTenantsRequestGetsTheNextFreeStreamBehindOneTenantsQueue() async throws {
        let loop = try HTTP2EventLoop(name: "test-tenant-turns")
        defer { loop.shutdown() }
        // The paths in the order the server received them; the handler of arrival `n` answers once `released > n`.
        let arrivals = Mutex<[String]>([])
        let released = Mutex(0)
        let server = HTTP2Server(eventLoop: loop, tls: nil) { request in
            let position = arrivals.withLock { arrivals in
                arrivals.append(request.path)
                return arrivals.count - 1
            }
            while released.withLock({ $0 }) <= position { try? await Task.sleep(for: .milliseconds(5)) }
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumInFlightPerOrigin = 2
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let core = client.core
        let broadcast = Task {
            await client.send((0..<500).map { HTTP2Request(path: "/a/\($0)", timeout: .seconds(600), tenant: HTTP2Tenant("A")) },
                              to: origin)
        }
        #expect(await eventually(loop) { arrivals.withLock { $0.count } == 2 && core.machine.waiting(at: origin) == 498 })
        let single = Task {
            try await client.send(HTTP2Request(path: "/b", timeout: .seconds(600), tenant: HTTP2Tenant("B")), to: origin)
        }
        #expect(await eventually(loop) { core.machine.waiting(at: origin) == 499 })
        released.withLock { $0 = 1 }
        #expect(await eventually(loop) { arrivals.withLock { $0.count } == 3 })
        #expect(arrivals.withLock { $0[2] } == "/b")
        released.withLock { $0 = Int.max }
        #expect(try await single.value.status == 200)
        #expect(await broadcast.value.allSatisfy { (try? $0.get().status) == 200 })
        await client.shutdown()
        await server.shutdown()
    }
}
