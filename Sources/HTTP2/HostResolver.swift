import Foundation
import Synchronization
internal import Glibc

/// Resolves host names with `getaddrinfo` on threads fed by a bounded queue, so a flood of lookups (thousands of
/// Web Push origins, a slow DNS server) never starts a thread per lookup, and shares the threads and the queue
/// fairly (``HostResolverLimits``): a lookup counts against its host's registrable domain and the tenant its caller
/// names, and starts only while both are under their share, so names of one domain or one tenant whose DNS never
/// answers cannot hold up the lookups of others. The decisions are ``HostResolverStateMachine``'s.
///
/// `getaddrinfo` cannot be cancelled: a lookup that outlives its caller's timeout keeps its thread until the C
/// library gives up (glibc: `options timeout:` × `attempts:` from resolv.conf) and stays counted against its
/// shares until then. A lookup still waiting when its caller gives up is dropped (``cancel(_:)``).
///
/// Clients share one resolver unless they choose another per origin (``HTTP2ClientConfiguration/resolver``): host
/// names that come from untrusted parties (Web Push endpoints, chosen by subscribers; endpoints an app overrides)
/// should go to one with ``HostResolverLimits/untrustedNames``, apart from the trusted names' resolver.
public final class HostResolver: Sendable {
    /// The process-wide resolver clients use by default, for trusted names: 4 threads, 256 queued lookups, no
    /// shares.
    public static let shared = HostResolver(limits: .unshared(threads: 4, queueCapacity: 256))

    /// A lookup handed to the resolver, for ``cancel(_:)`` and ``share(_:with:)``.
    struct Ticket: Hashable, Sendable {
        let id: HostResolverStateMachine.LookupID
    }

    private struct Job {
        var host: String
        var port: Int
        var completion: @Sendable (Result<[SocketAddress], HTTP2Error>) -> Void
    }

    private struct State {
        var machine: HostResolverStateMachine
        /// Every lookup waiting or running, by id.
        var jobs: [HostResolverStateMachine.LookupID: Job] = [:]
        var nextID: HostResolverStateMachine.LookupID = 1
    }

    /// The bounds this resolver keeps.
    public let limits: HostResolverLimits
    private let state: Mutex<State>
    /// One signal per admitted lookup no thread has taken yet.
    private let available = DispatchSemaphore(value: 0)
    private let lookup: @Sendable (String, Int) -> Result<[SocketAddress], HTTP2Error>

    /// A resolver of its own, using the C library's `getaddrinfo`.
    public convenience init(limits: HostResolverLimits) {
        self.init(limits: limits, lookup: SocketAddress.resolve)
    }

    /// A resolver of its own without shares: `threads` threads (at least 1, started on first use and kept for
    /// the process's life) and `queueCapacity` lookups waiting for one; more fail at once with `.connectFailed`.
    public convenience init(threads: Int, queueCapacity: Int) {
        self.init(limits: .unshared(threads: threads, queueCapacity: queueCapacity))
    }

    /// - Parameter lookup: the blocking lookup of a host and port (tests substitute one; it runs on the
    ///   resolver's threads).
    init(limits: HostResolverLimits, lookup: @escaping @Sendable (String, Int) -> Result<[SocketAddress], HTTP2Error>) {
        self.limits = limits
        self.state = Mutex(State(machine: HostResolverStateMachine(limits: limits)))
        self.lookup = lookup
    }

    /// Lookups waiting for a thread or for room in their shares.
    var queuedCount: Int { state.withLock { $0.machine.waitingCount } }

    /// Lookups admitted and not yet returned from `getaddrinfo` (stuck ones included).
    var runningCount: Int { state.withLock { $0.machine.runningCount } }

    /// Lookups running for `tenant`, and for names under `host`'s registrable domain.
    func running(tenant: String) -> Int { state.withLock { $0.machine.running(tenant: tenant) } }
    func running(domainOf host: String) -> Int {
        let domain = RegistrableDomain.key(of: host)
        return state.withLock { $0.machine.running(domain: domain) }
    }

    /// Threads started so far (never more than `limits.threads`).
    var startedThreads: Int { state.withLock { $0.machine.threads } }

    /// Hands over a lookup of `host` for `tenant` (nil: counted against the host's registrable domain only).
    /// `completion` runs once, on a resolver thread, unless the lookup is refused at once (then it runs on the
    /// caller's thread before this returns, with `.connectFailed` naming the full bound, safe to retry) or
    /// cancelled while it waits (then it never runs).
    /// - Returns: the lookup's ticket, for ``cancel(_:)`` and ``share(_:with:)``; nil when it was refused.
    @discardableResult
    func resolve(
        _ host: String, port: Int, tenant: String? = nil,
        _ completion: @escaping @Sendable (Result<[SocketAddress], HTTP2Error>) -> Void
    ) -> Ticket? {
        let domain = RegistrableDomain.key(of: host)
        let (id, submission) = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            let submission = state.machine.submit(id, domain: domain, tenant: tenant)
            if case .refused = submission { return (id, submission) }
            state.jobs[id] = Job(host: host, port: port, completion: completion)
            return (id, submission)
        }
        switch submission {
        case .refused(let refusal):
            completion(.failure(HTTP2Error(.connectFailed, "cannot resolve \(host): \(refusal)", isSafeToRetry: true)))
            return nil
        case .admitted(let action):
            perform([action])
        case .queued:
            break
        }
        return Ticket(id: id)
    }

    /// Drops a lookup that still waits (its completion never runs); one already running goes on, counted.
    func cancel(_ ticket: Ticket) {
        state.withLock { state in
            if state.machine.cancel(ticket.id) { state.jobs[ticket.id] = nil }
        }
    }

    /// Another tenant wants the answer of a waiting lookup: it may start on that tenant's share
    /// (``HostResolverStateMachine/share(_:with:)``).
    func share(_ ticket: Ticket, with tenant: String) {
        let action = state.withLock { $0.machine.share(ticket.id, with: tenant) }
        if let action { perform([action]) }
    }

    private func perform(_ actions: [HostResolverStateMachine.Action]) {
        for action in actions {
            if action == .startThread {
                let thread = Thread { [self] in
                    // Set on the thread itself: Linux names a thread (top -H, perf) only from inside it.
                    Thread.current.name = "pushizo-dns"
                    work()
                }
                thread.start()
            }
            available.signal()
        }
    }

    private func work() {
        while true {
            available.wait()
            // One signal per admitted lookup, so one is ready; its job is there unless something went wrong, and
            // even then the lookup is reported finished so it stops counting against its shares.
            guard let (id, job) = state.withLock({ state in state.machine.takeNext().map { ($0, state.jobs[$0]) } })
            else { continue }
            let result = job.map { lookup($0.host, $0.port) }
            let next = state.withLock { state in
                state.jobs[id] = nil
                return state.machine.finished(id)
            }
            perform(next)
            if let job, let result { job.completion(result) }
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
        let stall = DispatchTimeInterval.milliseconds(Int(stallTimeout / .milliseconds(1)))
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
