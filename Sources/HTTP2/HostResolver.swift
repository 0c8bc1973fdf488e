import Foundation
import Synchronization
internal import Glibc

/// Resolves host names with `getaddrinfo` on a small fixed set of threads fed by a bounded queue, so a flood of
/// lookups (thousands of Web Push origins, a slow DNS server) never starts a thread per lookup.
///
/// `getaddrinfo` cannot be cancelled; a lookup that outlives its caller's timeout keeps its thread until the
/// resolver library gives up (glibc: `options timeout:` × `attempts:` from resolv.conf). With every thread busy,
/// new lookups wait in the queue; once the queue is full they fail at once.
///
/// Clients share one resolver unless they choose another per origin (``HTTP2ClientConfiguration/resolver``): host
/// names that come from untrusted parties (Web Push endpoints, chosen by subscribers; endpoints an app overrides)
/// should have one of their own, so that names whose DNS never answers hold up only their own lookups.
public final class HostResolver: Sendable {
    /// The process-wide resolver clients use by default: 4 threads, 256 queued lookups.
    public static let shared = HostResolver(threads: 4, queueCapacity: 256)

    private struct State {
        var queue: [Job] = []
        var head = 0
        var threadsStarted = 0
    }

    private struct Job {
        var host: String
        var port: Int
        var completion: @Sendable (Result<[SocketAddress], HTTP2Error>) -> Void
    }

    /// Most lookups running at once.
    let threadCount: Int
    /// Most lookups waiting for a thread.
    let queueCapacity: Int
    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)
    private let lookup: @Sendable (String, Int) -> Result<[SocketAddress], HTTP2Error>

    /// A resolver of its own, using the C library's `getaddrinfo`.
    /// - Parameters:
    ///   - threads: resolver threads (at least 1), started on first use and kept for the process's life.
    ///   - queueCapacity: lookups that may wait for a free thread; more fail at once with `.connectFailed`.
    public convenience init(threads: Int, queueCapacity: Int) {
        self.init(threads: threads, queueCapacity: queueCapacity, lookup: SocketAddress.resolve)
    }

    /// - Parameters:
    ///   - threads: resolver threads, started on first use and kept for the process's life.
    ///   - queueCapacity: lookups that may wait for a free thread; more fail with `.connectFailed`.
    ///   - lookup: the blocking lookup (tests substitute one).
    init(threads: Int, queueCapacity: Int, lookup: @escaping @Sendable (String, Int) -> Result<[SocketAddress], HTTP2Error>) {
        self.threadCount = max(1, threads)
        self.queueCapacity = max(0, queueCapacity)
        self.lookup = lookup
    }

    /// Lookups queued and not yet taken by a thread.
    var queuedCount: Int { state.withLock { $0.queue.count - $0.head } }

    /// Threads started so far (never more than `threadCount`).
    var startedThreads: Int { state.withLock { $0.threadsStarted } }

    /// Queues a lookup; `completion` runs on a resolver thread (or at once, on the caller's thread, with
    /// `.connectFailed` when the queue is full).
    func resolve(_ host: String, port: Int, _ completion: @escaping @Sendable (Result<[SocketAddress], HTTP2Error>) -> Void) {
        let startThread: Bool? = state.withLock { state in
            guard state.queue.count - state.head < queueCapacity else { return nil }
            state.queue.append(Job(host: host, port: port, completion: completion))
            guard state.threadsStarted < threadCount else { return false }
            state.threadsStarted += 1
            return true
        }
        guard let startThread else {
            completion(.failure(HTTP2Error(
                .connectFailed, "cannot resolve \(host): \(queueCapacity) lookups already wait for the resolver",
                isSafeToRetry: true)))
            return
        }
        if startThread {
            let thread = Thread { [self] in work() }
            thread.name = "pushizo-dns"
            thread.start()
        }
        available.signal()
    }

    private func work() {
        while true {
            available.wait()
            let job: Job? = state.withLock { state in
                guard state.head < state.queue.count else { return nil }
                let job = state.queue[state.head]
                state.head += 1
                if state.head > 64 && state.head * 2 > state.queue.count {
                    state.queue.removeFirst(state.head)
                    state.head = 0
                }
                return job
            }
            guard let job else { continue }
            job.completion(lookup(job.host, job.port))
        }
    }
}

extension SocketAddress {
    /// A socket address for `address` and `port`.
    init(_ address: IPAddress, port: Int) {
        self.init()
        if address.isIPv4 {
            var v4 = sockaddr_in()
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &v4.sin_addr) { $0.copyBytes(from: address.bytes) }
            withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: v4) { raw.copyMemory(from: $0) } }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        } else {
            var v6 = sockaddr_in6()
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &v6.sin6_addr) { $0.copyBytes(from: address.bytes) }
            withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: v6) { raw.copyMemory(from: $0) } }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
    }

    /// The IP address held, or nil for a family other than IPv4 / IPv6.
    var ipAddress: IPAddress? {
        switch family {
        case AF_INET:
            return withUnsafeBytes(of: storage) { raw in
                let v4 = raw.load(as: sockaddr_in.self)
                return withUnsafeBytes(of: v4.sin_addr) { IPAddress(bytes: Array($0)) }
            }
        case AF_INET6:
            return withUnsafeBytes(of: storage) { raw in
                let v6 = raw.load(as: sockaddr_in6.self)
                return withUnsafeBytes(of: v6.sin6_addr) { IPAddress(bytes: Array($0)) }
            }
        default:
            return nil
        }
    }
}

/// Every address of an answer checked against `policy`: the whole answer is refused when any address is (a
/// name answering with public and private addresses alike is refused, so which one is tried first never
/// matters), and the checked list is what the caller connects to: nothing is resolved again in between.
func checkResolved(_ host: String, _ addresses: [SocketAddress], policy: EgressPolicy) -> Result<[SocketAddress], HTTP2Error> {
    for address in addresses {
        guard let ip = address.ipAddress else {
            return .failure(HTTP2Error(.forbiddenAddress, "\(host) resolved to an address that is not IPv4 or IPv6"))
        }
        if let refusal = policy.refusal(for: ip) {
            return .failure(HTTP2Error(.forbiddenAddress, "\(host) resolves to \(refusal.message)"))
        }
    }
    return .success(addresses)
}

extension EgressPolicy {
    /// Resolves each of `hosts` now and checks every address of each answer as a connection would
    /// (``checkResolved``): for command-line checks (`pushizo-worker check`), which should report a host name that
    /// resolves to a forbidden address before the worker pauses its channel for it.
    ///
    /// The lookups run on `threads` threads of their own (not the worker's shared resolver, whose bounded queue
    /// would refuse most of a long list), and the call waits as long as answers keep coming: it gives up only when
    /// none arrived for `stallTimeout` (an unresponsive DNS server), so a slow but working one still judges every
    /// host. Blocking: call it on a thread of its own or a database thread, never on Swift's cooperative pool or
    /// an event loop. Lookups still running when it gives up finish on their threads and are dropped.
    /// - Returns: for each host, the addresses, every one allowed; `.failure` with
    ///   ``HTTP2Error/Code/forbiddenAddress`` when one is not (the whole answer is refused, as for a connection),
    ///   ``HTTP2Error/Code/connectFailed`` when the resolver answered without addresses, or
    ///   ``HTTP2Error/Code/connectTimeout`` when no answer came before the call gave up.
    public func resolveChecked(
        _ hosts: Set<HostAndPort>, stallTimeout: Duration, threads: Int = 8
    ) -> [HostAndPort: Result<[IPAddress], HTTP2Error>] {
        let all = Array(hosts)
        let state = Mutex<(next: Int, results: [HostAndPort: Result<[IPAddress], HTTP2Error>])>((0, [:]))
        let answered = DispatchSemaphore(value: 0)
        for _ in 0..<min(max(threads, 1), all.count) {
            let thread = Thread {
                while let host = state.withLock({ state -> HostAndPort? in
                    guard state.next < all.count else { return nil }
                    state.next += 1
                    return all[state.next - 1]
                }) {
                    let answer = SocketAddress.resolve(host.host, port: host.port)
                        .flatMap { checkResolved(host.host, $0, policy: self) }
                        .map { $0.compactMap(\.ipAddress) }
                    state.withLock { $0.results[host] = answer }
                    answered.signal()
                }
            }
            thread.name = "pushizo-check-dns"
            thread.start()
        }
        let stall = Double(stallTimeout.components.seconds) + Double(stallTimeout.components.attoseconds) / 1e18
        for _ in all.indices where answered.wait(timeout: .now() + stall) == .timedOut { break }
        return state.withLock { state in
            var results = state.results
            for host in hosts where results[host] == nil {
                results[host] = .failure(HTTP2Error(
                    .connectTimeout, "\(host.host): no answer from the resolver within \(stallTimeout)", isSafeToRetry: true))
            }
            return results
        }
    }
}

/// A host name or address literal and a TCP port, as looked up.
public struct HostAndPort: Hashable, Sendable {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}
