/// The requests waiting for a stream at one origin (part of `PoolStateMachine`, a value without I/O): one FIFO
/// queue per tenant (``HTTP2Tenant``), the tenants served in turn, and the streams each tenant holds at the origin.
///
/// - Turns: tenants with waiting requests form a ring; each stream handed out goes to the tenant at its front,
///   which then moves to the back. A tenant that starts waiting joins at the back, so its request gets a stream
///   after every tenant waiting before it got one, however many requests those have queued. Within a tenant the
///   order is arrival order, except that a request the peer did not process goes back to the front of its
///   tenant's queue.
/// - Shares: while the origin is shared (two tenants or more with streams or waiting requests), each tenant's
///   streams are counted, and a dispatch (``startTurns(capacity:originStreams:)``) computes the fair share,
///   `capacity / tenants` (at least 1; `capacity`: the streams the origin's connections may carry now, at most
///   `maximumInFlightPerOrigin`). A tenant at or above its share is passed over while a waiting tenant below its
///   share is left; when every waiting tenant is at or above it, each stream goes to the tenant at the ring's
///   front regardless of shares, so no stream stays unused for the bound's sake. A tenant whose answers are slow
///   keeps only the streams it has: each one that ends goes to the others until they hold their share.
/// - One tenant (the common case) costs what one FIFO queue costs: its queue is slot 0, no tenant is hashed to
///   find it, and its streams are not counted (they are all of the origin's); the owner asks for the origin's
///   streams only when a second tenant arrives. ``isShared`` tells the owner when the tenant of each stream that
///   ends must be reported (``streamClosed(tenant:)``).
/// - Bounds: a tenant is forgotten as soon as it has neither waiting requests nor streams (the last one stays,
///   as the slot of the next requests); entries answered while queued (timeout, cancellation) are skipped, and
///   dropped at once when at least 32 and as many as the waiting ones, or when their tenant has nothing else
///   waiting. Stored entries stay below `max(2 × waiting, waiting + 32)`.
struct TenantQueues {
    typealias RequestID = UInt64
    typealias Instant = ContinuousClock.Instant

    /// A request waiting for a stream, and since when.
    private struct Waiting {
        var id: RequestID
        var since: Instant
    }

    /// One tenant's waiting requests in order (`entries[head...]`) and the streams it holds at the origin.
    private struct Queue {
        var tenant: HTTP2Tenant?
        var entries: [Waiting] = []
        var head = 0
        /// Entries of `entries[head...]` whose caller was already answered (in `TenantQueues.answered`).
        var answered = 0
        /// Streams of its requests open at the origin; counted only while the origin is shared.
        var streams = 0

        var waiting: Int { entries.count - head - answered }
        var stored: Int { entries.count - head }

        /// The next entry not answered; answered ones on the way are skipped and forgotten.
        mutating func pop(skipping answeredIDs: inout Set<RequestID>) -> RequestID? {
            while head < entries.count {
                let id = entries[head].id
                head += 1
                if answered > 0, answeredIDs.remove(id) != nil {
                    answered -= 1
                    continue
                }
                compact()
                return id
            }
            compact()
            return nil
        }

        mutating func pushFront(_ entry: Waiting) {
            if head > 0 {
                head -= 1
                entries[head] = entry
            } else {
                entries.insert(entry, at: 0)
            }
        }

        /// Drops consumed entries: all of them once the queue is empty (keeping the array's room for the next
        /// ones), else once they are many and more than half of it.
        mutating func compact() {
            if head == entries.count {
                entries.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 64 && head * 2 > entries.count {
                entries.removeFirst(head)
                head = 0
            }
        }
    }

    /// The ring of tenants (slots) with waiting requests, front first.
    private struct Turns {
        var slots: [Int] = []
        var head = 0

        var count: Int { slots.count - head }
        var first: Int? { head < slots.count ? slots[head] : nil }
        var all: ArraySlice<Int> { slots[head...] }

        mutating func append(_ slot: Int) { slots.append(slot) }

        mutating func removeFirst() {
            head += 1
            compact()
        }

        /// The front tenant goes to the back.
        mutating func rotate() {
            slots.append(slots[head])
            head += 1
            compact()
        }

        mutating func remove(_ slot: Int) {
            if let index = slots[head...].firstIndex(of: slot) { slots.remove(at: index) }
        }

        private mutating func compact() {
            if head == slots.count {
                slots.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 32 && head * 2 >= slots.count {
                slots.removeFirst(head)
                head = 0
            }
        }
    }

    /// Tenants' queues by slot. Alone, a tenant is slot 0 and `slots` is empty; shared, `slots` names every
    /// tenant's slot and the ones in `freeSlots` hold nothing.
    private var queues: [Queue] = []
    private var slots: [HTTP2Tenant?: Int] = [:]
    private var freeSlots: [Int] = []
    private var turns = Turns()
    /// Queued requests whose caller was already answered: skipped when reached, dropped in bulk.
    private var answered: Set<RequestID> = []
    /// Requests waiting, answered ones not counted.
    private(set) var waiting = 0
    /// Streams counted over every tenant (shared only).
    private var streams = 0
    /// This dispatch's fair share and how many tenants in `turns` hold less (``startTurns(capacity:originStreams:)``).
    private var share = Int.max
    private var belowShare = 0

    /// Two tenants or more have streams or waiting requests: each tenant's streams are counted, and the owner
    /// reports the tenant of every stream that ends.
    var isShared: Bool { !slots.isEmpty }
    /// Tenants remembered (with streams or waiting requests, or the last one).
    var tenantCount: Int { isShared ? slots.count : queues.count }
    /// Entries stored, answered ones included.
    var stored: Int { waiting + answered.count }

    /// The tenants with waiting requests, at most `limit`, in the order their turns come.
    func waitingTenants(limit: Int) -> [HTTP2Tenant?] {
        turns.all.lazy.filter { queues[$0].waiting > 0 }.prefix(max(0, limit)).map { queues[$0].tenant }
    }

    // MARK: Arrivals

    /// Queues `id` at the back of `tenant`'s queue. `originStreams`: the streams open at the origin, asked for only
    /// when a second tenant arrives (they are all the first one's).
    mutating func append(_ id: RequestID, tenant: HTTP2Tenant?, since: Instant, originStreams: () -> Int) {
        let slot = slot(for: tenant, originStreams: originStreams)
        if queues[slot].waiting == 0 { turns.append(slot) }
        queues[slot].entries.append(Waiting(id: id, since: since))
        waiting += 1
    }

    /// Queues several requests of `tenant` in order at the back of its queue: one lookup for all of them.
    mutating func append(contentsOf ids: ArraySlice<RequestID>, tenant: HTTP2Tenant?, since: Instant,
                         originStreams: () -> Int) {
        guard !ids.isEmpty else { return }
        let slot = slot(for: tenant, originStreams: originStreams)
        if queues[slot].waiting == 0 { turns.append(slot) }
        queues[slot].entries.append(contentsOf: ids.lazy.map { Waiting(id: $0, since: since) })
        waiting += ids.count
    }

    /// Puts `id` back at the front of `tenant`'s queue (the peer did not process it). A tenant that had nothing
    /// else waiting joins the turns at the back: it just had one.
    mutating func requeue(_ id: RequestID, tenant: HTTP2Tenant?, since: Instant, originStreams: () -> Int) {
        let slot = slot(for: tenant, originStreams: originStreams)
        if queues[slot].waiting == 0 { turns.append(slot) }
        queues[slot].pushFront(Waiting(id: id, since: since))
        waiting += 1
    }

    /// The caller of queued request `id` was answered (timeout, cancellation): it is skipped when reached. Once
    /// such entries are at least 32 and as many as the waiting ones, they are dropped at once.
    mutating func answered(_ id: RequestID, tenant: HTTP2Tenant?) {
        guard let slot = existingSlot(of: tenant), queues[slot].waiting > 0, answered.insert(id).inserted else { return }
        queues[slot].answered += 1
        waiting -= 1
        if queues[slot].waiting == 0 {
            turns.remove(slot)
            settle(slot)
        }
        if answered.count >= 32, answered.count >= waiting { dropAnswered() }
    }

    // MARK: Turns

    /// Starts a dispatch: computes the fair share of `capacity` streams (the origin's connections' room now, at
    /// most its in-flight cap) between the tenants, and which waiting tenants hold less. `originStreams`: the
    /// streams open at the origin; when none is open every tenant's count is zero, whatever was reported.
    mutating func startTurns(capacity: Int, originStreams: Int) {
        guard isShared else { return }
        if originStreams == 0 && streams != 0 {
            // Every stream ended: a count left above zero was never reported (a caller that did not name the
            // tenants of a closed connection's streams). It would keep the tenant, and its share, forever.
            streams = 0
            for slot in slots.values { queues[slot].streams = 0 }
            forgetIdleTenants()
            guard isShared else { return }
        }
        share = max(1, capacity / slots.count)
        belowShare = turns.all.count { queues[$0].streams < share }
    }

    /// The request that gets the next stream, and its tenant: the front tenant's oldest, passing over tenants at
    /// or above their share while a waiting tenant below it is left (see the type's notes). Counts the stream.
    mutating func next() -> (id: RequestID, tenant: HTTP2Tenant?)? {
        guard isShared else {
            guard !queues.isEmpty, let id = queues[0].pop(skipping: &answered) else { return nil }
            waiting -= 1
            if queues[0].waiting == 0 {
                turns.removeFirst()
                settle(0)
            }
            return (id, queues[0].tenant)
        }
        var passedOver = 0
        while let slot = turns.first {
            if belowShare > 0, queues[slot].streams >= share, passedOver < turns.count {
                turns.rotate()
                passedOver += 1
                continue
            }
            guard let id = queues[slot].pop(skipping: &answered) else {
                // Not expected (a tenant in the turns has a request waiting); never loop on it.
                turns.removeFirst()
                if queues[slot].streams < share { belowShare -= 1 }
                settle(slot)
                if !isShared { return next() }
                continue
            }
            waiting -= 1
            queues[slot].streams += 1
            streams += 1
            if queues[slot].streams == share { belowShare -= 1 }
            let tenant = queues[slot].tenant
            if queues[slot].waiting > 0 {
                turns.rotate()
            } else {
                turns.removeFirst()
                if queues[slot].streams < share { belowShare -= 1 }
                settle(slot)
            }
            return (id, tenant)
        }
        return nil
    }

    /// A stream of `tenant`'s at the origin ended (shared only: alone, a tenant's streams are the origin's). A
    /// tenant with neither streams nor waiting requests is forgotten.
    mutating func streamClosed(tenant: HTTP2Tenant?) {
        guard isShared, let slot = slots[tenant] else { return }
        if queues[slot].streams > 0 {
            queues[slot].streams -= 1
            streams -= 1
        }
        if queues[slot].streams == 0 && queues[slot].waiting == 0 { forget(slot) }
    }

    // MARK: Withdrawals

    /// Every waiting request, tenants in turn order, each tenant's in its queue's order; the queues are left empty.
    mutating func removeAll() -> [RequestID] {
        var ids: [RequestID] = []
        ids.reserveCapacity(waiting)
        for slot in turns.all {
            while let id = queues[slot].pop(skipping: &answered) { ids.append(id) }
        }
        // Every stored entry was reached: the answered ones on the way are gone from `answered` too.
        turns = Turns()
        waiting = 0
        forgetIdleTenants()
        return ids
    }

    /// Whether some tenant's oldest entry has waited `wait` at `now` (heads only: each queue is in arrival order,
    /// except a request the peer did not process, which is back at the front and waits from then).
    func hasWaited(_ wait: Duration, now: Instant) -> Bool {
        turns.all.contains { slot in
            let q = queues[slot]
            return now - q.entries[q.head].since >= wait
        }
    }

    /// Removes the requests that have waited `wait` or longer at `now`, from each tenant's front up to the first
    /// younger entry (an older one behind a younger requeued entry waits for a later call).
    mutating func removeWaited(_ wait: Duration, now: Instant) -> [RequestID] {
        var expired: [RequestID] = []
        var emptied: [Int] = []
        for slot in turns.all {
            var q = Queue()
            swap(&q, &queues[slot])
            while q.head < q.entries.count, now - q.entries[q.head].since >= wait {
                let id = q.entries[q.head].id
                q.head += 1
                if q.answered > 0, answered.remove(id) != nil {
                    q.answered -= 1
                } else {
                    expired.append(id)
                    waiting -= 1
                }
            }
            q.compact()
            if q.waiting == 0 { emptied.append(slot) }
            swap(&q, &queues[slot])
        }
        if !emptied.isEmpty {
            turns = Turns(slots: turns.all.filter { queues[$0].waiting > 0 }, head: 0)
            for slot in emptied { dropAnsweredEntries(slot) }
            forgetIdleTenants()
        }
        return expired
    }

    // MARK: Tenants

    private func existingSlot(of tenant: HTTP2Tenant?) -> Int? {
        if isShared { return slots[tenant] }
        return queues.first.flatMap { $0.tenant == tenant ? 0 : nil }
    }

    /// `tenant`'s slot, made when it has none.
    private mutating func slot(for tenant: HTTP2Tenant?, originStreams: () -> Int) -> Int {
        if isShared {
            if let slot = slots[tenant] { return slot }
            let slot: Int
            if let free = freeSlots.popLast() {
                slot = free
                queues[slot] = Queue(tenant: tenant)
            } else {
                slot = queues.count
                queues.append(Queue(tenant: tenant))
            }
            slots[tenant] = slot
            return slot
        }
        if queues.isEmpty {
            queues.append(Queue(tenant: tenant))
            return 0
        }
        if queues[0].tenant == tenant { return 0 }
        // A second tenant. Every stream open at the origin is the first one's.
        let held = originStreams()
        if queues[0].stored == 0 && held == 0 {
            // The first one has left nothing: the newcomer takes its place.
            queues[0] = Queue(tenant: tenant)
            return 0
        }
        queues[0].streams = held
        streams = held
        slots = [queues[0].tenant: 0, tenant: 1]
        queues.append(Queue(tenant: tenant))
        return 1
    }

    /// `slot` has nothing waiting (and has left the turns): its answered entries go, and the tenant too when it
    /// holds no stream.
    private mutating func settle(_ slot: Int) {
        dropAnsweredEntries(slot)
        if isShared, queues[slot].streams == 0 { forget(slot) }
    }

    /// Drops `slot`'s stored entries once nothing of it waits (all are answered ones).
    private mutating func dropAnsweredEntries(_ slot: Int) {
        guard queues[slot].waiting == 0, queues[slot].stored > 0 else { return }
        let q = queues[slot]
        for entry in q.entries[q.head...] { answered.remove(entry.id) }
        queues[slot].entries.removeAll(keepingCapacity: true)
        queues[slot].head = 0
        queues[slot].answered = 0
    }

    /// Forgets the tenant of `slot` (shared; nothing waiting, no stream). With one tenant left, it becomes slot 0
    /// and its streams are no longer counted.
    private mutating func forget(_ slot: Int) {
        slots[queues[slot].tenant] = nil
        queues[slot] = Queue()
        freeSlots.append(slot)
        guard slots.count == 1, let last = slots.first?.value else { return }
        var remaining = queues[last]
        remaining.streams = 0
        queues = [remaining]
        slots = [:]
        freeSlots = []
        streams = 0
        turns = Turns()
        if remaining.waiting > 0 { turns.append(0) }
    }

    private mutating func forgetIdleTenants() {
        guard isShared else { return }
        let idle = slots.filter { queues[$0.value].streams == 0 && queues[$0.value].waiting == 0 }.keys
        for tenant in idle {
            guard isShared, let slot = slots[tenant] else { return }
            forget(slot)
        }
    }

    /// Drops every answered entry at once.
    private mutating func dropAnswered() {
        for slot in queues.indices where queues[slot].answered > 0 {
            let q = queues[slot]
            queues[slot].entries = q.entries[q.head...].filter { !answered.contains($0.id) }
            queues[slot].head = 0
            queues[slot].answered = 0
        }
        answered = []
    }
}
