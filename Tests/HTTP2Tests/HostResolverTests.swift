import Foundation
import SocketTestSupport
import Synchronization
import Testing
@testable import HTTP2

@Suite("Bounded DNS resolver and the egress check on resolved addresses")
struct HostResolverTests {
    /// A lookup that blocks until the test releases it, counting how many run at once.
    final class BlockingLookup: Sendable {
        let release = DispatchSemaphore(value: 0)
        let running = Mutex((now: 0, peak: 0))
        let answer: [SocketAddress]

        init(answer: [IPAddress]) { self.answer = answer.map { SocketAddress($0, port: 443) } }

        func lookup(_ host: String, _ port: Int) -> Result<[SocketAddress], HTTP2Error> {
            running.withLock {
                $0.now += 1
                $0.peak = max($0.peak, $0.now)
            }
            release.wait()
            running.withLock { $0.now -= 1 }
            return .success(answer)
        }
    }

    /// 50 lookups against 2 threads and a queue of 8: 2 run, 8 wait, the other 40 fail at once with
    /// `.connectFailed` (safe to retry); no third thread is ever started; released, the waiting ones finish.
    @Test func queueAndThreadsAreBounded() async throws {
        let blocking = BlockingLookup(answer: [IPAddress(ipv4: 0x0808_0808)])
        let resolver = HostResolver(limits: .unshared(threads: 2, queueCapacity: 8), lookup: blocking.lookup)
        let results = Mutex<[Result<[SocketAddress], HTTP2Error>]>([])
        for index in 0..<50 {
            resolver.resolve("host\(index).example", port: 443) { result in results.withLock { $0.append(result) } }
            // The first two are admitted at once; let both threads be inside them before the rest arrive.
            if index == 1 { while blocking.running.withLock({ $0.now }) < 2 { try await Task.sleep(for: .milliseconds(1)) } }
        }
        let refused = results.withLock { $0 }
        #expect(refused.count == 40)
        #expect(refused.allSatisfy { (try? $0.get()) == nil })
        for result in refused {
            if case .failure(let error) = result {
                #expect(error.code == .connectFailed)
                #expect(error.isSafeToRetry)
            }
        }
        #expect(resolver.startedThreads == 2)
        for _ in 0..<10 { blocking.release.signal() }
        while results.withLock({ $0.count }) < 50 { try await Task.sleep(for: .milliseconds(5)) }
        let all = results.withLock { $0 }
        #expect(all.filter { (try? $0.get()) != nil }.count == 10)
        #expect(blocking.running.withLock { $0.peak } == 2)
    }

    /// A lookup that never answers fails after the timeout; its late answer is dropped (the completion runs once).
    @Test func lookupTimesOut() async throws {
        let blocking = BlockingLookup(answer: [IPAddress(ipv4: 0x0808_0808)])
        let resolver = HostResolver(limits: .unshared(threads: 1, queueCapacity: 1), lookup: blocking.lookup)
        let loop = try HTTP2EventLoop(name: "test-resolver")
        defer { loop.shutdown() }
        let calls = Mutex<[Result<[SocketAddress], HTTP2Error>]>([])
        let done = Gate()
        _ = loop.execute {
            resolveOffLoop("slow.example", port: 443, policy: .publicInternetOnly, loop: loop, resolver: resolver,
                           timeout: .milliseconds(50)) { result in
                calls.withLock { $0.append(result) }
                done.open()
            }
        }
        await done.wait()
        blocking.release.signal()
        // The late answer hops to the loop and must find the request already answered.
        while blocking.running.withLock({ $0.now }) > 0 { try await Task.sleep(for: .milliseconds(5)) }
        await withCheckedContinuation { continuation in _ = loop.execute { continuation.resume() } }
        let recorded = calls.withLock { $0 }
        #expect(recorded.count == 1)
        guard case .failure(let error) = recorded.first else {
            Issue.record("expected a timeout")
            return
        }
        #expect(error.code == .connectFailed)
        #expect(error.isSafeToRetry)
    }

    /// The answer is checked before it reaches the pool: one forbidden address among public ones refuses the
    /// whole answer; an all-public answer passes unchanged, in order.
    @Test(arguments: [
        ([IPAddress(ipv4: 0x0808_0808)], true),
        ([IPAddress(ipv4: 0x0808_0808), IPAddress(ipv4: 0x0101_0101)], true),
        ([IPAddress(ipv4: 0x0808_0808), IPAddress(ipv4: 0xa9fe_a9fe)], false),
        ([IPAddress(ipv4: 0x7f00_0001), IPAddress(ipv4: 0x0808_0808)], false),
        ([IPAddress(bytes: [0xfd] + [UInt8](repeating: 0, count: 14) + [1])!], false),
        ([IPAddress(bytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1])!], false),
    ])
    func everyResolvedAddressIsChecked(_ answer: [IPAddress], _ allowed: Bool) async throws {
        let blocking = BlockingLookup(answer: answer)
        blocking.release.signal()
        let resolver = HostResolver(limits: .unshared(threads: 1, queueCapacity: 1), lookup: blocking.lookup)
        let loop = try HTTP2EventLoop(name: "test-resolver")
        defer { loop.shutdown() }
        for policy in [EgressPolicy.publicInternetOnly, .unrestricted] {
            let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<[SocketAddress], HTTP2Error>, Never>) in
                _ = loop.execute {
                    resolveOffLoop("mixed.example", port: 443, policy: policy, loop: loop, resolver: resolver) {
                        continuation.resume(returning: $0)
                    }
                }
            }
            if policy.allowsPrivateNetworks || allowed {
                #expect(try result.get().compactMap { $0.ipAddress } == answer)
            } else {
                #expect(throws: HTTP2Error.self) { try result.get() }
                if case .failure(let error) = result { #expect(error.code == .forbiddenAddress) }
            }
            blocking.release.signal()
        }
    }

    /// `localhost` through the real `getaddrinfo` (from /etc/hosts) resolves to loopback, which is refused.
    @Test func realLookupOfLocalhostIsRefused() async throws {
        let loop = try HTTP2EventLoop(name: "test-resolver")
        defer { loop.shutdown() }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<[SocketAddress], HTTP2Error>, Never>) in
            _ = loop.execute {
                resolveOffLoop("localhost", port: 443, policy: .publicInternetOnly, loop: loop) { continuation.resume(returning: $0) }
            }
        }
        guard case .failure(let error) = result else {
            Issue.record("localhost was not refused")
            return
        }
        #expect(error.code == .forbiddenAddress)
    }

    /// The client with the public-only policy refuses 127.0.0.1 in any spelling before connecting: a listening
    /// socket there never sees a connection, and the error is `.forbiddenAddress`.
    @Test func clientRefusesLoopbackWithoutConnecting() async throws {
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        defer { close(fd) }
        let loop = try HTTP2EventLoop(name: "test-egress-client")
        defer { loop.shutdown() }
        var configuration = HTTP2ClientConfiguration()
        configuration.egressPolicy = .publicInternetOnly
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        for host in ["127.0.0.1", "0x7f.1", "2130706433", "127.1", "localhost"] {
            do {
                _ = try await client.send(HTTP2Request(method: "GET", path: "/"), to: HTTP2Origin(scheme: .https, host: host, port: port))
                Issue.record("\(host): sent")
            } catch let error as HTTP2Error {
                #expect(error.code == .forbiddenAddress, "\(host): \(error)")
            }
        }
        await client.shutdown()
        // Nothing ever connected: accept has nothing to take.
        let accepted = accept(fd, nil, nil)
        #expect(accepted < 0)
        if accepted >= 0 { close(accepted) }
    }

    /// Web Push's client has a resolver of its own: while every thread and queue place of one resolver is held by
    /// lookups that never answer, a client on another resolver still resolves, connects and is answered; a
    /// client on the jammed one is refused at once (queue full), never left waiting.
    @Test func aClientWithItsOwnResolverIsNotHeldUpByAnothersStuckLookups() async throws {
        let loop = try HTTP2EventLoop(name: "test-resolver-lanes")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
        let port = try server.start()
        let stuck = BlockingLookup(answer: [IPAddress(ipv4: 0x7F00_0001)])
        let jammed = HostResolver(limits: .unshared(threads: 1, queueCapacity: 1), lookup: stuck.lookup)
        let own = HostResolver(limits: .unshared(threads: 1, queueCapacity: 4)) { _, port in
            .success([SocketAddress(IPAddress(ipv4: 0x7F00_0001), port: port)])
        }
        var jammedConfiguration = HTTP2ClientConfiguration()
        jammedConfiguration.resolver = { _ in jammed }
        var ownConfiguration = HTTP2ClientConfiguration()
        ownConfiguration.resolver = { _ in own }
        let hostile = HTTP2Client(eventLoop: loop, configuration: jammedConfiguration)
        let other = HTTP2Client(eventLoop: loop, configuration: ownConfiguration)
        // Two lookups that never answer: one on the thread, then one in the queue.
        func hold(_ host: String) -> Task<Void, Never> {
            Task { _ = try? await hostile.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .http, host: host, port: port)) }
        }
        let first = hold("h1.slow.example")
        while stuck.running.withLock({ $0.now }) < 1 { try await Task.sleep(for: .milliseconds(5)) }
        let second = hold("h2.slow.example")
        while jammed.queuedCount < 1 { try await Task.sleep(for: .milliseconds(5)) }
        let answer = try await other.send(HTTP2Request(path: "/", body: [7]), to: HTTP2Origin(scheme: .http, host: "push.example", port: port))
        #expect(answer.status == 200 && answer.body == [7])
        await #expect {
            try await hostile.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .http, host: "h3.slow.example", port: port))
        } throws: { ($0 as? HTTP2Error)?.code == .connectFailed }
        stuck.release.signal()
        stuck.release.signal()
        _ = await (first.value, second.value)
        await hostile.shutdown()
        await other.shutdown()
        await server.shutdown()
    }

    /// A client whose names are looked up through the real `getaddrinfo` on a resolver with the untrusted names'
    /// shares, asking a name server on 127.0.0.1 that reads every query and answers none (names in /etc/hosts,
    /// such as `localhost`, never reach it), and an h2c echo server on 127.0.0.1.
    struct SilentDNSClient {
        let dns: SilentNameServer
        let resolver: HostResolver
        let client: HTTP2Client
        let port: Int

        /// Sends one request for `tenant` to each of `hosts` (at the echo server's port), in tasks of their own,
        /// and returns once `tenant` has `running` lookups at the name server.
        func hold(_ hosts: [String], for tenant: String, until running: Int) async throws -> [Task<Void, Never>] {
            let held = hosts.map { host in
                Task {
                    _ = try? await client.send(
                        HTTP2Request(path: "/", tenant: HTTP2Tenant(tenant)), to: HTTP2Origin(scheme: .http, host: host, port: port))
                }
            }
            while resolver.running(tenant: tenant) < running || dns.askedNames.count < running {
                try await Task.sleep(for: .milliseconds(10))
            }
            return held
        }

        static func with(
            maximumQueueWait: Duration? = .seconds(2), _ body: (SilentDNSClient) async throws -> [Task<Void, Never>]
        ) async throws {
            let dns = try SilentNameServer()
            let resolver = HostResolver(limits: .untrustedNames) { host, port in
                dns.useOnThisThread(timeoutSeconds: 3600)
                return SocketAddress.resolve(host, port: port)
            }
            let loop = try HTTP2EventLoop(name: "test-resolver-shares")
            defer { loop.shutdown() }
            let server = HTTP2Server(eventLoop: loop, tls: nil, handler: echoHandler)
            let port = try server.start()
            var configuration = HTTP2ClientConfiguration()
            configuration.resolver = { _ in resolver }
            configuration.maximumQueueWait = maximumQueueWait
            let client = HTTP2Client(eventLoop: loop, configuration: configuration)
            let held = try await body(SilentDNSClient(dns: dns, resolver: resolver, client: client, port: port))
            // The held requests are cancelled and their lookups answered, so the client can shut down.
            for task in held { task.cancel() }
            dns.stop()
            for task in held { await task.value }
            await client.shutdown()
            await server.shutdown()
        }
    }

    /// Names whose DNS never answers: one tenant's lookups of names under one registrable domain hold that
    /// domain's share of the threads (2), and with its names under other domains the tenant holds its own share
    /// (8), never more, however many it asks for. Meanwhile another tenant's request through the same client and
    /// resolver is looked up at once (a name from /etc/hosts), connected, sent and answered, while every one of
    /// the first tenant's lookups is still unanswered.
    @Test func namesThatNeverAnswerHoldOnlyTheirDomainsAndTenantsShares() async throws {
        try await SilentDNSClient.with { rig in
            let hostile = (1...60).map { "h\($0).slow.example.org" } + (1...30).map { "push.d\($0).example" }
            let held = try await rig.hold(hostile, for: "hostile-app", until: 8)
            let answer = try await rig.client.send(
                HTTP2Request(path: "/", body: [7], tenant: HTTP2Tenant("other-app")),
                to: HTTP2Origin(scheme: .http, host: "localhost", port: rig.port))
            #expect(answer.status == 200 && answer.body == [7])
            let asked = rig.dns.askedNames
            #expect(rig.resolver.running(tenant: "hostile-app") == 8)
            #expect(rig.resolver.running(domainOf: "h1.slow.example.org") == 2)
            #expect(asked.count { $0.hasSuffix(".slow.example.org") } == 2, "\(asked)")
            #expect(asked.count == 8, "\(asked)")
            #expect(rig.resolver.startedThreads <= 9)
            return held
        }
    }

    /// A connection that requests of several tenants wait for is looked up on any of their shares: one tenant
    /// whose names never answer (its share of 8 full) asks first for a healthy origin, whose lookup then waits for
    /// that tenant's share; another tenant's request for the same origin lets the lookup start on its own share,
    /// and both are answered over the one connection while the first tenant's 8 lookups are still unanswered.
    @Test func aLookupAnotherTenantWaitsForStartsOnThatTenantsShare() async throws {
        try await SilentDNSClient.with(maximumQueueWait: nil) { rig in
            let held = try await rig.hold((1...8).map { "push.d\($0).example" }, for: "hostile-app", until: 8)
            let healthy = HTTP2Origin(scheme: .http, host: "localhost", port: rig.port)
            let first = Task {
                try await rig.client.send(HTTP2Request(path: "/", body: [1], tenant: HTTP2Tenant("hostile-app")), to: healthy)
            }
            while rig.resolver.queuedCount < 1 { try await Task.sleep(for: .milliseconds(10)) }
            let answer = try await rig.client.send(HTTP2Request(path: "/", body: [2], tenant: HTTP2Tenant("other-app")), to: healthy)
            #expect(answer.status == 200 && answer.body == [2])
            let firstAnswer = try await first.value
            #expect(firstAnswer.status == 200 && firstAnswer.body == [1])
            #expect(rig.resolver.running(tenant: "hostile-app") == 8)
            #expect(rig.dns.askedNames.count == 8)
            return held
        }
    }
}
