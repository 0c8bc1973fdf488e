/// The connection pool's decisions, as a value without I/O (in the manner of postgres-nio's `PoolStateMachine`):
/// which request goes on which connection, when a connection is opened, when an origin backs off, which
/// connections are closed (idle timeout, least recently used at the global cap) and which origins are forgotten.
/// `ClientCore` feeds it events (with the time) and carries out the `Action`s it returns; sockets, TLS and
/// nghttp2 never appear here, so every decision is tested without them.
///
/// Bounds it keeps:
/// - at most `connectionsPerOrigin` connections per origin and `connections` in all (the global cap, below
///   the process's file descriptor limit); at the global cap the least recently used idle connection of any
///   origin is closed to make room, and when none is idle the origin waits for one to close;
/// - at most `inFlightPerOrigin` streams per origin, whatever the peers' SETTINGS_MAX_CONCURRENT_STREAMS, so one
///   slow endpoint cannot take every stream; further requests wait in the origin's queue (until their deadline);
/// - an origin's queue is one FIFO queue per tenant (`HTTP2Request.tenant`), served in turn, and a tenant at its
///   share of the origin's streams gets no new one while a tenant below its share waits (`TenantQueues`), so one
///   tenant's broadcast, or a tenant whose answers are slow, does not hold up another's requests at a shared
///   origin (every app's APNs pushes go to one origin);
/// - a request that has waited `queueWait` for a stream (``expireWaits(now:)``) fails unsent, so that the callers'
///   own slots (a worker's deliveries) are not held by one slow or unreachable origin either;
/// - a connection whose peer answered REFUSED_STREAM (RFC 9113 §8.7) carries at most as many streams as were open
///   without being refused (its effective limit, never above the peer's SETTINGS_MAX_CONCURRENT_STREAMS); the
///   limit grows back by one stream per window of that many processed streams, at most once per
///   `streamLimitRecoveryInterval` (additive increase), and new connections of the origin start from it;
/// - a connection without streams for `idleTimeout` is closed; an origin with no connection, nothing waiting
///   and no backoff pending is forgotten (Web Push has one origin per push service a subscriber chose).
struct PoolStateMachine {
    typealias RequestID = UInt64
    typealias ConnectionID = Int
    typealias Instant = ContinuousClock.Instant

    /// The limits and timings used, taken from `HTTP2ClientConfiguration`.
    struct Limits {
        var connectionsPerOrigin: Int
        var connections: Int
        var inFlightPerOrigin: Int
        var idleTimeout: Duration
        var pingInterval: Duration
        var backoffInitial: Duration
        var backoffMaximum: Duration
        var maximumRetries: Int
        var streamLimitRecoveryInterval: Duration
        /// nil: requests wait for a stream until their deadline.
        var queueWait: Duration?

        init(_ configuration: HTTP2ClientConfiguration) {
            connectionsPerOrigin = max(1, configuration.maximumConnectionsPerOrigin)
            connections = max(1, configuration.maximumConnections)
            inFlightPerOrigin = max(1, configuration.maximumInFlightPerOrigin)
            idleTimeout = configuration.idleTimeout
            pingInterval = configuration.pingInterval
            backoffInitial = configuration.reconnectBackoffInitial
            backoffMaximum = configuration.reconnectBackoffMaximum
            maximumRetries = configuration.maximumRetries
            streamLimitRecoveryInterval = configuration.streamLimitRecoveryInterval
            queueWait = configuration.maximumQueueWait
        }
    }

    enum Action {
        /// Resolve the origin and connect; report `connected` or `connectionClosed` for this id.
        case open(ConnectionID, HTTP2Origin)
        /// Open a stream for the request (of `tenant`) on the connection (report `streamClosed` with the tenant
        /// when it ends, or at once if the request is gone or the stream cannot be opened).
        case start(RequestID, on: ConnectionID, tenant: HTTP2Tenant?)
        /// Fail these waiting requests with the error (never sent).
        case fail([RequestID], HTTP2Error)
        /// Close the connection gracefully (GOAWAY, RFC 9113 §6.8): idle too long, or evicted at the global cap.
        case close(ConnectionID)
        /// Call `wokeUp` for the origin after this delay (its reconnect backoff ends).
        case wakeUp(HTTP2Origin, after: Duration)
    }

    /// What to do with a request the peer did not process (REFUSED_STREAM, or above GOAWAY's last-stream-id).
    enum RetryDecision: Equatable { case requeued, giveUp }

    private struct Connection {
        let origin: HTTP2Origin
        var ready = false
        var goingAway = false
        /// Set once `close` was returned: no new streams, not counted against the caps.
        var closing = false
        var maxStreams = 0
        var streams = 0
        var lastUsed: Instant
        /// The limit lowered after REFUSED_STREAM; nil: the peer's `maxStreams` alone.
        var streamLimit: Int?
        /// Streams the peer processed since `streamLimit` last changed, and when it changed.
        var processedSinceLimitChange = 0
        var limitChangedAt: Instant
        /// Its origin is shared by tenants (`TenantQueues.isShared`): each stream that ends is counted off its
        /// tenant. Kept here so that a response at an origin of one tenant costs no look-up of the origin.
        var countsTenantStreams: Bool

        init(origin: HTTP2Origin, lastUsed: Instant, streamLimit: Int?, countsTenantStreams: Bool) {
            self.origin = origin
            self.lastUsed = lastUsed
            self.streamLimit = streamLimit
            self.limitChangedAt = lastUsed
            self.countsTenantStreams = countsTenantStreams
        }

        /// One of its streams closed. Returns whether a lowered stream limit was raised again by one (after
        /// `limit` streams processed at it and `recovery` passed since it last changed), and whether the stream
        /// is to be counted off its tenant (read here, in place: reading the record out of the dictionary copies it).
        mutating func streamClosed(now: Instant, processed: Bool, recovery: Duration) -> (raisedLimit: Bool, countsTenantStreams: Bool) {
            streams = max(0, streams - 1)
            lastUsed = now
            guard processed, let limit = streamLimit else { return (false, countsTenantStreams) }
            processedSinceLimitChange += 1
            guard processedSinceLimitChange >= limit, now - limitChangedAt >= recovery else { return (false, countsTenantStreams) }
            streamLimit = limit + 1 >= maxStreams ? nil : limit + 1
            processedSinceLimitChange = 0
            limitChangedAt = now
            return (true, countsTenantStreams)
        }

        var usable: Bool { !goingAway && !closing }
        /// The streams this connection may carry: the peer's limit, or the lower one learned from refusals.
        var effectiveLimit: Int { min(maxStreams, streamLimit ?? Int.max) }
        var freeSlots: Int { ready && usable ? max(0, effectiveLimit - streams) : 0 }
    }

    private struct Origin {
        /// The requests waiting for a stream, by tenant.
        var queue = TenantQueues()
        /// Whether its connections count streams off tenants now (`Connection.countsTenantStreams`).
        var connectionsCountTenantStreams = false
        var connections: [ConnectionID] = []
        var consecutiveFailures = 0
        var backoffUntil: Instant?
        var wakeUpPending = false
        /// The last connect failed because the egress policy refused every address of the origin: until the
        /// backoff ends, requests fail with it at once instead of waiting (the answer will not change sooner).
        var refusal: HTTP2Error?
        /// The stream limit its connections learned from REFUSED_STREAM (nil: none); new connections start from it.
        var streamLimit: Int?
    }

    let limits: Limits
    private var connections: [ConnectionID: Connection] = [:]
    private var origins: [HTTP2Origin: Origin] = [:]
    private var nextConnectionID: ConnectionID = 1
    /// Origins with waiting requests that found the global cap reached and no idle connection to close.
    private var starved: Set<HTTP2Origin> = []

    init(limits: Limits) {
        self.limits = limits
    }

    // MARK: Queries

    /// Connections counted against the global cap (closing ones are on their way out).
    var openConnections: Int { connections.values.count { !$0.closing } }
    /// Origins currently remembered.
    var originCount: Int { origins.count }
    /// Requests waiting for a stream at `origin`.
    func waiting(at origin: HTTP2Origin) -> Int { origins[origin]?.queue.waiting ?? 0 }
    /// The tenants with requests waiting at `origin`, at most `limit`, in the order their turns come.
    func waitingTenants(at origin: HTTP2Origin, limit: Int) -> [HTTP2Tenant?] {
        origins[origin]?.queue.waitingTenants(limit: limit) ?? []
    }
    /// Entries stored in `origin`'s queue, answered ones included (bounded by compaction).
    func storedCount(at origin: HTTP2Origin) -> Int { origins[origin]?.queue.stored ?? 0 }
    /// Tenants remembered at `origin`: those with streams or waiting requests (or the last one).
    func tenantCount(at origin: HTTP2Origin) -> Int { origins[origin]?.queue.tenantCount ?? 0 }
    /// The effective stream limit of `connection` (the peer's, or lower after REFUSED_STREAM); nil when unknown.
    func streamLimit(of connection: ConnectionID) -> Int? {
        connections[connection].map(\.effectiveLimit)
    }
    /// Streams open at `origin`.
    func inFlight(at origin: HTTP2Origin) -> Int {
        origins[origin]?.connections.reduce(0) { $0 + (connections[$1]?.streams ?? 0) } ?? 0
    }

    /// Connections counted against the caps, streams open on them, and requests waiting, over every origin.
    var totals: HTTP2ClientStatistics {
        var totals = HTTP2ClientStatistics()
        for connection in connections.values where !connection.closing {
            totals.connections += 1
            totals.openStreams += connection.streams
        }
        totals.waitingRequests = origins.values.reduce(0) { $0 + $1.queue.waiting }
        return totals
    }

    /// Whether a keepalive PING (RFC 9113 §6.7) is worth sending on `connection`: it has no streams (streams have
    /// their own deadlines) and was used within `idleTimeout`. A connection nobody uses is closed at its idle
    /// timeout instead of being kept alive.
    func keepaliveWanted(_ connection: ConnectionID, now: Instant) -> Bool {
        guard let c = connections[connection], c.ready, !c.closing else { return false }
        return c.streams == 0 && now - c.lastUsed < limits.idleTimeout
    }

    // MARK: Requests

    /// A new request of `tenant` for `origin`: queued at the back of its tenant's queue, then dispatched.
    mutating func enqueue(_ request: RequestID, tenant: HTTP2Tenant? = nil, to origin: HTTP2Origin, now: Instant) -> [Action] {
        var o = Origin()
        let index = takeOrigin(creatingIfMissing: origin, into: &o)
        let connectionIDs = o.connections
        o.queue.append(request, tenant: tenant, since: now) { streams(on: connectionIDs) }
        defer { putBack(&o, at: index) }
        return dispatch(&o, origin, now: now)
    }

    /// Several requests queued at once, in order, then one dispatch: the same actions as enqueueing them one
    /// by one and dispatching after the last, for one lookup of the origin instead of one per request (and of
    /// a tenant's queue per run). `tenants`: the requests' tenants as runs of consecutive requests of one tenant,
    /// in order, their counts adding up to `requests.count` (the ids stay a plain array: a batch is mostly one
    /// tenant's, and an array of pairs costs a release of each element's tenant).
    mutating func enqueue(_ requests: [RequestID], tenants: [(tenant: HTTP2Tenant?, count: Int)], to origin: HTTP2Origin,
                          now: Instant) -> [Action] {
        var o = Origin()
        let index = takeOrigin(creatingIfMissing: origin, into: &o)
        let connectionIDs = o.connections
        var start = 0
        for run in tenants {
            let end = min(start + run.count, requests.count)
            o.queue.append(contentsOf: requests[start..<end], tenant: run.tenant, since: now) { streams(on: connectionIDs) }
            start = end
        }
        defer { putBack(&o, at: index) }
        return dispatch(&o, origin, now: now)
    }

    /// ``enqueue(_:tenants:to:now:)`` for requests of one tenant.
    mutating func enqueue(_ requests: [RequestID], tenant: HTTP2Tenant? = nil, to origin: HTTP2Origin, now: Instant) -> [Action] {
        var o = Origin()
        let index = takeOrigin(creatingIfMissing: origin, into: &o)
        let connectionIDs = o.connections
        o.queue.append(contentsOf: requests[...], tenant: tenant, since: now) { streams(on: connectionIDs) }
        defer { putBack(&o, at: index) }
        return dispatch(&o, origin, now: now)
    }

    /// A queued request of `tenant` was answered before it got a stream (timeout, cancellation): it is skipped.
    /// Once such entries are many and at least half the queue they are dropped at once (an outage can time out
    /// thousands).
    mutating func answeredWhileQueued(_ request: RequestID, tenant: HTTP2Tenant? = nil, at origin: HTTP2Origin) {
        var o = Origin()
        guard let index = takeOrigin(origin, into: &o) else { return }
        o.queue.answered(request, tenant: tenant)
        putBack(&o, at: index)
    }

    /// The peer did not process `request` (RFC 9113 §8.7): back to the front of its tenant's queue (waiting from
    /// `now`), or given up after `maximumRetries` resends. Dispatch follows separately (this runs inside nghttp2
    /// callbacks).
    mutating func unprocessed(_ request: RequestID, tenant: HTTP2Tenant? = nil, at origin: HTTP2Origin, retries: Int,
                              now: Instant) -> RetryDecision {
        guard retries <= limits.maximumRetries else { return .giveUp }
        var o = Origin()
        let index = takeOrigin(creatingIfMissing: origin, into: &o)
        let connectionIDs = o.connections
        o.queue.requeue(request, tenant: tenant, since: now) { streams(on: connectionIDs) }
        putBack(&o, at: index)
        return .requeued
    }

    /// The peer answered `request`'s stream on `connection` with REFUSED_STREAM (RFC 9113 §8.7: not processed).
    /// Call before `streamClosed` for that stream, so the refused stream is still counted open. The connection's
    /// effective limit drops to the streams open beside the refused one, for this connection and new ones of the
    /// origin; the request goes back to the front of the queue. A refusal that lowered the limit was the pool's
    /// own doing (too many streams) and costs the request no retry; one at an unchanged limit, or of the only
    /// stream open, counts against `maximumRetries` (`retries`: the count before this refusal).
    /// - Returns: whether it was requeued, and whether this refusal counted as a retry.
    mutating func refused(_ request: RequestID, tenant: HTTP2Tenant? = nil, on connection: ConnectionID, at origin: HTTP2Origin,
                          retries: Int, now: Instant) -> (decision: RetryDecision, counted: Bool) {
        var counted = true
        if var c = connections[connection] {
            // Alone on its connection, the stream was not refused for concurrency: the limit stays, it counts.
            let accepted = c.streams - 1
            if accepted >= 1, accepted < c.effectiveLimit {
                c.streamLimit = accepted
                c.processedSinceLimitChange = 0
                c.limitChangedAt = now
                connections[connection] = c
                origins[origin]?.streamLimit = accepted
                counted = false
            }
        }
        return (unprocessed(request, tenant: tenant, at: origin, retries: counted ? retries + 1 : retries, now: now), counted)
    }

    // MARK: Connection events

    /// The connection's first SETTINGS arrived: it may carry `maxStreams` streams.
    mutating func connected(_ connection: ConnectionID, maxStreams: Int, now: Instant) {
        guard var c = connections[connection] else { return }
        c.ready = true
        c.maxStreams = maxStreams
        c.lastUsed = now
        connections[connection] = c
        origins[c.origin]?.consecutiveFailures = 0
        origins[c.origin]?.backoffUntil = nil
        origins[c.origin]?.refusal = nil
    }

    /// A later SETTINGS changed the peer's stream limit.
    mutating func settingsChanged(_ connection: ConnectionID, maxStreams: Int) {
        connections[connection]?.maxStreams = maxStreams
    }

    /// GOAWAY arrived (or stream ids ran out): no new streams on it.
    mutating func goingAway(_ connection: ConnectionID) {
        connections[connection]?.goingAway = true
    }

    /// A stream of `connection`, of a request of `tenant`, ended (or could not be opened). `processed`: the peer
    /// answered it (false for a refused stream or one never opened). Processed streams grow a lowered limit back:
    /// one stream more per window of `limit` processed streams, at most once per `streamLimitRecoveryInterval`,
    /// never above the peer's SETTINGS_MAX_CONCURRENT_STREAMS (then the lowered limit is dropped).
    mutating func streamClosed(_ connection: ConnectionID, tenant: HTTP2Tenant? = nil, now: Instant, processed: Bool = true) {
        // Changed in place (one lookup, no copy of the connection's record): this runs once per response.
        guard let index = connections.index(forKey: connection) else { return }
        let recovery = limits.streamLimitRecoveryInterval
        let closed = connections.values[index].streamClosed(now: now, processed: processed, recovery: recovery)
        guard closed.raisedLimit || closed.countsTenantStreams else { return }
        let c = connections.values[index]
        if closed.raisedLimit { origins[c.origin]?.streamLimit = c.streamLimit }
        if closed.countsTenantStreams { tenantStreamsClosed(at: c.origin, CollectionOfOne(tenant)) }
    }

    /// Streams of these tenants at `origin` ended (the origin is shared by tenants).
    private mutating func tenantStreamsClosed(at origin: HTTP2Origin, _ tenants: some Sequence<HTTP2Tenant?>) {
        var o = Origin()
        guard let index = takeOrigin(origin, into: &o) else { return }
        for tenant in tenants { o.queue.streamClosed(tenant: tenant) }
        putBack(&o, at: index)
    }

    /// `connection` closed. `error` is why (nil = orderly); `openStreams`: the tenants of the streams still open
    /// on it (each one's request is finished or requeued, and reports no `streamClosed`). A connection that never
    /// got ready counts as a failed connect: the origin backs off (doubling from `backoffInitial` up to
    /// `backoffMaximum`), and when it has no ready connection its waiting requests fail now with `error` (never
    /// sent: safe to retry) rather than wait for the next attempt. Then waiting requests are dispatched, here and
    /// at origins that waited for a free slot under the global cap.
    mutating func connectionClosed(_ connection: ConnectionID, error: HTTP2Error?, now: Instant,
                                   openStreams: [HTTP2Tenant?] = []) -> [Action] {
        guard let c = connections.removeValue(forKey: connection) else { return [] }
        var actions: [Action] = []
        var o = Origin()
        if let index = takeOrigin(c.origin, into: &o) {
            o.connections.removeAll { $0 == connection }
            if c.countsTenantStreams {
                for tenant in openStreams { o.queue.streamClosed(tenant: tenant) }
            }
            if !c.ready && !c.closing {
                o.consecutiveFailures += 1
                var delay = limits.backoffInitial * (1 << min(o.consecutiveFailures - 1, 20))
                if delay > limits.backoffMaximum { delay = limits.backoffMaximum }
                o.backoffUntil = now + delay
                o.refusal = error.flatMap { $0.code == .forbiddenAddress ? HTTP2Error($0.code, $0.message, isSafeToRetry: true) : nil }
                let anyReady = o.connections.contains { connections[$0].map { $0.ready && !$0.goingAway } ?? false }
                if !anyReady {
                    let failed = o.queue.removeAll()
                    if !failed.isEmpty {
                        let base = error ?? HTTP2Error(.connectionClosed, "\(c.origin) closed the connection before SETTINGS")
                        actions.append(.fail(failed, HTTP2Error(base.code, base.message, isSafeToRetry: true)))
                    }
                }
            }
            putBack(&o, at: index)
        }
        actions += dispatch(c.origin, now: now)
        // A global slot opened.
        for origin in takeStarved() { actions += dispatch(origin, now: now) }
        return actions
    }

    /// True when some origin waits for a global connection slot (see ``takeStarved()``).
    var hasStarved: Bool { !starved.isEmpty }

    /// Origins that wait for room under the global cap; the owner dispatches them again when a stream ends
    /// (a connection may have gone idle, so it can be closed for them).
    mutating func takeStarved() -> [HTTP2Origin] {
        defer { starved = [] }
        return Array(starved)
    }

    /// The backoff wake-up for `origin` fired.
    mutating func wokeUp(_ origin: HTTP2Origin, now: Instant) -> [Action] {
        origins[origin]?.wakeUpPending = false
        return dispatch(origin, now: now)
    }

    // MARK: Decisions

    /// Assigns waiting requests of `origin` to connections with free slots (most free first) within the per-origin
    /// in-flight cap, tenants in turn within their shares (`TenantQueues`); opens a connection when requests still
    /// wait and the limits, backoff and global cap allow.
    mutating func dispatch(_ origin: HTTP2Origin, now: Instant) -> [Action] {
        var o = Origin()
        guard let index = takeOrigin(origin, into: &o) else { return [] }
        defer { putBack(&o, at: index) }
        return dispatch(&o, origin, now: now)
    }

    /// ``dispatch(_:now:)`` on `origin`'s record, taken out of `origins` (see `takeOrigin`).
    private mutating func dispatch(_ o: inout Origin, _ origin: HTTP2Origin, now: Instant) -> [Action] {
        var actions: [Action] = []
        var inFlight = streams(on: o.connections)
        if o.queue.isShared {
            // The streams the origin's connections may carry now: the share of each tenant is taken from them,
            // not from the cap alone, when a peer (or its refusals) allows fewer.
            var capacity = 0
            for id in o.connections {
                guard let c = connections[id], c.ready, c.usable else { continue }
                capacity += min(c.effectiveLimit, limits.inFlightPerOrigin)
            }
            o.queue.startTurns(capacity: min(capacity, limits.inFlightPerOrigin), originStreams: inFlight)
        }
        while o.queue.waiting > 0, inFlight < limits.inFlightPerOrigin {
            guard let best = o.connections.max(by: { (connections[$0]?.freeSlots ?? 0) < (connections[$1]?.freeSlots ?? 0) }),
                  var c = connections[best], c.freeSlots > 0 else { break }
            for _ in 0..<min(c.freeSlots, limits.inFlightPerOrigin - inFlight) {
                guard let next = o.queue.next() else { break }
                actions.append(.start(next.id, on: best, tenant: next.tenant))
                c.streams += 1
                inFlight += 1
            }
            c.lastUsed = now
            connections[best] = c
        }
        guard o.queue.waiting > 0, inFlight < limits.inFlightPerOrigin else { return actions }
        let usable = o.connections.compactMap { connections[$0] }.filter(\.usable)
        if usable.contains(where: { !$0.ready }) || usable.count >= limits.connectionsPerOrigin { return actions }
        if let until = o.backoffUntil, until > now {
            if let refusal = o.refusal, usable.isEmpty {
                let failed = o.queue.removeAll()
                if !failed.isEmpty { actions.append(.fail(failed, refusal)) }
                return actions
            }
            if !o.wakeUpPending {
                o.wakeUpPending = true
                actions.append(.wakeUp(origin, after: until - now))
            }
            return actions
        }
        if openConnections >= limits.connections {
            // Make room: close the least recently used idle connection, of any origin.
            guard let victim = connections.filter({ $0.value.ready && !$0.value.closing && $0.value.streams == 0 })
                .min(by: { $0.value.lastUsed < $1.value.lastUsed })?.key else {
                // Every connection is busy: wait until one closes or goes idle (see `takeStarved`).
                starved.insert(origin)
                return actions
            }
            connections[victim]?.closing = true
            actions.append(.close(victim))
        }
        starved.remove(origin)
        let id = nextConnectionID
        nextConnectionID += 1
        connections[id] = Connection(origin: origin, lastUsed: now, streamLimit: o.streamLimit,
                                     countsTenantStreams: o.connectionsCountTenantStreams)
        o.connections.append(id)
        actions.append(.open(id, origin))
        return actions
    }

    /// Fails, unsent, the requests that have waited `queueWait` or longer for a stream, whatever held them: every
    /// stream in use (`inFlightPerOrigin` open, or every connection at its limit), or a connection that does not
    /// open (a handshake that never ends ties up requests for `connectTimeout` otherwise). The connection attempt
    /// goes on; requests that come later use it once it is ready. Each tenant's queue is in arrival order (a
    /// request the peer refused goes back to its front, waiting from then), so only entries from the front of
    /// each are looked at: one behind a younger requeued entry waits for a later check.
    mutating func expireWaits(now: Instant) -> [Action] {
        guard let queueWait = limits.queueWait else { return [] }
        var busy: [HTTP2Origin] = []
        for (origin, o) in origins where o.queue.waiting > 0 && o.queue.hasWaited(queueWait, now: now) {
            busy.append(origin)
        }
        var actions: [Action] = []
        for origin in busy {
            var o = Origin()
            guard let index = takeOrigin(origin, into: &o) else { continue }
            let expired = o.queue.removeWaited(queueWait, now: now)
            putBack(&o, at: index)
            if !expired.isEmpty {
                actions.append(.fail(expired, HTTP2Error(
                    .originBusy, "no stream of \(origin) was free while the request waited \(queueWait); not sent",
                    isSafeToRetry: true)))
            }
        }
        return actions
    }

    /// Periodic sweep: closes connections idle (no streams) for `idleTimeout` and forgets origins with nothing
    /// left (no connection, nothing waiting, no backoff pending).
    mutating func sweep(now: Instant) -> [Action] {
        var actions: [Action] = []
        for (id, c) in connections where c.ready && !c.closing && c.streams == 0 && now - c.lastUsed >= limits.idleTimeout {
            connections[id]?.closing = true
            actions.append(.close(id))
        }
        origins = origins.filter { _, o in
            !o.connections.isEmpty || o.queue.waiting > 0 || o.wakeUpPending || (o.backoffUntil.map { $0 > now } ?? false)
        }
        return actions
    }

    /// Every connection, for shutdown (each then reports `connectionClosed`).
    mutating func closeAll() -> [ConnectionID] {
        for id in connections.keys { connections[id]?.closing = true }
        return Array(connections.keys)
    }

    // MARK: Origins' records

    /// Moves `origin`'s record into `o`, leaving an empty one in its place, and returns where it goes back
    /// (``putBack(_:at:)``); nil when the origin has none. Changed outside the dictionary, the record's queues are
    /// not copied on write, and the connections can be read meanwhile. Until it is back, nothing may add or remove
    /// origins or read this one's record.
    private mutating func takeOrigin(_ origin: HTTP2Origin, into o: inout Origin) -> Dictionary<HTTP2Origin, Origin>.Index? {
        guard let index = origins.index(forKey: origin) else { return nil }
        swap(&o, &origins.values[index])
        return index
    }

    /// ``takeOrigin(_:into:)`` for an origin remembered from now on if it was not.
    private mutating func takeOrigin(creatingIfMissing origin: HTTP2Origin, into o: inout Origin) -> Dictionary<HTTP2Origin, Origin>.Index {
        if let index = takeOrigin(origin, into: &o) { return index }
        origins[origin] = Origin()
        return takeOrigin(origin, into: &o)!
    }

    /// Puts back a record taken by ``takeOrigin(_:into:)`` (`o` is left empty). When its tenants came to
    /// share it, or it was left to one, its connections start or stop counting streams off tenants.
    private mutating func putBack(_ o: inout Origin, at index: Dictionary<HTTP2Origin, Origin>.Index) {
        if o.connectionsCountTenantStreams != o.queue.isShared {
            o.connectionsCountTenantStreams = o.queue.isShared
            for id in o.connections { connections[id]?.countsTenantStreams = o.queue.isShared }
        }
        swap(&o, &origins.values[index])
    }

    /// Streams open on these connections.
    private func streams(on ids: [ConnectionID]) -> Int {
        ids.reduce(0) { $0 + (connections[$1]?.streams ?? 0) }
    }
}
