internal import Glibc

/// The client's loop-side state: requests, live connections, and the pool's `PoolStateMachine`, whose actions it
/// carries out. `@unchecked Sendable`: created on any thread, then used only on the loop thread.
final class ClientCore: @unchecked Sendable {
    let loop: HTTP2EventLoop
    let tlsConfiguration: TLSClientConfiguration
    let configuration: HTTP2ClientConfiguration
    private var tlsContext: Result<TLSContext, HTTP2Error>?
    private(set) var machine: PoolStateMachine
    private var live: [PoolStateMachine.ConnectionID: ClientConnection] = [:]
    var requests: [UInt64: PendingRequest] = [:]
    /// Ids whose cancellation reached the loop before their request: the request is refused when it arrives,
    /// a moment later (the cancelling task hands it over right after). A cancellation that came after its
    /// request had finished looks the same here and would stay forever, so the set is rotated by the sweep at
    /// most once per ``earlyCancellationLifetime``: `recent` holds the ids since the last rotation, `older` the
    /// ones before, dropped at the next rotation. An id is kept at least that long (up to twice that, plus a
    /// sweep interval); bounded by the cancellations of two such periods. A request arriving later than that
    /// (its task stalled for a second between cancelling and handing over) is sent as if never cancelled.
    private var cancelledEarly: (recent: Set<UInt64>, older: Set<UInt64>, rotatedAt: ContinuousClock.Instant) = ([], [], .now)
    static let earlyCancellationLifetime: Duration = .seconds(1)
    /// Early cancellations remembered now (tests).
    var cancelledEarlyCount: Int { cancelledEarly.recent.count + cancelledEarly.older.count }
    private var dispatchScheduled: Set<HTTP2Origin> = []
    /// Lookups of origins' names that may still wait in their resolver, per origin, with the tenants they were
    /// handed over for: a request of another tenant for that origin shares the lookup (``HostResolver/share(_:with:)``),
    /// so it may start on that tenant's share instead of waiting for the first tenant's. Removed when the answer
    /// (or the timeout) arrives.
    private var lookups: [HTTP2Origin: [OriginLookup]] = [:]
    private struct OriginLookup {
        var connection: PoolStateMachine.ConnectionID
        var resolver: HostResolver
        var ticket: HostResolver.Ticket
        var tenants: [String]
    }
    private var sweepTimer: LoopTimerID?
    private var queueWaitTimer: LoopTimerID?
    private var shuttingDown = false
    private var loopStopped = false
    /// The loop has stopped: work deferred to the end of a turn would never run.
    var isLoopStopped: Bool { loopStopped }
    private var shutdownWaiters: [CheckedContinuation<Void, Never>] = []

    init(loop: HTTP2EventLoop, tls: TLSClientConfiguration, configuration: HTTP2ClientConfiguration) {
        self.loop = loop
        self.tlsConfiguration = tls
        self.configuration = configuration
        self.machine = PoolStateMachine(limits: .init(configuration))
    }

    func attach() {
        loop.core.addStopHook { [self] in
            loopStopped = true
            for request in Array(requests.values) {
                finish(request, .failure(HTTP2Error(.shutdown, "the event loop shut down", isSafeToRetry: !request.headersSent)))
            }
            for waiter in shutdownWaiters { waiter.resume() }
            shutdownWaiters = []
        }
        scheduleSweep()
        scheduleQueueWaitCheck()
    }

    func tls() -> Result<TLSContext, HTTP2Error> {
        if let tlsContext { return tlsContext }
        let result = Result { try TLSContext.client(tlsConfiguration) }.mapError { error in
            (error as? HTTP2Error).map { HTTP2Error($0.code, $0.message, isSafeToRetry: true) }
                ?? HTTP2Error(.tlsHandshakeFailed, "\(error)", isSafeToRetry: true)
        }
        tlsContext = result
        return result
    }

    func enqueue(id: UInt64, _ request: HTTP2Request, _ origin: HTTP2Origin, _ continuation: UnsafeContinuation<HTTP2Response, any Error>) {
        enqueue(id: id, request, origin, completion: .continuation(continuation))
    }

    /// Enqueues the requests of one ``HTTP2Client/submit(_:to:answers:)`` (request `index` has id
    /// `firstID + index`): one pool decision for all of them, and one deadline timer per distinct timeout
    /// instead of one per request, since they all started now. The timer finds its requests by id, so it keeps
    /// none of them alive after they finish.
    func enqueue(firstID: UInt64, _ batch: [(index: Int, request: HTTP2Request)], _ origin: HTTP2Origin, burst: AnswerBurst) {
        if shuttingDown || loopStopped {
            for (index, _) in batch {
                burst.add(HTTP2Answer(index: index, result: .failure(HTTP2Error(.shutdown, "the HTTP/2 client is shut down"))))
            }
            return
        }
        var queued: [UInt64] = []
        queued.reserveCapacity(batch.count)
        // The tenants of `queued`, as runs of consecutive requests of one tenant (mostly one run).
        var tenants: [(tenant: HTTP2Tenant?, count: Int)] = []
        var byTimeout: [Duration: [UInt64]] = [:]
        for (index, request) in batch {
            let id = firstID + UInt64(index)
            let pending = PendingRequest(id: id, request: request, origin: origin, completion: .burst(burst, index: index))
            requests[id] = pending
            pending.isQueued = true
            queued.append(id)
            if let last = tenants.indices.last, tenants[last].tenant == request.tenant {
                tenants[last].count += 1
            } else {
                tenants.append((request.tenant, 1))
            }
            byTimeout[request.timeout ?? configuration.requestTimeout, default: []].append(id)
        }
        if !lookups.isEmpty, lookups[origin] != nil {
            for (_, request) in batch {
                if let tenant = request.tenant?.key { shareLookups(of: origin, with: tenant) }
            }
        }
        for (timeout, ids) in byTimeout {
            _ = loop.core.schedule(after: timeout) { [weak self] in
                guard let self else { return }
                for id in ids {
                    guard let pending = self.requests[id] else { continue }
                    self.timedOut(pending, after: timeout)
                }
            }
        }
        run(machine.enqueue(queued, tenants: tenants, to: origin, now: .now))
    }

    private func enqueue(id: UInt64, _ request: HTTP2Request, _ origin: HTTP2Origin, completion: PendingRequest.Completion) {
        let pending = PendingRequest(id: id, request: request, origin: origin, completion: completion)
        if cancelledEarly.recent.remove(id) != nil || cancelledEarly.older.remove(id) != nil {
            pending.finish(.failure(CancellationError()))
            return
        }
        if shuttingDown || loopStopped {
            pending.finish(.failure(HTTP2Error(.shutdown, "the HTTP/2 client is shut down")))
            return
        }
        requests[id] = pending
        let timeout = request.timeout ?? configuration.requestTimeout
        // `pending` is held strongly: `finish` cancels the timer, which drops this closure (a weak reference
        // would cost a side table per request).
        pending.timer = loop.core.schedule(after: timeout) { [weak self, pending] in
            guard let self else { return }
            self.timedOut(pending, after: timeout)
        }
        pending.isQueued = true
        if !lookups.isEmpty, let tenant = request.tenant?.key { shareLookups(of: origin, with: tenant) }
        run(machine.enqueue(id, tenant: request.tenant, to: origin, now: .now))
    }

    /// A request of `tenant` waits for `origin`: lookups of its name still pending are shared with the tenant.
    private func shareLookups(of origin: HTTP2Origin, with tenant: String) {
        guard var pending = lookups[origin] else { return }
        for index in pending.indices where !pending[index].tenants.contains(tenant)
            && pending[index].tenants.count <= HostResolverStateMachine.maximumSharers {
            pending[index].tenants.append(tenant)
            pending[index].resolver.share(pending[index].ticket, with: tenant)
        }
        lookups[origin] = pending
    }

    /// Ends a request whose deadline passed with `.requestTimeout`.
    private func timedOut(_ pending: PendingRequest, after timeout: Duration) {
        abort(pending, HTTP2Error(.requestTimeout, "no response from \(pending.origin) within \(timeout)",
                                  // Still queued, or its HEADERS still inside nghttp2 (the reset withdraws them):
                                  // the peer never saw it.
                                  isSafeToRetry: !pending.headersSent))
    }

    /// Cancels a request that is still pending; one that has finished is left alone.
    func cancelIfPending(id: UInt64) {
        if let pending = requests[id] { abort(pending, CancellationError()) }
    }

    func cancel(id: UInt64) {
        guard let pending = requests[id] else {
            cancelledEarly.recent.insert(id)
            return
        }
        abort(pending, CancellationError())
    }

    /// Ends a request early: resets its stream if one is open.
    private func abort(_ pending: PendingRequest, _ error: any Error) {
        // Finish first: resetting the stream runs nghttp2's close callback, which must find the request done.
        let connection = pending.connectionID.flatMap { live[$0] }
        finish(pending, .failure(error))
        connection?.cancelStream(pending.streamID)
    }

    func finish(_ pending: PendingRequest, _ result: Result<HTTP2Response, any Error>) {
        loop.core.cancelTimer(pending.timer)
        requests[pending.id] = nil
        pending.finish(result)
        // Answered while waiting (timeout, cancellation): it must never be dispatched now.
        if pending.isQueued {
            pending.isQueued = false
            machine.answeredWhileQueued(pending.id, tenant: pending.request.tenant, at: pending.origin)
        }
        if shuttingDown && requests.isEmpty {
            // Not from inside an nghttp2 callback (this may run in one): closing flushes the sessions.
            loop.core.runSoon { [self] in
                if shuttingDown && requests.isEmpty { closeEverything() }
            }
        }
    }

    // MARK: Carrying out the pool's decisions

    private func run(_ actions: [PoolStateMachine.Action]) {
        for action in actions {
            switch action {
            case .open(let id, let origin):
                open(id, origin)
            case .start(let requestID, let connectionID, let tenant):
                guard let request = requests[requestID] else {
                    machine.streamClosed(connectionID, tenant: tenant, now: .now, processed: false)
                    continue
                }
                guard let connection = live[connectionID] else {
                    // Not expected (slots come from live connections only); never lose the request.
                    machine.streamClosed(connectionID, tenant: tenant, now: .now, processed: false)
                    _ = machine.unprocessed(requestID, tenant: tenant, at: request.origin, retries: 0, now: .now)
                    scheduleDispatch(request.origin)
                    continue
                }
                request.isQueued = false
                if !connection.startStream(request) {
                    machine.streamClosed(connectionID, tenant: tenant, now: .now, processed: false)
                }
            case .fail(let ids, let error):
                for id in ids {
                    guard let request = requests[id] else { continue }
                    request.isQueued = false
                    finish(request, .failure(error))
                }
            case .close(let id):
                live[id]?.terminate()
            case .wakeUp(let origin, let delay):
                _ = loop.core.schedule(after: delay) { [weak self] in
                    guard let self else { return }
                    self.run(self.machine.wokeUp(origin, now: .now))
                }
            }
        }
    }

    /// Dispatches `origin`'s waiting requests after the current nghttp2 callback has returned.
    func scheduleDispatch(_ origin: HTTP2Origin) {
        guard dispatchScheduled.insert(origin).inserted else { return }
        loop.core.runSoon { [weak self] in
            guard let self else { return }
            self.dispatchScheduled.remove(origin)
            self.run(self.machine.dispatch(origin, now: .now))
        }
    }

    /// Idle connections and forgotten origins are checked a few times per `idleTimeout`.
    private func scheduleSweep() {
        let interval = min(max(configuration.idleTimeout / 4, .milliseconds(10)), .seconds(30))
        sweepTimer = loop.core.schedule(after: interval) { [weak self] in
            guard let self, !self.shuttingDown else { return }
            self.run(self.machine.sweep(now: .now))
            self.forgetStaleEarlyCancellations()
            self.scheduleSweep()
        }
    }

    /// Every half `maximumQueueWait` (at most a second, at least 10 ms): fails the requests that waited that long
    /// for a stream (``PoolStateMachine/expireWaits(now:)``). One timer for the client,
    /// not one per request.
    private func scheduleQueueWaitCheck() {
        guard let wait = configuration.maximumQueueWait else { return }
        let interval = min(max(wait / 2, .milliseconds(10)), .seconds(1))
        queueWaitTimer = loop.core.schedule(after: interval) { [weak self] in
            guard let self, !self.shuttingDown else { return }
            self.run(self.machine.expireWaits(now: .now))
            self.scheduleQueueWaitCheck()
        }
    }

    /// Drops the early cancellations older than two rotations (see ``cancelledEarly``).
    private func forgetStaleEarlyCancellations() {
        let now = ContinuousClock.now
        guard now - cancelledEarly.rotatedAt >= Self.earlyCancellationLifetime else { return }
        cancelledEarly = (recent: [], older: cancelledEarly.recent, rotatedAt: now)
    }

    /// Puts an unprocessed request back in its origin's queue, or fails it past the retry limit.
    func retry(_ request: PendingRequest, reason: HTTP2Error) {
        request.retries += 1
        request.headersSent = false
        switch machine.unprocessed(request.id, tenant: request.request.tenant, at: request.origin, retries: request.retries,
                                   now: .now) {
        case .giveUp:
            finish(request, .failure(HTTP2Error(reason.code, "\(reason.message); gave up after \(configuration.maximumRetries) retries", isSafeToRetry: true)))
        case .requeued:
            request.isQueued = true
            scheduleDispatch(request.origin)
        }
    }

    /// A stream refused with REFUSED_STREAM: the connection's stream limit is lowered (see
    /// `PoolStateMachine.refused`) and the request queued again, or failed once refusals at an unchanged limit
    /// pass the retry limit. Called before `streamClosed` for the stream.
    func refused(_ request: PendingRequest, on connection: ClientConnection, reason: HTTP2Error) {
        request.headersSent = false
        let (decision, counted) = machine.refused(
            request.id, tenant: request.request.tenant, on: connection.id, at: request.origin, retries: request.retries,
            now: .now)
        if counted { request.retries += 1 }
        switch decision {
        case .giveUp:
            finish(request, .failure(HTTP2Error(reason.code, "\(reason.message); gave up after \(configuration.maximumRetries) retries", isSafeToRetry: true)))
        case .requeued:
            request.isQueued = true
            scheduleDispatch(request.origin)
        }
    }

    func connectionReady(_ connection: ClientConnection) {
        machine.connected(connection.id, maxStreams: connection.peerStreamLimit, now: .now)
        run(machine.dispatch(connection.origin, now: .now))
    }

    func settingsChanged(_ connection: ClientConnection) {
        machine.settingsChanged(connection.id, maxStreams: connection.peerStreamLimit)
        scheduleDispatch(connection.origin)
    }

    func goingAway(_ connection: ClientConnection) {
        machine.goingAway(connection.id)
        scheduleDispatch(connection.origin)
    }

    /// A stream of `connection`, of a request of `tenant`, ended (`processed`: the peer answered it).
    func streamClosed(_ connection: ClientConnection, tenant: HTTP2Tenant?, processed: Bool = true) {
        machine.streamClosed(connection.id, tenant: tenant, now: .now, processed: processed)
        // Dozens of responses arrive in one read: the connection's origin is dispatched once after them, marked on
        // the connection rather than by hashing the origin into `dispatchScheduled` for each.
        if !connection.dispatchScheduled {
            connection.dispatchScheduled = true
            loop.core.runSoon { [self] in
                connection.dispatchScheduled = false
                run(machine.dispatch(connection.origin, now: .now))
            }
        }
        if machine.hasStarved {
            for origin in machine.takeStarved() { scheduleDispatch(origin) }
        }
    }

    /// `connection` closed; `openStreams`: the tenants of the streams it still had (each one's request finished
    /// or requeued).
    func connectionClosed(_ connection: ClientConnection, wasReady: Bool, error: HTTP2Error, openStreams: [HTTP2Tenant?]) {
        guard live[connection.id] === connection else { return }
        live[connection.id] = nil
        if !wasReady && error.code == .connectFailed && !connection.remainingAddresses.isEmpty
            && machine.waiting(at: connection.origin) > 0 {
            // TCP connect to one address failed: try the origin's next address before backing off.
            connect(connection.id, connection.origin, .success(connection.remainingAddresses))
            return
        }
        run(machine.connectionClosed(connection.id, error: wasReady ? nil : error, now: .now, openStreams: openStreams))
    }

    // MARK: Opening connections

    private func open(_ id: PoolStateMachine.ConnectionID, _ origin: HTTP2Origin) {
        // The one place names are resolved; the completion runs on the loop thread (resolveOffLoop hops back).
        // The lookup is handed over for the tenants of the requests waiting for it, the oldest first.
        let tenants = machine.waitingTenants(at: origin, limit: HostResolverStateMachine.maximumSharers + 1)
            .compactMap { $0?.key }
        let box = UncheckedBox(self)
        let resolver = configuration.resolver(origin)
        let ticket = resolveOffLoop(origin.host, port: origin.port, policy: configuration.egressPolicy, loop: loop,
                                    resolver: resolver, tenant: tenants.first) { result in
            box.value.lookupEnded(for: id, of: origin)
            box.value.connect(id, origin, result)
        }
        guard let ticket else { return }
        for tenant in tenants.dropFirst() { resolver.share(ticket, with: tenant) }
        lookups[origin, default: []].append(OriginLookup(connection: id, resolver: resolver, ticket: ticket, tenants: tenants))
    }

    private func lookupEnded(for connection: PoolStateMachine.ConnectionID, of origin: HTTP2Origin) {
        guard var pending = lookups[origin] else { return }
        pending.removeAll { $0.connection == connection }
        lookups[origin] = pending.isEmpty ? nil : pending
    }

    private func connect(_ id: PoolStateMachine.ConnectionID, _ origin: HTTP2Origin, _ resolved: Result<[SocketAddress], HTTP2Error>) {
        let fd: Int32
        let remaining = (try? resolved.get().dropFirst()).map(Array.init) ?? []
        switch resolved.flatMap({ startConnect($0[0]) }) {
        case .failure(let error):
            run(machine.connectionClosed(id, error: error, now: .now))
            return
        case .success(let descriptor):
            fd = descriptor
        }
        if var size = configuration.testingSendBufferSize {
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var ssl: OpaquePointer?
        if origin.scheme == .https {
            let context: TLSContext
            switch tls() {
            case .failure(let error):
                _ = Glibc.close(fd)
                run(machine.connectionClosed(id, error: error, now: .now))
                return
            case .success(let c):
                context = c
            }
            switch context.clientSession(fd: fd, host: origin.host, origin: origin) {
            case .failure(let error):
                _ = Glibc.close(fd)
                run(machine.connectionClosed(id, error: error, now: .now))
                return
            case .success(let s):
                ssl = s
            }
        }
        let connection = ClientConnection(core: self, id: id, origin: origin, fd: fd, ssl: ssl, remainingAddresses: remaining)
        live[id] = connection
        connection.begin(timeout: configuration.connectTimeout)
    }

    // MARK: Shutdown

    func shutdown(_ continuation: CheckedContinuation<Void, Never>) {
        shuttingDown = true
        if loopStopped {
            continuation.resume()
            return
        }
        shutdownWaiters.append(continuation)
        if requests.isEmpty { closeEverything() }
    }

    private func closeEverything() {
        loop.core.cancelTimer(sweepTimer)
        loop.core.cancelTimer(queueWaitTimer)
        for id in machine.closeAll() { live[id]?.terminate() }
        let waiters = shutdownWaiters
        shutdownWaiters = []
        for waiter in waiters { waiter.resume() }
    }
}
