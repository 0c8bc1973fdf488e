import Synchronization
internal import COpenSSL
internal import CPushizoShims
internal import Glibc

/// An HTTP/2 client with a connection pool per origin (RFC 9113). Requests share connections up to the peer's
/// SETTINGS_MAX_CONCURRENT_STREAMS; the rest wait in the origin's queue; up to
/// `maximumConnectionsPerOrigin` connections are opened. GOAWAY and REFUSED_STREAM are handled by resending
/// unprocessed requests on a fresh connection (RFC 9113 §6.8, §8.7).
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
    ///   `.streamReset`, `.requestTimeout`, `.protocolError`, `.shutdown`); `.invalidRequest` at once, before
    ///   anything is queued, for a header field HTTP/2 forbids (RFC 9113 §8.2.1, §8.2.2); `CancellationError` when
    ///   the calling task is cancelled (the stream is reset with CANCEL). Once `send` has thrown, the request is
    ///   never sent afterwards (it is dropped from the queue, or its stream reset before its HEADERS leave).
    public func send(_ request: HTTP2Request, to origin: HTTP2Origin) async throws -> HTTP2Response {
        if let invalid = request.validationError() { throw invalid }
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let core = self.core
        let loop = self.eventLoop
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTP2Response, any Error>) in
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
        let invalid = requests.map { $0.validationError() }
        if invalid.contains(where: { $0 != nil }) {
            // Send the valid ones as a batch and put the failures back in their places.
            let valid = zip(requests, invalid).compactMap { $1 == nil ? $0 : nil }
            var sent = await send(valid, to: origin).makeIterator()
            return invalid.map { error in error.map { .failure($0) } ?? sent.next()! }
        }
        let first = nextID.wrappingAdd(UInt64(requests.count), ordering: .relaxed).oldValue
        let ids = first..<(first + UInt64(requests.count))
        let core = self.core
        let loop = self.eventLoop
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[Result<HTTP2Response, any Error>], Never>) in
                let accepted = loop.execute { core.enqueueBatch(firstID: first, requests, origin, continuation) }
                if !accepted {
                    continuation.resume(returning: requests.map { _ in .failure(HTTP2Error(.shutdown, "the event loop is shut down")) })
                }
            }
        } onCancel: {
            loop.execute { for id in ids { core.cancel(id: id) } }
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

/// The client's loop-side state. `@unchecked Sendable`: created on any thread, then used only on the loop thread.
final class ClientCore: @unchecked Sendable {
    let loop: HTTP2EventLoop
    let tlsConfiguration: TLSClientConfiguration
    let configuration: HTTP2ClientConfiguration
    private var tlsContext: Result<TLSContext, HTTP2Error>?
    private var pools: [HTTP2Origin: OriginPool] = [:]
    var requests: [UInt64: PendingRequest] = [:]
    private var cancelledEarly: Set<UInt64> = []
    private var shuttingDown = false
    private var loopStopped = false
    private var shutdownWaiters: [CheckedContinuation<Void, Never>] = []

    init(loop: HTTP2EventLoop, tls: TLSClientConfiguration, configuration: HTTP2ClientConfiguration) {
        self.loop = loop
        self.tlsConfiguration = tls
        self.configuration = configuration
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

    func enqueue(id: UInt64, _ request: HTTP2Request, _ origin: HTTP2Origin, _ continuation: CheckedContinuation<HTTP2Response, any Error>) {
        enqueue(id: id, request, origin) { continuation.resume(with: $0) }
    }

    /// Enqueues every request; `continuation` gets all results once the last one finishes.
    func enqueueBatch(firstID: UInt64, _ batch: [HTTP2Request], _ origin: HTTP2Origin,
                      _ continuation: CheckedContinuation<[Result<HTTP2Response, any Error>], Never>) {
        final class Collector {
            var results: [Result<HTTP2Response, any Error>]
            var remaining: Int
            init(count: Int) {
                results = Array(repeating: .failure(CancellationError()), count: count)
                remaining = count
            }
        }
        let collector = Collector(count: batch.count)
        for (index, request) in batch.enumerated() {
            enqueue(id: firstID + UInt64(index), request, origin) { result in
                collector.results[index] = result
                collector.remaining -= 1
                if collector.remaining == 0 { continuation.resume(returning: collector.results) }
            }
        }
    }

    private func enqueue(id: UInt64, _ request: HTTP2Request, _ origin: HTTP2Origin,
                         completion: @escaping (Result<HTTP2Response, any Error>) -> Void) {
        if cancelledEarly.remove(id) != nil {
            completion(.failure(CancellationError()))
            return
        }
        if shuttingDown || loopStopped {
            completion(.failure(HTTP2Error(.shutdown, "the HTTP/2 client is shut down")))
            return
        }
        let pending = PendingRequest(id: id, request: request, origin: origin, completion: completion)
        requests[id] = pending
        let timeout = request.timeout ?? configuration.requestTimeout
        pending.timer = loop.core.schedule(after: timeout) { [weak self, weak pending] in
            guard let self, let pending else { return }
            self.abort(pending, HTTP2Error(.requestTimeout, "no response from \(origin) within \(timeout)",
                                           // Still queued, or its HEADERS still inside nghttp2 (the reset
                                           // below withdraws them): the peer never saw it.
                                           isSafeToRetry: !pending.headersSent))
        }
        pool(for: origin).enqueue(pending)
    }

    func cancel(id: UInt64) {
        guard let pending = requests[id] else {
            cancelledEarly.insert(id)
            return
        }
        abort(pending, CancellationError())
    }

    /// Ends a request early: resets its stream if one is open.
    private func abort(_ pending: PendingRequest, _ error: any Error) {
        // Finish first: resetting the stream runs nghttp2's close callback, which must find the request done.
        let connection = pending.connection
        finish(pending, .failure(error))
        connection?.cancelStream(pending.streamID)
    }

    func finish(_ pending: PendingRequest, _ result: Result<HTTP2Response, any Error>) {
        loop.core.cancelTimer(pending.timer)
        requests[pending.id] = nil
        pending.finish(result)
        // Answered while waiting (timeout, cancellation): it must never be dispatched now; the queue skips
        // answered entries and drops them in bulk (their bodies are released).
        if pending.isQueued { pools[pending.origin]?.queuedRequestFinished() }
        if shuttingDown && requests.isEmpty {
            // Not from inside an nghttp2 callback (this may run in one): closing flushes the sessions.
            loop.core.runSoon { [self] in
                if shuttingDown && requests.isEmpty { closeEverything() }
            }
        }
    }

    func pool(for origin: HTTP2Origin) -> OriginPool {
        if let pool = pools[origin] { return pool }
        let pool = OriginPool(origin: origin, core: self)
        pools[origin] = pool
        return pool
    }

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
        for pool in pools.values { pool.closeAll() }
        pools = [:]
        let waiters = shutdownWaiters
        shutdownWaiters = []
        for waiter in waiters { waiter.resume() }
    }
}

/// Connections and waiting requests for one origin (loop thread only).
final class OriginPool {
    let origin: HTTP2Origin
    let core: ClientCore
    var loop: HTTP2EventLoop { core.loop }
    var configuration: HTTP2ClientConfiguration { core.configuration }
    private var connections: [ClientConnection] = []
    private var queue: [PendingRequest] = []
    private var queueHead = 0
    private var resolving = false
    private var consecutiveFailures = 0
    private var backoffUntil: ContinuousClock.Instant?
    private var backoffTimer: LoopTimerID?
    private var dispatchScheduled = false
    /// Entries in `queue[queueHead...]` whose caller was already answered.
    private var finishedInQueue = 0

    init(origin: HTTP2Origin, core: ClientCore) {
        self.origin = origin
        self.core = core
    }

    func enqueue(_ request: PendingRequest) {
        request.isQueued = true
        queue.append(request)
        dispatch()
    }

    /// Puts an unprocessed request back at the front of the queue, or fails it past the retry limit.
    func retry(_ request: PendingRequest, reason: HTTP2Error) {
        request.retries += 1
        request.headersSent = false
        if request.retries > configuration.maximumRetries {
            complete(request, .failure(HTTP2Error(reason.code, "\(reason.message); gave up after \(configuration.maximumRetries) retries", isSafeToRetry: true)))
            return
        }
        request.isQueued = true
        if queueHead > 0 {
            queueHead -= 1
            queue[queueHead] = request
        } else {
            queue.insert(request, at: 0)
        }
        scheduleDispatch()
    }

    func complete(_ request: PendingRequest, _ result: Result<HTTP2Response, any Error>) {
        core.finish(request, result)
    }

    /// Dispatches after the current nghttp2 callback has returned.
    func scheduleDispatch() {
        guard !dispatchScheduled else { return }
        dispatchScheduled = true
        loop.core.runSoon { [weak self] in
            guard let self else { return }
            self.dispatchScheduled = false
            self.dispatch()
        }
    }

    private func popWaiting() -> PendingRequest? {
        while queueHead < queue.count {
            let request = queue[queueHead]
            queueHead += 1
            request.isQueued = false
            if !request.isFinished { return request }
            finishedInQueue -= 1
        }
        return nil
    }

    private var hasWaiting: Bool {
        while queueHead < queue.count {
            if !queue[queueHead].isFinished { return true }
            queue[queueHead].isQueued = false
            finishedInQueue -= 1
            queueHead += 1
        }
        return false
    }

    /// A waiting request was answered. Once answered entries are many and at least half the queue, they are
    /// removed (a provider outage can time out thousands of queued requests at once).
    func queuedRequestFinished() {
        finishedInQueue += 1
        guard finishedInQueue >= 32, finishedInQueue * 2 >= queue.count - queueHead else { return }
        var kept: [PendingRequest] = []
        kept.reserveCapacity(queue.count - queueHead - finishedInQueue)
        for request in queue[queueHead...] {
            if request.isFinished { request.isQueued = false } else { kept.append(request) }
        }
        queue = kept
        queueHead = 0
        finishedInQueue = 0
    }

    /// Entries still stored in the queue, answered ones included (testing and diagnostics).
    var storedCount: Int { queue.count - queueHead }

    /// Assigns waiting requests to connections with free stream slots, opening a connection when none has any.
    func dispatch() {
        while hasWaiting {
            var best: ClientConnection?
            var bestSlots = 0
            for connection in connections {
                let slots = connection.freeStreamSlots
                if slots > bestSlots { best = connection; bestSlots = slots }
            }
            guard let connection = best else { break }
            for _ in 0..<bestSlots {
                guard let request = popWaiting() else { break }
                connection.startStream(request)
            }
        }
        if queueHead > 64 && queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
        guard hasWaiting else { return }
        let usable = connections.filter { !$0.goingAway }
        if usable.contains(where: { $0.isConnecting }) || resolving { return }
        guard usable.count < configuration.maximumConnectionsPerOrigin else { return }
        if let until = backoffUntil, until > .now {
            if backoffTimer == nil {
                backoffTimer = loop.core.schedule(after: until - .now) { [weak self] in
                    self?.backoffTimer = nil
                    self?.dispatch()
                }
            }
            return
        }
        openConnection()
    }

    private func openConnection() {
        resolving = true
        let origin = self.origin
        // The completion runs on the loop thread (resolveOffLoop hops back), where the pool lives.
        let box = UncheckedBox(self)
        resolveOffLoop(origin.host, port: origin.port, loop: loop) { result in
            box.value.connect(result)
        }
    }

    private func connect(_ resolved: Result<[SocketAddress], HTTP2Error>) {
        resolving = false
        let fd: Int32
        let remaining = (try? resolved.get().dropFirst()).map(Array.init) ?? []
        switch resolved.flatMap({ startConnect($0[0]) }) {
        case .failure(let error):
            connectFailed(error)
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
            switch core.tls() {
            case .failure(let error):
                _ = Glibc.close(fd)
                connectFailed(error)
                return
            case .success(let c):
                context = c
            }
            switch context.clientSession(fd: fd, host: origin.host, origin: origin) {
            case .failure(let error):
                _ = Glibc.close(fd)
                connectFailed(error)
                return
            case .success(let s):
                ssl = s
            }
        }
        let connection = ClientConnection(pool: self, fd: fd, ssl: ssl, remainingAddresses: remaining)
        connections.append(connection)
        connection.begin(timeout: configuration.connectTimeout)
    }

    private func connectFailed(_ error: HTTP2Error) {
        consecutiveFailures += 1
        let initial = configuration.reconnectBackoffInitial
        var delay = initial * (1 << min(consecutiveFailures - 1, 20))
        if delay > configuration.reconnectBackoffMaximum { delay = configuration.reconnectBackoffMaximum }
        backoffUntil = .now + delay
        // Without any live connection the waiting requests would only wait for the next attempt: fail them now
        // with the connect error so callers can decide (they were never sent, so retrying is safe).
        if !connections.contains(where: { $0.isReady && !$0.goingAway }) {
            // Requests only go out after the server's SETTINGS, so none of these reached the server.
            let failure = HTTP2Error(error.code, error.message, isSafeToRetry: true)
            while let request = popWaiting() {
                complete(request, .failure(failure))
            }
        }
        scheduleDispatch()
    }

    func connectionReady(_ connection: ClientConnection) {
        consecutiveFailures = 0
        backoffUntil = nil
        dispatch()
    }

    func connectionClosed(_ connection: ClientConnection, wasReady: Bool, error: HTTP2Error) {
        connections.removeAll { $0 === connection }
        if !wasReady && error.code == .connectFailed && !connection.remainingAddresses.isEmpty && hasWaiting {
            // TCP connect to one address failed: try the origin's next address before backing off.
            resolving = true
            connect(.success(connection.remainingAddresses))
        } else if !wasReady {
            connectFailed(error)
        } else {
            scheduleDispatch()
        }
    }

    func closeAll() {
        loop.core.cancelTimer(backoffTimer)
        for connection in connections { connection.terminate() }
        connections = []
    }
}

/// Carries a loop-confined reference through a `@Sendable` closure that runs on the same loop thread.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
