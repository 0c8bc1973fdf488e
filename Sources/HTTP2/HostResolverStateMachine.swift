/// A ``HostResolver``'s decisions, as a value without threads (in the manner of postgres-nio's state machines):
/// which lookup starts and whether it needs a new thread, which waits, which is refused at once. The resolver
/// feeds it events (a lookup submitted, a thread taking work, a lookup finished, a waiting one cancelled, another
/// tenant wanting a waiting one) under its lock and carries out the ``Action``s it returns.
///
/// Shares (``HostResolverLimits``): a lookup runs only while its registrable domain and its tenant are under their
/// running shares and a thread is free or may be started; until then it waits, unless the queue, its domain's
/// waiting share or its tenant's is full, and then it is refused. A running lookup stays counted until its thread
/// reports it finished, however long `getaddrinfo` takes, so threads held by names that never answer are counted
/// against those names' shares. Whenever a lookup finishes, the waiting lookups whose shares now have room start,
/// those of the tenant with the fewest lookups running first (then of the domain with the fewest, then the
/// oldest): when every thread is held, a tenant with nothing running gets the next free thread ahead of tenants
/// whose names hold the others. A waiting lookup is never passed over by a later one with the same keys.
///
/// After every event no waiting lookup could start (its domain, every one of its tenants, or the threads are at
/// their limit): so a newly submitted lookup that can start never overtakes one that waits.
struct HostResolverStateMachine {
    typealias LookupID = UInt64

    /// What to do for a lookup that may start now.
    enum Action: Equatable {
        /// Wake one waiting thread: it takes the lookup with ``takeNext()``.
        case wakeThread
        /// Start one more thread (every started thread is busy), which takes the lookup with ``takeNext()``.
        case startThread
    }

    /// What became of a submitted lookup.
    enum Submission: Equatable {
        case admitted(Action)
        /// Waits for room; ``finished(_:)`` or ``share(_:with:)`` admits it later, ``cancel(_:)`` drops it.
        case queued
        case refused(Refusal)
    }

    /// Why a lookup was refused at once: which waiting bound was full.
    struct Refusal: Equatable, CustomStringConvertible {
        enum Bound: Equatable {
            case queue
            case domain(String)
            case tenant
        }

        var bound: Bound
        /// The bound's value: lookups already waiting.
        var limit: Int

        var description: String {
            switch bound {
            case .queue: "\(limit) lookups already wait for the resolver"
            case .domain(let domain): "\(limit) lookups of names under \(domain) already wait for the resolver"
            case .tenant: "\(limit) lookups of the same tenant already wait for the resolver"
            }
        }
    }

    /// Tenants besides the submitter that a waiting lookup remembers (``share(_:with:)``); later ones are ignored.
    static let maximumSharers = 16

    private struct Waiting {
        var id: LookupID
        var domain: String
        /// The submitter's tenant, counted against its waiting share; nil: the domain's shares only.
        var tenant: String?
        /// Other tenants that want the same answer: the lookup may start on any one's running share.
        var sharers: [String] = []
    }

    private struct Running {
        var domain: String
        /// The tenant whose running share it counts against (nil: none).
        var tenant: String?
    }

    let limits: HostResolverLimits
    private var waiting: [Waiting] = []
    private var running: [LookupID: Running] = [:]
    /// Admitted lookups no thread has taken yet, oldest first (from `readyHead`).
    private var ready: [LookupID] = []
    private var readyHead = 0
    private var runningPerDomain: [String: Int] = [:]
    private var runningPerTenant: [String: Int] = [:]
    private var waitingPerDomain: [String: Int] = [:]
    private var waitingPerTenant: [String: Int] = [:]
    /// Threads started so far (never more than `limits.threads`, never fewer than lookups running).
    private(set) var threads = 0

    init(limits: HostResolverLimits) {
        self.limits = limits
    }

    /// Lookups waiting for room.
    var waitingCount: Int { waiting.count }
    /// Lookups admitted and not yet finished (taken by a thread or about to be), stuck ones included.
    var runningCount: Int { running.count }
    /// Lookups running for names under `domain` (a ``RegistrableDomain`` key).
    func running(domain: String) -> Int { runningPerDomain[domain] ?? 0 }
    /// Lookups running for `tenant`.
    func running(tenant: String) -> Int { runningPerTenant[tenant] ?? 0 }

    /// A new lookup for a name under `domain`, for `tenant` (nil: counted against the domain only).
    mutating func submit(_ id: LookupID, domain: String, tenant: String?) -> Submission {
        if let charged = admissibleTenant(domain: domain, tenant: tenant, sharers: []) {
            return .admitted(admit(id, domain: domain, tenant: charged))
        }
        if waiting.count >= limits.queueCapacity {
            return .refused(Refusal(bound: .queue, limit: limits.queueCapacity))
        }
        if waitingPerDomain[domain, default: 0] >= limits.waitingPerDomain {
            return .refused(Refusal(bound: .domain(domain), limit: limits.waitingPerDomain))
        }
        if let tenant, waitingPerTenant[tenant, default: 0] >= limits.waitingPerTenant {
            return .refused(Refusal(bound: .tenant, limit: limits.waitingPerTenant))
        }
        waiting.append(Waiting(id: id, domain: domain, tenant: tenant))
        waitingPerDomain[domain, default: 0] += 1
        if let tenant { waitingPerTenant[tenant, default: 0] += 1 }
        return .queued
    }

    /// A thread looks for work: the oldest admitted lookup no thread has taken yet, or nil (another thread took
    /// it; the caller waits again).
    mutating func takeNext() -> LookupID? {
        guard readyHead < ready.count else { return nil }
        let id = ready[readyHead]
        readyHead += 1
        if readyHead == ready.count {
            ready.removeAll(keepingCapacity: true)
            readyHead = 0
        }
        return id
    }

    /// The lookup's `getaddrinfo` returned: its shares have room again, and waiting lookups that fit start (the
    /// least served tenant's first, see the type's notes). Returns one action per lookup admitted (the finishing
    /// thread is free, so the first needs none started).
    mutating func finished(_ id: LookupID) -> [Action] {
        guard let done = running.removeValue(forKey: id) else { return [] }
        decrement(&runningPerDomain, done.domain)
        if let tenant = done.tenant { decrement(&runningPerTenant, tenant) }
        var actions: [Action] = []
        while running.count < limits.threads, let (index, charged) = nextAdmissible() {
            let entry = waiting.remove(at: index)
            forgetWaiting(entry)
            actions.append(admit(entry.id, domain: entry.domain, tenant: charged))
        }
        return actions
    }

    /// The waiting lookup to start next, and the tenant it would count against: among those with room, the one
    /// whose tenant has the fewest lookups running, then whose domain has, then the oldest; nil when none may
    /// start.
    private func nextAdmissible() -> (index: Int, tenant: String?)? {
        var best: (index: Int, tenant: String?)?
        var bestRank = (Int.max, Int.max)
        for (index, entry) in waiting.enumerated() {
            guard let charged = admissibleTenant(domain: entry.domain, tenant: entry.tenant, sharers: entry.sharers)
            else { continue }
            let rank = (charged.map { runningPerTenant[$0, default: 0] } ?? 0, runningPerDomain[entry.domain, default: 0])
            // Strictly less: of equal ranks the oldest (first) stays.
            if rank < bestRank { (best, bestRank) = ((index, charged), rank) }
            if rank == (0, 0) { break }
        }
        return best
    }

    /// The caller gave up on a lookup (its deadline passed): dropped if it still waits (true); one already
    /// admitted runs to its end and stays counted (false).
    mutating func cancel(_ id: LookupID) -> Bool {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else { return false }
        forgetWaiting(waiting.remove(at: index))
        return true
    }

    /// Another tenant wants the answer of a waiting lookup (a connection several tenants' requests wait for): the
    /// lookup may now start on that tenant's running share, so one tenant at its share cannot hold up a lookup
    /// others need. Returns the action when it starts now; nil when it still waits, is not waiting, or already
    /// remembers ``maximumSharers`` tenants.
    mutating func share(_ id: LookupID, with tenant: String) -> Action? {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else { return nil }
        var entry = waiting[index]
        guard entry.tenant != nil, entry.tenant != tenant, !entry.sharers.contains(tenant),
            entry.sharers.count < Self.maximumSharers
        else { return nil }
        entry.sharers.append(tenant)
        guard let charged = admissibleTenant(domain: entry.domain, tenant: entry.tenant, sharers: entry.sharers) else {
            waiting[index] = entry
            return nil
        }
        waiting.remove(at: index)
        forgetWaiting(entry)
        return admit(entry.id, domain: entry.domain, tenant: charged)
    }

    // MARK: Shares

    /// Whether a lookup may start now, and on which tenant's share: `.some(nil)` for one without a tenant,
    /// `.some(t)` for the first of its tenants with room, nil when it must wait.
    private func admissibleTenant(domain: String, tenant: String?, sharers: [String]) -> String?? {
        guard running.count < limits.threads, runningPerDomain[domain, default: 0] < limits.runningPerDomain else {
            return nil
        }
        guard let tenant else { return .some(nil) }
        if runningPerTenant[tenant, default: 0] < limits.runningPerTenant { return .some(tenant) }
        for sharer in sharers where runningPerTenant[sharer, default: 0] < limits.runningPerTenant {
            return .some(sharer)
        }
        return nil
    }

    private mutating func admit(_ id: LookupID, domain: String, tenant: String?) -> Action {
        running[id] = Running(domain: domain, tenant: tenant)
        runningPerDomain[domain, default: 0] += 1
        if let tenant { runningPerTenant[tenant, default: 0] += 1 }
        ready.append(id)
        guard threads < running.count else { return .wakeThread }
        threads += 1
        return .startThread
    }

    private mutating func forgetWaiting(_ entry: Waiting) {
        decrement(&waitingPerDomain, entry.domain)
        if let tenant = entry.tenant { decrement(&waitingPerTenant, tenant) }
    }

    /// Counts are dropped at zero, so the dictionaries hold only keys with lookups running or waiting.
    private func decrement(_ counts: inout [String: Int], _ key: String) {
        guard let count = counts[key] else { return }
        counts[key] = count > 1 ? count - 1 : nil
    }
}
