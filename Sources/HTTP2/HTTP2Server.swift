import Synchronization
internal import CNghttp2
internal import COpenSSL
internal import Glibc
internal import CPushizoGlibcShims

/// A request as the server's handler sees it: pseudo-headers split out, body complete.
public struct HTTP2ServerRequest: Sendable {
    /// `:method`, `:scheme`, `:authority` (empty when absent) and `:path` (RFC 9113 §8.3.1).
    public var method: String
    public var scheme: String
    public var authority: String
    public var path: String
    /// Regular header fields, lower-case names as received.
    public var headers: [HTTP2Header]
    /// All DATA bytes of the request.
    public var body: [UInt8]
    /// Subject of the verified TLS client certificate in OpenSSL's one-line form (`/C=US/CN=...`), when the
    /// server asked for one (`TLSServerConfiguration.clientCertificateTrustFile`); nil otherwise.
    public var clientCertificateSubject: String?
    /// The TLS client certificate (DER), when the client presented one.
    public var clientCertificateDER: [UInt8]?
    /// Whether that certificate verified against `TLSServerConfiguration.clientCertificateTrustFile`
    /// (`SSL_get_verify_result` is `X509_V_OK`).
    public var clientCertificateVerified = false

    public init(method: String, scheme: String, authority: String, path: String, headers: [HTTP2Header] = [], body: [UInt8] = [],
                clientCertificateSubject: String? = nil) {
        self.method = method
        self.scheme = scheme
        self.authority = authority
        self.path = path
        self.headers = headers
        self.body = body
        self.clientCertificateSubject = clientCertificateSubject
    }

    /// First value of a header, matched case-insensitively; nil when absent.
    public func header(_ name: String) -> String? { headers.firstValue(named: name) }
}

/// What the handler answers.
public struct HTTP2ServerResponse: Sendable {
    /// `:status`, e.g. 200.
    public var status: Int
    /// Header fields (names are lower-cased when sent).
    public var headers: [HTTP2Header]
    /// Body bytes (sent through nghttp2's data provider, honouring flow control).
    public var body: [UInt8]

    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// What `HTTP2Server` reads of one request at most. The server is the provider emulator: push requests are a
/// few kilobytes, so these bounds are far above real traffic and only stop a client from exhausting memory.
public struct HTTP2ServerLimits: Sendable {
    /// Largest request body (bytes); beyond it the request is answered `413 Content Too Large` (RFC 9110
    /// §15.5.14) and the rest of its DATA is dropped.
    public var maximumRequestBodySize: Int = 1 << 20
    /// Largest request header list (bytes), counted as RFC 9113 §6.5.2 does (name + value + 32 per field);
    /// advertised as SETTINGS_MAX_HEADER_LIST_SIZE. Beyond it: `431 Request Header Fields Too Large`
    /// (RFC 6585 §5).
    public var maximumHeaderListSize: Int = 16 * 1024
    /// Most header fields (pseudo-headers included) per request; beyond it: 431 as above.
    public var maximumHeaderCount: Int = 100
    /// Streams one connection may have open at once before further ones are reset with REFUSED_STREAM
    /// (RFC 9113 §8.7), whatever SETTINGS_MAX_CONCURRENT_STREAMS announced: a provider that refuses beyond a
    /// load it never advertised, for tests and benchmarks of the client's refusal handling. nil: no such limit.
    public var refuseStreamsBeyond: Int?
    /// Request-body bytes the server holds at once across all its connections, each from its first DATA frame
    /// until its stream closes, answered or not: a DATA frame that would go beyond it resets its stream with
    /// REFUSED_STREAM (RFC 9113 §8.7: not processed, the client may retry) and drops what the stream held.
    /// Without it each connection could hold SETTINGS_MAX_CONCURRENT_STREAMS times ``maximumRequestBodySize``
    /// (1 GiB by the defaults), since nghttp2 gives flow-control window back as it reads.
    public var maximumHeldBodyBytes: Int = 64 << 20
    /// Connections open at once; a further one is closed as soon as it is accepted, before any TLS. With the
    /// two timeouts below, idle or silent connections cannot hold the server's connections for good.
    public var maximumConnections: Int = 1024
    /// How long a new connection may take to complete its TLS handshake and send its first HTTP/2 frame (the
    /// client preface's SETTINGS, RFC 9113 §3.4) before it is closed.
    public var prefaceTimeout: Duration = .seconds(10)
    /// How long a connection may go without receiving any frame (PINGs count) while no request is being
    /// answered before it is closed with GOAWAY; requests it left unfinished go with it.
    public var idleTimeout: Duration = .seconds(300)
    /// How long a request may take from its HEADERS to the end of its body; past it the stream is reset with
    /// CANCEL and what it held of the body is given back, so unfinished requests cannot keep
    /// ``maximumHeldBodyBytes`` spent.
    public var requestTimeout: Duration = .seconds(30)

    public init() {}
}

/// An HTTP/2 server over TLS (ALPN `h2`) or cleartext h2c with prior knowledge (RFC 9113 §3.3), driven by an
/// `HTTP2EventLoop`. Each complete request stream runs `handler` in its own task and the response goes back to the
/// loop thread for nghttp2, or, for a handler that answers at once (`answeringOnLoop`), runs on the loop thread
/// itself. Used by the provider emulator and the tests.
public final class HTTP2Server: Sendable {
    /// The loop whose thread owns the listener and the connections.
    public let eventLoop: HTTP2EventLoop
    let core: ServerCore

    /// - Parameters:
    ///   - host: IP literal to bind (no DNS), e.g. `127.0.0.1` or `::1`.
    ///   - port: TCP port; 0 picks a free one (see `start()`'s result).
    ///   - tls: certificate + key for TLS, or nil for cleartext h2c.
    ///   - maxConcurrentStreams: sent as SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2) and enforced by nghttp2.
    ///   - limits: read bounds per request; a request beyond them is answered 413 or 431 without reaching `handler`.
    ///   - handler: called once per request, concurrently.
    public init(eventLoop: HTTP2EventLoop, host: String = "127.0.0.1", port: Int = 0, tls: TLSServerConfiguration?,
                maxConcurrentStreams: UInt32 = 1000, limits: HTTP2ServerLimits = .init(),
                handler: @escaping @Sendable (HTTP2ServerRequest) async -> HTTP2ServerResponse) {
        self.eventLoop = eventLoop
        self.core = ServerCore(loop: eventLoop, host: host, port: port, tls: tls,
                               maxConcurrentStreams: maxConcurrentStreams, limits: limits, handler: .inTask(handler))
    }

    /// A server whose handler answers at once, on the loop's thread: no task and no hop between threads per
    /// request (for the provider emulator, both hops cost more than its judging). Parameters as in
    /// ``init(eventLoop:host:port:tls:maxConcurrentStreams:limits:handler:)``.
    /// - Parameter answeringOnLoop: called once per request on the loop thread; it must not block or wait,
    ///   since every connection of the loop waits with it.
    public init(eventLoop: HTTP2EventLoop, host: String = "127.0.0.1", port: Int = 0, tls: TLSServerConfiguration?,
                maxConcurrentStreams: UInt32 = 1000, limits: HTTP2ServerLimits = .init(),
                answeringOnLoop: @escaping @Sendable (HTTP2ServerRequest) -> HTTP2ServerResponse) {
        self.eventLoop = eventLoop
        self.core = ServerCore(loop: eventLoop, host: host, port: port, tls: tls, maxConcurrentStreams: maxConcurrentStreams,
                               limits: limits, handler: .onLoop(answeringOnLoop))
    }

    /// Binds and listens; returns the bound TCP port.
    /// - Throws: `HTTP2Error(.setupFailed)` when the address is not an IP literal, the port is taken, or the
    ///   certificate/key files cannot be loaded; `.shutdown` when the event loop is shut down.
    public func start() throws -> Int {
        let context = try core.tls.map { try TLSContext.server($0) }
        let (fd, port) = try listenSocket(host: core.host, port: core.port)
        let core = self.core
        let started = eventLoop.execute { core.startListening(fd: fd, tls: context) }
        if !started {
            close(fd)
            throw HTTP2Error(.shutdown, "the event loop is shut down")
        }
        return port
    }

    /// Stops accepting, sends GOAWAY (RFC 9113 §6.8) with the last processed stream id on every connection, lets
    /// in-flight streams finish, then closes. Returns when every connection is closed.
    public func shutdown() async {
        let core = self.core
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !eventLoop.execute({ core.shutdown(continuation) }) { continuation.resume() }
        }
    }

    /// Testing hook: reset the next `count` request streams with REFUSED_STREAM (RFC 9113 §8.7).
    func testingRefuseStreams(_ count: Int) {
        let core = self.core
        eventLoop.execute { core.refuseStreams = count }
    }

    /// Streams refused so far because `HTTP2ServerLimits.refuseStreamsBeyond` were open on their connection.
    public var refusedStreamCount: Int { core.refusedStreams.load(ordering: .relaxed) }

    /// Streams reset so far because the server held `HTTP2ServerLimits.maximumHeldBodyBytes` of request bodies.
    public var bodyBudgetRefusalCount: Int { core.bodyBudgetRefusals.load(ordering: .relaxed) }

    /// Connections closed on accept so far because `HTTP2ServerLimits.maximumConnections` were open.
    public var refusedConnectionCount: Int { core.refusedConnections.load(ordering: .relaxed) }

    /// Testing hook: stop acknowledging PINGs on connections accepted from now on.
    func testingIgnorePings() {
        let core = self.core
        eventLoop.execute { core.ignorePings = true }
    }

    /// Testing hook: the next stream with an id above this is not processed; GOAWAY(last-stream-id = this) is
    /// sent instead, as a server going away mid-flight does. Set before `start()`.
    func testingGoAwayAboveStreamID(_ id: Int32) {
        let core = self.core
        eventLoop.execute { core.goAwayAboveStreamID = id }
    }
}

/// Where a server's handler runs: in a task of its own per request, or at once on the loop thread.
enum RequestHandler: Sendable {
    case inTask(@Sendable (HTTP2ServerRequest) async -> HTTP2ServerResponse)
    case onLoop(@Sendable (HTTP2ServerRequest) -> HTTP2ServerResponse)
}

/// The server's loop-side state. `@unchecked Sendable`: configuration is immutable; the rest is used on the loop
/// thread only.
final class ServerCore: LoopHandler, @unchecked Sendable {
    let loop: HTTP2EventLoop
    let host: String
    let port: Int
    let tls: TLSServerConfiguration?
    let maxConcurrentStreams: UInt32
    let limits: HTTP2ServerLimits
    let handler: RequestHandler
    var goAwayAboveStreamID: Int32?
    /// Testing hook: the next `count` request streams are reset with REFUSED_STREAM unprocessed.
    var refuseStreams = 0
    /// Testing hook: do not answer PINGs (a peer that stopped responding).
    var ignorePings = false
    /// Connections accepted so far (read by tests and diagnostics from any thread).
    let acceptedConnections = Atomic<Int>(0)
    /// Connections closed at once because `HTTP2ServerLimits.maximumConnections` were open (any thread).
    let refusedConnections = Atomic<Int>(0)
    /// Streams reset because the server held `HTTP2ServerLimits.maximumHeldBodyBytes` (any thread).
    let bodyBudgetRefusals = Atomic<Int>(0)
    /// Streams reset because their body was unfinished after `HTTP2ServerLimits.requestTimeout` (any thread).
    let lateRequestResets = Atomic<Int>(0)
    /// Streams reset by `HTTP2ServerLimits.refuseStreamsBeyond` so far (any thread).
    let refusedStreams = Atomic<Int>(0)
    private var listenFD: Int32 = -1
    private var context: TLSContext?
    private var connections: [ObjectIdentifier: ServerConnection] = [:]
    /// Request-body bytes of every connection's open streams (`HTTP2ServerLimits.maximumHeldBodyBytes`).
    var heldBodyBytes = 0
    /// Connections open now (loop thread only).
    var openConnectionCount: Int { connections.count }
    /// A descriptor kept open to give back when accept fails for lack of descriptors (see `handleEvents`).
    private var spareFD: Int32 = -1
    /// Accepted descriptors numbered this high or higher are closed at once: the open-file limit
    /// (`RLIMIT_NOFILE`, read when listening starts) less ``reservedDescriptors``.
    private var descriptorCeiling = Int32.max
    /// Descriptors below the open-file limit that accepted connections never take.
    static let reservedDescriptors: Int32 = 32
    private var shuttingDown = false
    private var shutdownWaiters: [CheckedContinuation<Void, Never>] = []

    init(loop: HTTP2EventLoop, host: String, port: Int, tls: TLSServerConfiguration?, maxConcurrentStreams: UInt32,
         limits: HTTP2ServerLimits, handler: RequestHandler) {
        self.loop = loop
        self.host = host
        self.port = port
        self.tls = tls
        self.maxConcurrentStreams = maxConcurrentStreams
        self.limits = limits
        self.handler = handler
    }

    func startListening(fd: Int32, tls: TLSContext?) {
        context = tls
        if spareFD < 0 { spareFD = open("/dev/null", O_RDONLY | O_CLOEXEC) }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int32.max) {
            descriptorCeiling = Int32(limit.rlim_cur) - Self.reservedDescriptors
        }
        guard !shuttingDown, loop.core.register(fd, self, events: PZ_EPOLLIN) else {
            close(fd)
            return
        }
        listenFD = fd
    }

    func handleEvents(_ events: UInt32) {
        // Accept a bounded batch per wake-up; level-triggered epoll reports the rest.
        for _ in 0..<64 {
            let fd = pz_accept_nonblocking(listenFD)
            if fd < 0 {
                // Out of descriptors: the pending connection would stay queued and level-triggered epoll would
                // report it again at once, a spinning loop. Give back the spare descriptor, accept it and close
                // it (nginx's and libev's way), then take the spare again.
                if errno == EMFILE || errno == ENFILE, spareFD >= 0 {
                    Glibc.close(spareFD)
                    let refused = pz_accept_nonblocking(listenFD)
                    if refused >= 0 {
                        refusedConnections.add(1, ordering: .relaxed)
                        Glibc.close(refused)
                    }
                    spareFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
                    continue
                }
                return
            }
            // Descriptors are numbered lowest free first, so a number this high means the process is close to its
            // limit: the last ones stay for the runtime (libdispatch traps when it cannot create its own
            // descriptors) and for the connections already open.
            if connections.count >= limits.maximumConnections || fd >= descriptorCeiling {
                refusedConnections.add(1, ordering: .relaxed)
                close(fd)
                continue
            }
            setNoDelay(fd)
            acceptedConnections.add(1, ordering: .relaxed)
            var ssl: OpaquePointer?
            if let context {
                guard let s = SSL_new(context.ctx) else {
                    close(fd)
                    continue
                }
                guard SSL_set_fd(s, fd) == 1 else {
                    SSL_free(s)
                    close(fd)
                    continue
                }
                SSL_set_accept_state(s)
                ssl = s
            }
            let connection = ServerConnection(server: self, fd: fd, ssl: ssl)
            connections[ObjectIdentifier(connection)] = connection
            connection.start()
        }
    }

    func loopStopping() {
        stopListening()
        for waiter in shutdownWaiters { waiter.resume() }
        shutdownWaiters = []
    }

    private func stopListening() {
        if listenFD >= 0 {
            loop.core.unregister(listenFD)
            close(listenFD)
            listenFD = -1
        }
        if spareFD >= 0 {
            close(spareFD)
            spareFD = -1
        }
    }

    func connectionClosed(_ connection: ServerConnection) {
        connections[ObjectIdentifier(connection)] = nil
        resumeWaitersIfDone()
    }

    private func resumeWaitersIfDone() {
        if shuttingDown && connections.isEmpty {
            let waiters = shutdownWaiters
            shutdownWaiters = []
            for waiter in waiters { waiter.resume() }
        }
    }

    func shutdown(_ continuation: CheckedContinuation<Void, Never>) {
        shuttingDown = true
        stopListening()
        shutdownWaiters.append(continuation)
        resumeWaitersIfDone()
        for connection in Array(connections.values) { connection.goAway() }
    }
}

/// The server side of one connection. `@unchecked Sendable` as its base class: loop thread only; handler tasks
/// get back to it through `loop.execute`.
final class ServerConnection: H2Connection, @unchecked Sendable {
    final class Stream: H2Stream {
        var method = "", scheme = "", authority = "", path = ""
        var headers: [HTTP2Header] = []
        var body: [UInt8] = []
        var dispatched = false
        var headerListSize = 0
        var headerCount = 0
        /// 413 or 431 once the request went beyond `HTTP2ServerLimits`: nothing more is kept, the handler never runs.
        var rejection: Int?
        /// Reset with REFUSED_STREAM: the server's body budget was spent. Nothing more is kept.
        var refused = false
        /// Body bytes counted against the server's budget until the stream closes.
        var heldBytes = 0
        /// When its HEADERS began (`HTTP2ServerLimits.requestTimeout`).
        let openedAt = ContinuousClock.now
    }

    private let server: ServerCore
    /// Open request streams, by id: their owner (each is also attached as nghttp2's stream user data).
    private var streams: [Int32: Stream] = [:]
    private var handlersRunning = 0
    private var goingAway = false
    private var clientCertificateSubject: String?
    private var clientCertificateDER: [UInt8]?
    private var clientCertificateVerified = false
    /// When the last frame arrived; nil until the first (`HTTP2ServerLimits.prefaceTimeout`, `idleTimeout`).
    private var lastFrameAt: ContinuousClock.Instant?
    private let acceptedAt = ContinuousClock.now
    private var timeoutTimer: LoopTimerID?

    init(server: ServerCore, fd: Int32, ssl: OpaquePointer?) {
        self.server = server
        super.init(loop: server.loop.core, fd: fd, ssl: ssl, connecting: false)
    }

    override func start() {
        super.start()
        if state != .closed { scheduleTimeoutCheck(after: min(server.limits.prefaceTimeout, checkInterval)) }
    }

    /// Closes a connection that sent no frame within the preface timeout, or none for the idle timeout while no
    /// request is being answered, and resets requests whose body is not complete within the request timeout;
    /// then looks again.
    private func scheduleTimeoutCheck(after delay: Duration) {
        timeoutTimer = loop.schedule(after: delay) { [weak self] in
            guard let self, self.state != .closed else { return }
            self.timeoutTimer = nil
            self.checkTimeouts()
        }
    }

    private func checkTimeouts() {
        let limits = server.limits
        let now = ContinuousClock.now
        guard let last = lastFrameAt else {
            if now - acceptedAt >= limits.prefaceTimeout {
                close(HTTP2Error(.connectFailed, "no HTTP/2 preface within \(limits.prefaceTimeout)"))
            } else {
                scheduleTimeoutCheck(after: min(limits.prefaceTimeout - (now - acceptedAt), checkInterval))
            }
            return
        }
        let idleFor = now - last
        if idleFor >= limits.idleTimeout && handlersRunning == 0 {
            goAway()
            close(HTTP2Error(.connectFailed, "idle for \(limits.idleTimeout)"))
            return
        }
        if let session {
            var reset = false
            for (streamID, stream) in streams
            where !stream.dispatched && !stream.refused && now - stream.openedAt >= limits.requestTimeout {
                stream.refused = true
                release(stream)
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_CANCEL.rawValue)
                server.lateRequestResets.add(1, ordering: .relaxed)
                reset = true
            }
            if reset { scheduleFlush() }
        }
        scheduleTimeoutCheck(after: max(.milliseconds(100), min(limits.idleTimeout - idleFor, checkInterval)))
    }

    /// How often unfinished requests are looked for: half the request timeout.
    private var checkInterval: Duration { max(.milliseconds(100), server.limits.requestTimeout / 2) }

    override func tlsEstablished() -> HTTP2Error? {
        if let ssl, let certificate = SSL_get0_peer_certificate(ssl) {
            var buffer = [CChar](repeating: 0, count: 1024)
            if X509_NAME_oneline(X509_get_subject_name(certificate), &buffer, Int32(buffer.count)) != nil {
                clientCertificateSubject = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
            let length = i2d_X509(certificate, nil)
            if length > 0 {
                var der = [UInt8](repeating: 0, count: Int(length))
                _ = der.withUnsafeMutableBufferPointer { buffer in
                    var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
                    return i2d_X509(certificate, &cursor)
                }
                clientCertificateDER = der
            }
            clientCertificateVerified = SSL_get_verify_result(ssl) == X509_V_OK
        }
        return nil
    }

    override func makeSession(callbacks: OpaquePointer) -> Bool {
        var session: OpaquePointer?
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        if server.ignorePings { nghttp2_option_set_no_auto_ping_ack(option, 1) }
        guard nghttp2_session_server_new2(&session, callbacks, userData, option) == 0, let session else { return false }
        self.session = session
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: server.maxConcurrentStreams),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue),
                                   value: UInt32(clamping: server.limits.maximumHeaderListSize)),
        ]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 << 20)
        return true
    }

    override func onBeginHeaders(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        guard frame.frameType == NGHTTP2_HEADERS.rawValue,
              frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
        if let limit = server.goAwayAboveStreamID, frame.streamID > limit, let session {
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), limit, NGHTTP2_NO_ERROR.rawValue, nil, 0)
            server.goAwayAboveStreamID = nil
            return 0
        }
        if server.refuseStreams > 0, let session {
            server.refuseStreams -= 1
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), frame.streamID, NGHTTP2_REFUSED_STREAM.rawValue)
            return 0
        }
        if let beyond = server.limits.refuseStreamsBeyond, streams.count >= beyond, let session {
            server.refusedStreams.add(1, ordering: .relaxed)
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), frame.streamID, NGHTTP2_REFUSED_STREAM.rawValue)
            return 0
        }
        let stream = Stream()
        streams[frame.streamID] = stream
        attach(stream, to: frame.streamID)
        return 0
    }

    /// The open request stream `streamID`, or nil.
    private func stream(_ streamID: Int32) -> Stream? { attachedStream(streamID, as: Stream.self) }

    override func onHeader(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Int32 {
        guard let stream = stream(frame.streamID), stream.rejection == nil else { return 0 }
        stream.headerListSize += name.count + value.count + 32
        stream.headerCount += 1
        if stream.headerListSize > server.limits.maximumHeaderListSize || stream.headerCount > server.limits.maximumHeaderCount {
            // Answered once the HEADERS frame is complete (`onFrameReceived`).
            stream.rejection = 431
            stream.headers = []
            return 0
        }
        let value = value.text
        switch name.text {
        case ":method": stream.method = value
        case ":scheme": stream.scheme = value
        case ":authority": stream.authority = value
        case ":path": stream.path = value
        case let name: stream.headers.append(HTTP2Header(name, value))
        }
        return 0
    }

    override func onDataChunk(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) -> Int32 {
        guard let stream = stream(streamID), stream.rejection == nil, !stream.refused, !stream.dispatched else { return 0 }
        if stream.body.count + data.count > server.limits.maximumRequestBodySize {
            stream.rejection = 413
            release(stream)
            reject(streamID: streamID, stream)
            return 0
        }
        if server.heldBodyBytes + data.count > server.limits.maximumHeldBodyBytes, let session {
            stream.refused = true
            release(stream)
            server.bodyBudgetRefusals.add(1, ordering: .relaxed)
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_REFUSED_STREAM.rawValue)
            scheduleFlush()
            return 0
        }
        stream.body.append(contentsOf: data)
        stream.heldBytes += data.count
        server.heldBodyBytes += data.count
        return 0
    }

    /// Drops what `stream` held of its body and gives it back to the server's budget.
    private func release(_ stream: Stream) {
        server.heldBodyBytes -= stream.heldBytes
        stream.heldBytes = 0
        stream.body = []
    }

    /// Answers a request beyond `HTTP2ServerLimits` without running the handler. The rest of its body, if any, is
    /// dropped as it arrives.
    private func reject(streamID: Int32, _ stream: Stream) {
        guard !stream.dispatched, let status = stream.rejection, let session else { return }
        stream.dispatched = true
        _ = submit(stream, body: [], fields: { $0.append(":status", decimal: status) }) { nva, count, provider in
            nghttp2_submit_response(session, streamID, nva, count, provider)
        }
        scheduleFlush()
    }

    override func onFrameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        lastFrameAt = .now
        let type = frame.frameType
        if type == NGHTTP2_HEADERS.rawValue, let stream = stream(frame.streamID), stream.rejection != nil {
            reject(streamID: frame.streamID, stream)
            return 0
        }
        guard type == NGHTTP2_HEADERS.rawValue || type == NGHTTP2_DATA.rawValue, frame.has(NGHTTP2_FLAG_END_STREAM),
              let stream = stream(frame.streamID), !stream.dispatched, !stream.refused else { return 0 }
        stream.dispatched = true
        handlersRunning += 1
        var request = HTTP2ServerRequest(method: stream.method, scheme: stream.scheme, authority: stream.authority,
                                         path: stream.path, headers: stream.headers, body: stream.body,
                                         clientCertificateSubject: clientCertificateSubject)
        request.clientCertificateDER = clientCertificateDER
        request.clientCertificateVerified = clientCertificateVerified
        let streamID = frame.streamID
        switch server.handler {
        case .onLoop(let answer):
            let response = answer(request)
            // Submitted once nghttp2's callback has returned, still on this thread.
            loop.runSoon { [self] in respond(streamID: streamID, response) }
        case .inTask(let handler):
            let loop = server.loop
            Task.detached { [self] in
                let response = await handler(request)
                loop.execute { self.respond(streamID: streamID, response) }
            }
        }
        return 0
    }

    override func onStreamClosed(streamID: Int32, errorCode: UInt32) -> Int32 {
        if let stream = streams.removeValue(forKey: streamID) { release(stream) }
        return 0
    }

    private func respond(streamID: Int32, _ response: HTTP2ServerResponse) {
        handlersRunning -= 1
        guard state == .open, let session, let stream = streams[streamID] else {
            checkIdle()
            return
        }
        let rc = submit(stream, body: response.body, fields: { fields in
            fields.append(":status", decimal: response.status)
            for header in response.headers { fields.append(header.name.lowercasedFieldName, header.value) }
            if !response.body.isEmpty, !fields.contains(name: "content-length") {
                fields.append("content-length", decimal: response.body.count)
            }
        }) { nva, count, provider in
            nghttp2_submit_response(session, streamID, nva, count, provider)
        }
        if rc != 0 {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_INTERNAL_ERROR.rawValue)
        }
        scheduleFlush()
    }

    /// Graceful GOAWAY: streams up to the last one seen are served; nghttp2 ignores newer ones.
    func goAway() {
        goingAway = true
        guard state == .open, let session else { return }
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session),
                              NGHTTP2_NO_ERROR.rawValue, nil, 0)
        flush()
    }

    private func checkIdle() {
        if state == .open { flush() }
    }

    override func shouldCloseWhenIdle() -> Bool {
        goingAway && handlersRunning == 0 && streams.isEmpty
    }

    override func didClose(_ error: HTTP2Error?) {
        loop.cancelTimer(timeoutTimer)
        timeoutTimer = nil
        // nghttp2 keeps the session (and these streams) until deinit: leave it no pointer to a released object.
        for (streamID, stream) in streams {
            detach(streamID)
            release(stream)
        }
        streams = [:]
        server.connectionClosed(self)
    }
}
