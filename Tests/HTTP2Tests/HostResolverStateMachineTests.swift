import Testing
@testable import HTTP2

/// The resolver's admission decisions as a value, without threads: shares per registrable domain and per tenant,
/// threads that grow to a bound, refusals with their bound, lookups stuck in `getaddrinfo` counted until they
/// return, and lookups several tenants want.
@Suite("Host resolver admission")
struct HostResolverStateMachineTests {
    typealias Machine = HostResolverStateMachine

    static let limits = HostResolverLimits(
        threads: 6, queueCapacity: 10, runningPerDomain: 2, runningPerTenant: 3, waitingPerDomain: 4,
        waitingPerTenant: 6)

    /// Names under one registrable domain whose DNS never answers hold two threads; the rest of that domain
    /// waits up to its waiting share and is refused beyond it, naming the domain; another domain's lookup, of the
    /// same tenant or another, starts at once on a thread of its own.
    @Test func aDomainHoldsAtMostItsRunningShare() {
        let machine = AdmissionDriver(limits: Self.limits)
        #expect(machine.submit(1, domain: "example.org", tenant: "a") == .admitted(.startThread))
        #expect(machine.submit(2, domain: "example.org", tenant: "a") == .admitted(.startThread))
        for id in 3...6 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "example.org", tenant: "b") == .queued)
        }
        let refused = machine.submit(7, domain: "example.org", tenant: "c")
        #expect(refused == .refused(Machine.Refusal(bound: .domain("example.org"), limit: 4)))
        if case .refused(let refusal) = refused {
            #expect(refusal.description == "4 lookups of names under example.org already wait for the resolver")
        }
        #expect(machine.submit(8, domain: "push.example", tenant: "a") == .admitted(.startThread))
        #expect(machine.submit(9, domain: "push.example", tenant: "d") == .admitted(.startThread))
        #expect(machine.drain() == [1, 2, 8, 9])
        #expect(machine.running(domain: "example.org") == 2)
        #expect(machine.threads == 4)
        #expect(machine.waitingCount == 4)
    }

    /// One tenant's names under many domains hold at most its running share; more of its lookups wait up to its
    /// waiting share and are then refused; another tenant's lookup starts at once.
    @Test func aTenantHoldsAtMostItsRunningShare() {
        let machine = AdmissionDriver(limits: Self.limits)
        for id in 1...3 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "d\(id).example", tenant: "a") == .admitted(.startThread))
        }
        for id in 4...9 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "d\(id).example", tenant: "a") == .queued)
        }
        #expect(machine.submit(10, domain: "d10.example", tenant: "a")
            == .refused(Machine.Refusal(bound: .tenant, limit: 6)))
        #expect(machine.submit(11, domain: "d11.example", tenant: "b") == .admitted(.startThread))
        #expect(machine.running(tenant: "a") == 3)
        #expect(machine.drain() == [1, 2, 3, 11])
    }

    /// `getaddrinfo` cannot be cancelled: a running lookup whose caller gave up stays counted against its shares
    /// until its thread reports it finished; then a waiting lookup with room starts on that thread.
    @Test func aStuckLookupStaysCountedUntilItReturns() {
        let machine = AdmissionDriver(limits: Self.limits)
        _ = machine.submit(1, domain: "example.org", tenant: "a")
        _ = machine.submit(2, domain: "example.org", tenant: "a")
        _ = machine.submit(3, domain: "example.org", tenant: "a")
        _ = machine.drain()
        #expect(machine.cancel(1) == false)
        #expect(machine.running(domain: "example.org") == 2)
        #expect(machine.submit(4, domain: "example.org", tenant: "b") == .queued)
        #expect(machine.finished(1) == [.wakeThread])
        // Tenant b has nothing running, a one: b's goes first.
        #expect(machine.drain() == [4])
        #expect(machine.running(domain: "example.org") == 2)
        #expect(machine.waitingCount == 1)
        // A second report of the same lookup changes nothing.
        #expect(machine.finished(1) == [])
        #expect(machine.running(domain: "example.org") == 2)
    }

    /// Threads are started only while every started one is busy, never beyond the bound; then lookups wait for a
    /// thread whatever their shares, and a finished lookup's thread takes the next one.
    @Test func threadsGrowToTheirBoundAndAreReused() {
        let limits = HostResolverLimits(
            threads: 3, queueCapacity: 10, runningPerDomain: 3, runningPerTenant: 3, waitingPerDomain: 10,
            waitingPerTenant: 10)
        let machine = AdmissionDriver(limits: limits)
        for id in 1...3 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "d\(id).example", tenant: "t\(id)") == .admitted(.startThread))
        }
        #expect(machine.submit(4, domain: "d4.example", tenant: "t4") == .queued)
        #expect(machine.threads == 3)
        #expect(machine.drain() == [1, 2, 3])
        #expect(machine.finished(2) == [.wakeThread])
        #expect(machine.drain() == [4])
        #expect(machine.finished(4) == [])
        // A thread is idle now: the next lookup wakes it instead of starting a fourth.
        #expect(machine.submit(5, domain: "d5.example", tenant: "t5") == .admitted(.wakeThread))
        #expect(machine.threads == 3)
    }

    /// When a share frees, a waiting lookup that fits starts, passing over older ones whose shares are still full:
    /// of those that fit, the one whose tenant has the fewest lookups running, and of equals the oldest, so a
    /// lookup submitted later never overtakes one that waits with the same keys.
    @Test func waitingLookupsStartLeastServedTenantFirstThenOldest() {
        let machine = AdmissionDriver(limits: Self.limits)
        _ = machine.submit(1, domain: "slow.example", tenant: "a")
        _ = machine.submit(2, domain: "slow.example", tenant: "a")
        _ = machine.submit(3, domain: "busy.example", tenant: "b")
        _ = machine.submit(4, domain: "busy.example", tenant: "b")
        #expect(machine.submit(5, domain: "slow.example", tenant: "c") == .queued)
        #expect(machine.submit(6, domain: "busy.example", tenant: "c") == .queued)
        #expect(machine.submit(7, domain: "busy.example", tenant: "d") == .queued)
        _ = machine.drain()
        #expect(machine.finished(3) == [.wakeThread])
        #expect(machine.drain() == [6])
        #expect(machine.finished(4) == [.wakeThread])
        #expect(machine.drain() == [7])
        #expect(machine.submit(8, domain: "slow.example", tenant: "e") == .queued)
        // Tenant c has 6 running, tenant e nothing: e's lookup goes first although c's waited longer.
        #expect(machine.finished(1) == [.wakeThread])
        #expect(machine.drain() == [8])
        #expect(machine.finished(2) == [.wakeThread])
        #expect(machine.drain() == [5])
    }

    /// Every thread held by tenants whose names never answer: when one of their lookups returns, the freed thread
    /// goes to a tenant with nothing running before those tenants' own waiting lookups, older as they are.
    @Test func aFreedThreadGoesToTheLeastServedTenant() {
        let limits = HostResolverLimits(
            threads: 4, queueCapacity: 16, runningPerDomain: 2, runningPerTenant: 2, waitingPerDomain: 16,
            waitingPerTenant: 16)
        let machine = AdmissionDriver(limits: limits)
        for id in 1...4 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "d\(id).example", tenant: id <= 2 ? "a" : "b") == .admitted(.startThread))
        }
        for id in 5...8 as ClosedRange<Machine.LookupID> {
            #expect(machine.submit(id, domain: "d\(id).example", tenant: id <= 6 ? "a" : "b") == .queued)
        }
        #expect(machine.submit(9, domain: "push.example", tenant: "c") == .queued)
        _ = machine.drain()
        #expect(machine.finished(1) == [.wakeThread])
        #expect(machine.drain() == [9])
        // Now a and b have one lookup running each: the older waiting one goes first.
        #expect(machine.finished(3) == [.wakeThread])
        #expect(machine.drain() == [5])
    }

    /// A caller that gives up on a waiting lookup drops it: it never starts, and its place in the domain's and
    /// the tenant's waiting shares is free again.
    @Test func aCancelledWaitingLookupNeverStarts() {
        let machine = AdmissionDriver(limits: Self.limits)
        _ = machine.submit(1, domain: "example.org", tenant: "a")
        _ = machine.submit(2, domain: "example.org", tenant: "a")
        for id in 3...6 as ClosedRange<Machine.LookupID> { _ = machine.submit(id, domain: "example.org", tenant: "a") }
        #expect(machine.submit(7, domain: "example.org", tenant: "a") != .queued)
        #expect(machine.cancel(3))
        #expect(machine.cancel(3) == false)
        #expect(machine.submit(7, domain: "example.org", tenant: "a") == .queued)
        _ = machine.drain()
        _ = machine.finished(1)
        #expect(machine.drain() == [4])
    }

    /// A lookup other tenants also wait for (one connection to a push service many apps use) may start on any of
    /// their shares: one tenant at its share does not hold it up for the others.
    @Test func aLookupAnotherTenantWantsStartsOnThatTenantsShare() {
        let machine = AdmissionDriver(limits: Self.limits)
        for id in 1...3 as ClosedRange<Machine.LookupID> { _ = machine.submit(id, domain: "d\(id).example", tenant: "a") }
        #expect(machine.submit(4, domain: "push.example", tenant: "a") == .queued)
        #expect(machine.share(4, with: "a") == nil)
        #expect(machine.share(4, with: "b") == .startThread)
        #expect(machine.running(tenant: "b") == 1)
        #expect(machine.running(tenant: "a") == 3)
        #expect(machine.waitingCount == 0)
        #expect(machine.share(4, with: "c") == nil)
        #expect(machine.drain() == [1, 2, 3, 4])
        #expect(machine.finished(4) == [])
        #expect(machine.running(tenant: "b") == 0)
    }

    /// A lookup without a tenant counts against its domain's share only.
    @Test func aLookupWithoutATenantCountsAgainstItsDomainOnly() {
        let machine = AdmissionDriver(limits: Self.limits)
        for id in 1...3 as ClosedRange<Machine.LookupID> { _ = machine.submit(id, domain: "d\(id).example", tenant: "a") }
        #expect(machine.submit(4, domain: "d4.example", tenant: nil) == .admitted(.startThread))
        #expect(machine.submit(5, domain: "d4.example", tenant: nil) == .admitted(.startThread))
        #expect(machine.submit(6, domain: "d4.example", tenant: nil) == .queued)
    }

    /// Without shares the resolver is first come, first served: one domain may take every thread and the whole
    /// queue, and the next lookup is refused naming the queue.
    @Test func unsharedLimitsServeInArrivalOrder() {
        let machine = AdmissionDriver(limits: .unshared(threads: 2, queueCapacity: 3))
        #expect(machine.submit(1, domain: "example.org", tenant: "a") == .admitted(.startThread))
        #expect(machine.submit(2, domain: "example.org", tenant: "a") == .admitted(.startThread))
        for id in 3...5 as ClosedRange<Machine.LookupID> { #expect(machine.submit(id, domain: "example.org", tenant: "a") == .queued) }
        let refused = machine.submit(6, domain: "other.example", tenant: "b")
        #expect(refused == .refused(Machine.Refusal(bound: .queue, limit: 3)))
        if case .refused(let refusal) = refused {
            #expect(refusal.description == "3 lookups already wait for the resolver")
        }
        _ = machine.drain()
        _ = machine.finished(2)
        #expect(machine.drain() == [3])
    }

    /// Limits are sanitized: at least one thread, and no share larger than what it is a share of.
    @Test func limitsAreSanitized() {
        let limits = HostResolverLimits(
            threads: 0, queueCapacity: -1, runningPerDomain: 5, runningPerTenant: 0, waitingPerDomain: 9,
            waitingPerTenant: -3)
        #expect(limits.threads == 1)
        #expect(limits.queueCapacity == 0)
        #expect(limits.runningPerDomain == 1)
        #expect(limits.runningPerTenant == 1)
        #expect(limits.waitingPerDomain == 0)
        #expect(limits.waitingPerTenant == 0)
    }

    /// Random submissions, finishes and cancellations over a few domains and tenants: after every event the
    /// shares, the thread bound and the queue bounds hold, every lookup is either refused, waiting, running or
    /// done, and no waiting lookup could start (its domain, its tenant or the threads are at their limit).
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func invariantsHoldUnderRandomEvents(seed: UInt64) {
        var generator = SplitMix64(seed: seed)
        let limits = HostResolverLimits(
            threads: 5, queueCapacity: 8, runningPerDomain: 2, runningPerTenant: 3, waitingPerDomain: 4,
            waitingPerTenant: 5)
        let machine = AdmissionDriver(limits: limits)
        let domains = ["a.example", "b.example", "c.example", "d.example"]
        let tenants: [String?] = ["t1", "t2", "t3", nil]
        var keys: [Machine.LookupID: (domain: String, tenant: String?)] = [:]
        var waiting: [Machine.LookupID] = []
        var running: Set<Machine.LookupID> = []
        var nextID: Machine.LookupID = 1
        for _ in 0..<2_000 {
            switch generator.next() % 3 {
            case 0:
                let id = nextID
                nextID += 1
                let key = (domains.randomElement(using: &generator)!, tenants.randomElement(using: &generator)!)
                keys[id] = key
                switch machine.submit(id, domain: key.0, tenant: key.1) {
                case .admitted: break
                case .queued: waiting.append(id)
                case .refused(let refusal):
                    switch refusal.bound {
                    case .queue: #expect(waiting.count == limits.queueCapacity)
                    case .domain(let domain):
                        #expect(waiting.count { keys[$0]!.domain == domain } == limits.waitingPerDomain)
                    case .tenant: #expect(waiting.count { keys[$0]!.tenant == key.1 } == limits.waitingPerTenant)
                    }
                }
            case 1:
                guard let id = running.randomElement(using: &generator) else { continue }
                running.remove(id)
                _ = machine.finished(id)
            default:
                guard let id = waiting.randomElement(using: &generator) else { continue }
                #expect(machine.cancel(id))
                waiting.removeAll { $0 == id }
            }
            for id in machine.drain() {
                waiting.removeAll { $0 == id }
                running.insert(id)
            }
            #expect(machine.runningCount == running.count)
            #expect(machine.waitingCount == waiting.count)
            #expect(running.count <= limits.threads)
            #expect(machine.threads <= limits.threads && machine.threads >= running.count)
            for domain in domains {
                let count = running.count { keys[$0]!.domain == domain }
                #expect(count <= limits.runningPerDomain)
                #expect(machine.running(domain: domain) == count)
            }
            for case let tenant? in tenants {
                let count = running.count { keys[$0]!.tenant == tenant }
                #expect(count <= limits.runningPerTenant)
                #expect(machine.running(tenant: tenant) == count)
            }
            for id in waiting {
                let (domain, tenant) = keys[id]!
                let blocked = running.count == limits.threads
                    || machine.running(domain: domain) == limits.runningPerDomain
                    || tenant.map { machine.running(tenant: $0) == limits.runningPerTenant } ?? false
                #expect(blocked, "lookup \(id) waits although it could start")
            }
        }
    }
}

extension SplitMix64: RandomNumberGenerator {}

/// The machine behind a reference, so its mutating calls read as plain expressions inside `#expect`.
final class AdmissionDriver {
    typealias Machine = HostResolverStateMachine
    private var machine: Machine

    init(limits: HostResolverLimits) { machine = Machine(limits: limits) }

    func submit(_ id: Machine.LookupID, domain: String, tenant: String?) -> Machine.Submission {
        machine.submit(id, domain: domain, tenant: tenant)
    }
    func finished(_ id: Machine.LookupID) -> [Machine.Action] { machine.finished(id) }
    func cancel(_ id: Machine.LookupID) -> Bool { machine.cancel(id) }
    func share(_ id: Machine.LookupID, with tenant: String) -> Machine.Action? { machine.share(id, with: tenant) }
    func running(domain: String) -> Int { machine.running(domain: domain) }
    func running(tenant: String) -> Int { machine.running(tenant: tenant) }
    var threads: Int { machine.threads }
    var waitingCount: Int { machine.waitingCount }
    var runningCount: Int { machine.runningCount }

    /// Ids handed to threads, in the order they take them.
    func drain() -> [Machine.LookupID] {
        var taken: [Machine.LookupID] = []
        while let id = machine.takeNext() { taken.append(id) }
        return taken
    }
}
