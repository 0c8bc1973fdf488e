import Synchronization
internal import COpenSSL
internal import Glibc

/// An HTTP/2 client with a connection pool per origin (RFC 9113). Requests share connections up to the peer's
/// SETTINGS_MAX_CONCURRENT_STREAMS and `maximumInFlightPerOrigin`; the rest wait in the origin's queue, served
/// tenant by tenant in turn (`HTTP2Request.tenant`, each within its share of the origin's streams); up to
/// `maximumConnectionsPerOrigin` connections are opened per origin and `maximumConnections` in all; idle ones
/// close after `idleTimeout` (decisions: `PoolStateMachine`). GOAWAY and REFUSED_STREAM are handled by resending
/// unprocessed requests on a fresh connection (RFC 9113 §6.8, §8.7). Responses are read within the
/// configuration's body and header bounds.
///
/// All connection state lives on `eventLoop`'s thread; `send` only hands work to it and awaits a continuation.
public final class HTTP2Client: Sendable {
    /// The loop whose thread owns this client's connections.
    public let eventLoop: HTTP2EventLoop
    let core: ClientCore
    private let nextID = Atomic<UInt64>(1)

    /// Creates the client; connections open lazily on the first request to each origin. Bad TLS settings (an
    /// unreadable PEM file) surface as `.tlsHandshakeFailed` from `send`.
    public init(eventLoop: HTTP2EventLoop, tls: TLSClientConfiguration = .init(), configuration: HTTP2ClientConfiguration = .init()) {
        self.eventLoop = eventLoop
        self.core = ClientCore(loop: eventLoop, tls: tls, configuration: configuration)
        let core = self.core
        eventLoop.execute { core.attach() }
    }

    /// Sends `request` to `origin` over a pooled connection and returns the complete response (any status).
    /// - Throws: `HTTP2Error` (`.connectFailed`, `.connectTimeout`, `.tlsHandshakeFailed`,
    ///   `.certificateVerificationFailed`, `.alpnNotNegotiated`, `.connectionClosed`, `.goAway`, `.refusedStream`,
    ///   `.streamReset`, `.requestTimeout`, `.protocolError`, `.shutdown`, `.responseTooLarge` past a read bound);
    ///   `.invalidRequest` at once, before
    ///   anything is queued, for a header field HTTP/2 forbids (RFC 9113 §8.2.1, §8.2.2); `CancellationError` when
    ///   the calling task is cancelled (the stream is reset with CANCEL; a task cancelled just before handing the
    ///   request over that then stalls for over a second before handing it over is answered as if never
    ///   cancelled). Once `send` has thrown, the request is never sent afterwards (it is dropped from the
    ///   queue, or its stream reset before its HEADERS leave).
    public func send(_ request: HTTP2Request, to origin: HTTP2Origin) async throws -> HTTP2Response {
        if let invalid = request.validationError() { throw invalid }
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let core = self.core
        let loop = self.eventLoop
        return try await withTaskCancellationHandler {
            // Unchecked: the request resumes it exactly once (`PendingRequest.finish`), or the refusal below does;
            // a checked one costs an allocation per request.
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<HTTP2Response, any Error>) in
                let accepted = loop.execute { core.enqueue(id: id, request, origin, continuation) }
                if !accepted {
                    continuation.resume(throwing: HTTP2Error(.shutdown, "the event loop is shut down"))
                }
            }
        } onCancel: {
            loop.execute { core.cancel(id: id) }
        }
    }

    /// Sends several requests to `origin` with one hand-off to the event loop, and returns when all are done:
    /// cheaper than one `send` per request when a caller already holds a batch (fewer thread wake-ups).
    /// Result `i` belongs to `requests[i]`; failures are `HTTP2Error` as for `send` (an invalid request fails
    /// alone with `.invalidRequest`), or `CancellationError` when the calling task is cancelled.
    public func send(_ requests: [HTTP2Request], to origin: HTTP2Origin) async -> [Result<HTTP2Response, any Error>] {
        if requests.isEmpty { return [] }
        final class Collector: @unchecked Sendable {
            // Written by `submit`'s `answers`, on the loop thread (or the caller's, for invalid requests, before any
            // is queued), under the lock below.
            var results: [Result<HTTP2Response, any Error>]
            var remaining: Int
            var continuation: CheckedContinuation<[Result<HTTP2Response, any Error>], Never>?
            init(count: Int) {
                results = Array(repeating: .failure(CancellationError()), count: count)
                remaining = count
            }
        }
        let collector = Collector(count: requests.count)
        let lock = Mutex(())
        let cancellation = HTTP2SubmissionCancellation()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                collector.continuation = continuation
                cancellation.add(submit(requests, to: origin) { answers in
                    let done = lock.withLock { _ -> Bool in
                        for answer in answers { collector.results[answer.index] = answer.result }
                        collector.remaining -= answers.count
                        return collector.remaining == 0
                    }
                    if done { collector.continuation?.resume(returning: collector.results) }
                })
            }
        } onCancel: {
            cancellation.cancel()
        }
    }

    /// Hands several requests to `origin`'s pool in one hand-off to the event loop and reports their results as
    /// they arrive, so one slow answer holds back none of the others (the worker judges and completes each
    /// delivery the moment its answer is in). Results are reported in bursts: every request of the submission
    /// that finished in one turn of the event loop (the responses of one socket read, say) is reported in one
    /// call at the end of that turn, so a caller that hands them to another thread wakes it once per burst, not
    /// once per response.
    ///
    /// - Parameter answers: called with each burst; every request's result is in exactly one burst, with its
    ///   index in `requests` (failures as for ``send(_:to:)``). Called on the event loop's thread, so it must be
    ///   quick and must not block; requests HTTP/2 refuses to carry (`.invalidRequest`) are reported at once, in
    ///   one call on the caller's thread, before anything is queued.
    /// - Returns: the submission, whose ``HTTP2Submission/cancel()`` abandons every request still pending
    ///   (each then reports `CancellationError`; a stream already open is reset with CANCEL).
    public func submit(
        _ requests: [HTTP2Request], to origin: HTTP2Origin, answers: @escaping @Sendable ([HTTP2Answer]) -> Void
    ) -> HTTP2Submission {
        let first = nextID.wrappingAdd(UInt64(requests.count), ordering: .relaxed).oldValue
        // Labelled as `enqueue` takes them: an unlabelled tuple array would be converted, element by element.
        var valid: [(index: Int, request: HTTP2Request)] = []
        valid.reserveCapacity(requests.count)
        var refused: [HTTP2Answer] = []
        for (index, request) in requests.enumerated() {
            if let invalid = request.validationError(after: valid.last?.request) {
                refused.append(HTTP2Answer(index: index, result: .failure(invalid)))
            } else {
                valid.append((index, request))
            }
        }
        if !refused.isEmpty { answers(refused) }
        let submission = HTTP2Submission(core: core, loop: eventLoop, ids: valid.map { first + UInt64($0.0) })
        if valid.isEmpty { return submission }
        let core = self.core
        let batch = UncheckedBox(valid)
        let accepted = eventLoop.execute {
            core.enqueue(firstID: first, batch.value, origin, burst: AnswerBurst(core: core, deliver: answers))
        }
        if !accepted {
            answers(valid.map { HTTP2Answer(index: $0.0, result: .failure(HTTP2Error(.shutdown, "the event loop is shut down"))) })
        }
        return submission
    }

    /// The pool's figures now, read on the event loop's thread (the caller awaits; nothing blocks). All
    /// zeros once the loop is shut down.
    public func statistics() async -> HTTP2ClientStatistics {
        let core = self.core
        return await withCheckedContinuation { (continuation: CheckedContinuation<HTTP2ClientStatistics, Never>) in
            if !eventLoop.execute({ continuation.resume(returning: core.machine.totals) }) {
                continuation.resume(returning: HTTP2ClientStatistics())
            }
        }
    }

    /// Graceful shutdown: requests already accepted finish (queued ones included), new ones throw `.shutdown`;
    /// then every connection sends GOAWAY(NO_ERROR) and closes. Returns when that is done.
    public func shutdown() async {
        let core = self.core
        let loop = self.eventLoop
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !loop.execute({ core.shutdown(continuation) }) { continuation.resume() }
        }
    }
}

/// One request's result in a burst of ``HTTP2Client/submit(_:to:answers:)``.
public struct HTTP2Answer: Sendable {
    /// The request's index in the submitted array.
    public var index: Int
    public var result: Result<HTTP2Response, any Error>
}

/// The results of one submission that finished in the current turn of the event loop, delivered together at
/// its end. Loop thread only.
final class AnswerBurst: @unchecked Sendable {
    private let core: ClientCore
    private let deliver: @Sendable ([HTTP2Answer]) -> Void
    private var pending: [HTTP2Answer] = []

    init(core: ClientCore, deliver: @escaping @Sendable ([HTTP2Answer]) -> Void) {
        self.core = core
        self.deliver = deliver
    }

    func add(_ answer: HTTP2Answer) {
        // Once the loop has stopped, nothing runs at the end of a turn any more: deliver at once.
        if core.isLoopStopped {
            deliver([answer])
            return
        }
        if pending.isEmpty {
            // A read brings a dozen answers or so: one allocation instead of growing 1, 2, 4, 8, 16.
            pending.reserveCapacity(16)
            core.loop.core.runSoon { [self] in flush() }
        }
        pending.append(answer)
    }

    private func flush() {
        let answers = pending
        pending = []
        if !answers.isEmpty { deliver(answers) }
    }
}

/// Requests handed over together by ``HTTP2Client/submit(_:to:answers:)``: a handle to abandon those still pending.
public struct HTTP2Submission: Sendable {
    let core: ClientCore
    let loop: HTTP2EventLoop
    let ids: [UInt64]

    /// Abandons every request of the submission still pending: each reports `CancellationError` (a request
    /// already answered is not affected). Returns at once; the work runs on the event loop.
    public func cancel() {
        guard !ids.isEmpty else { return }
        let core = self.core
        let ids = self.ids
        // Queued by `submit` before this can run (the loop runs its work in order), so an id that is not
        // pending has finished: nothing to remember for it.
        loop.execute { for id in ids { core.cancelIfPending(id: id) } }
    }
}

/// Cancels submissions made from a task when that task is cancelled, whether the cancellation comes before or
/// after a submission is made: call ``add(_:)`` with each submission and ``cancel()`` from the task's
/// cancellation handler.
public final class HTTP2SubmissionCancellation: Sendable {
    private let state = Mutex<(cancelled: Bool, submissions: [HTTP2Submission])>((false, []))

    public init() {}

    /// Keeps `submission` to cancel later, or cancels it at once when ``cancel()`` was already called.
    public func add(_ submission: HTTP2Submission) {
        let cancelled = state.withLock { state -> Bool in
            if !state.cancelled { state.submissions.append(submission) }
            return state.cancelled
        }
        if cancelled { submission.cancel() }
    }

    /// Cancels every submission added so far and every one added from now on.
    public func cancel() {
        let submissions = state.withLock { state in
            state.cancelled = true
            defer { state.submissions = [] }
            return state.submissions
        }
        for submission in submissions { submission.cancel() }
    }
}

/// A snapshot of an ``HTTP2Client``'s pool (for metrics).
public struct HTTP2ClientStatistics: Sendable, Equatable {
    /// Connections open or opening (closing ones not counted).
    public var connections = 0
    /// Streams open on those connections (requests sent and not yet answered).
    public var openStreams = 0
    /// Requests waiting in origin queues for a stream or a connection.
    public var waitingRequests = 0

    public init() {}
}

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

/// Carries a loop-confined reference through a `@Sendable` closure that runs on the same loop thread.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
