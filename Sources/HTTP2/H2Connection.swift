internal import CNghttp2
internal import COpenSSL
internal import CPushizoGlibcShims
internal import Glibc

/// One HTTP/2 connection over a non-blocking socket, optionally TLS: the shared part of client and server.
/// Bytes read go through `SSL_read` (or `recv`) into `nghttp2_session_mem_recv`; frames nghttp2 wants to send come
/// from `nghttp2_session_mem_send` into `outbound` and leave through `SSL_write` (or `send`).
///
/// nghttp2 calls back into the subclass through `user_data` (an unretained pointer to `self`, as in
/// swift-nio-http2's former `NGHTTP2Session`); `deinit` frees the session and the `SSL`.
/// `@unchecked Sendable`: every member is used on the owning loop thread only; the type crosses threads only so
/// that work can be handed back to that thread.
class H2Connection: LoopHandler, @unchecked Sendable {
    enum State { case connecting, handshaking, open, closed }

    let loop: LoopCore
    let fd: Int32
    var ssl: OpaquePointer?
    var session: OpaquePointer?
    private(set) var state: State
    private var outbound: [UInt8] = []
    private var outboundOffset = 0
    private var registeredEvents: UInt32 = 0
    private var tlsWantsWrite = false
    /// SSL_write needs to read first (TLS 1.3 key update): wait for EPOLLIN instead of spinning on EPOLLOUT.
    private var tlsWriteWantsRead = false
    private var flushScheduled = false
    /// The fields of the HEADERS being submitted, kept between submissions for its storage.
    private var fieldScratch = HeaderFieldList()
    private static let readBufferSize = 64 * 1024
    /// Frames one header block may span (HEADERS or PUSH_PROMISE plus CONTINUATIONs). nghttp2 before 1.61 reads
    /// an endless header block and decodes it (HPACK state must stay in sync) even after the stream is reset
    /// (CVE-2024-28182); patched builds stop after 8 CONTINUATIONs with a bare protocol error, so this bound
    /// (7 CONTINUATIONs) comes first and names the cause. With 16,384-byte frames that is room for 131 KB of
    /// encoded fields, far above any header list cap in use here.
    static let maximumHeaderBlockFrames = 8
    private var headerBlockFrames = 0
    /// Set by a callback that fails the session (NGHTTP2_ERR_CALLBACK_FAILURE): the error the connection closes with.
    private var callbackFailure: HTTP2Error?
    private static let outboundHighWater = 256 * 1024
    private let readBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: H2Connection.readBufferSize)

    /// `connecting`: `fd` has a connect in progress; otherwise the TCP connection is established.
    init(loop: LoopCore, fd: Int32, ssl: OpaquePointer?, connecting: Bool) {
        self.loop = loop
        self.fd = fd
        self.ssl = ssl
        self.state = connecting ? .connecting : (ssl != nil ? .handshaking : .open)
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        if let ssl { SSL_free(ssl) }
        readBuffer.deallocate()
    }

    // MARK: Subclass hooks (loop thread)

    /// Create `session` (client or server) and submit the initial SETTINGS.
    func makeSession(callbacks: OpaquePointer) -> Bool { fatalError("abstract") }
    /// TLS finished: return an error to abort (the client checks ALPN here).
    func tlsEstablished() -> HTTP2Error? { nil }
    /// Handshake failed with `SSL_ERROR_SSL`; the client maps verification errors.
    func tlsFailed(_ reason: String) -> HTTP2Error { HTTP2Error(.tlsHandshakeFailed, "TLS handshake failed: \(reason)") }
    func sessionStarted() {}
    func onBeginHeaders(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 { 0 }
    /// One decoded header field. Raw bytes, valid during the call only: a subclass over its bounds skips the
    /// field without building strings.
    func onHeader(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Int32 { 0 }
    /// A header block of `streamID` went on for more frames than `maximumHeaderBlockFrames`;
    /// the connection is closed with the returned error after GOAWAY(ENHANCE_YOUR_CALM).
    func headerBlockTooLong(streamID: Int32) -> HTTP2Error {
        HTTP2Error(.protocolError, "a header block went on for more than \(Self.maximumHeaderBlockFrames) frames (HEADERS and CONTINUATION)")
    }
    func onFrameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 { 0 }
    func onDataChunk(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) -> Int32 { 0 }
    func onStreamClosed(streamID: Int32, errorCode: UInt32) -> Int32 { 0 }
    /// nghttp2 has serialized `frame` and hands it out next (from now on its bytes may leave the process).
    /// Returns 0; do not cancel HEADERS here (already HPACK-encoded, RFC 7541 §2.3.2).
    func beforeFrameSend(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 { 0 }
    /// Called once after the socket closed; `error` is nil for an orderly end.
    func didClose(_ error: HTTP2Error?) {}
    /// Checked after each flush: return true to close now (e.g. GOAWAY done and nothing in flight).
    func shouldCloseWhenIdle() -> Bool { false }

    // MARK: Start

    /// Registers with the loop and starts (connect completion, handshake or session, depending on state).
    func start() {
        let events: UInt32 = state == .connecting ? PZ_EPOLLOUT : PZ_EPOLLIN
        guard loop.register(fd, self, events: events) else {
            Glibc.close(fd)
            state = .closed
            didClose(HTTP2Error(.connectFailed, "epoll_ctl failed: \(errnoText())", isSafeToRetry: true))
            return
        }
        registeredEvents = events
        switch state {
        case .handshaking: continueHandshake()
        case .open: startSession()
        default: break
        }
    }

    // MARK: Events

    func handleEvents(_ events: UInt32) {
        switch state {
        case .connecting:
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if error != 0 {
                close(HTTP2Error(.connectFailed, "connect failed: \(errnoText(error))", isSafeToRetry: true))
                return
            }
            if ssl != nil {
                state = .handshaking
                continueHandshake()
            } else {
                state = .open
                startSession()
            }
        case .handshaking:
            continueHandshake()
        case .open:
            if events & (PZ_EPOLLIN | PZ_EPOLLHUP | PZ_EPOLLERR) != 0 || tlsWantsWrite {
                readAvailable()
            }
            if state == .open { scheduleFlush() }
        case .closed:
            break
        }
    }

    func loopStopping() {
        close(HTTP2Error(.shutdown, "the event loop shut down"))
    }

    private func continueHandshake() {
        guard let ssl else { return }
        ERR_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 {
            if let error = tlsEstablished() {
                close(error)
                return
            }
            state = .open
            startSession()
            return
        }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ: setInterest(write: false)
        case SSL_ERROR_WANT_WRITE: setInterest(write: true)
        case SSL_ERROR_SYSCALL:
            let reason = errno != 0 ? errnoText() : "the peer closed the connection during the handshake"
            close(tlsFailed(reason))
        default:
            close(tlsFailed(drainOpenSSLErrors()))
        }
    }

    private func startSession() {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        guard let callbacks else {
            close(HTTP2Error(.protocolError, "nghttp2_session_callbacks_new failed"))
            return
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        installCallbacks(callbacks)
        guard makeSession(callbacks: callbacks), session != nil else {
            close(HTTP2Error(.protocolError, "nghttp2 session creation failed"))
            return
        }
        sessionStarted()
        if state == .open { flush() }
    }

    // MARK: Reading

    private func readAvailable() {
        tlsWantsWrite = false
        // Bounded so one busy connection cannot starve the others on this loop.
        for _ in 0..<16 {
            var count = 0
            if let ssl {
                ERR_clear_error()
                let rc = SSL_read(ssl, readBuffer, Int32(Self.readBufferSize))
                if rc <= 0 {
                    switch SSL_get_error(ssl, rc) {
                    case SSL_ERROR_WANT_READ: return
                    case SSL_ERROR_WANT_WRITE: tlsWantsWrite = true; setInterest(write: true); return
                    case SSL_ERROR_ZERO_RETURN: close(nil); return
                    case SSL_ERROR_SYSCALL:
                        close(errno == 0 ? nil : HTTP2Error(.connectionClosed, "read failed: \(errnoText())"))
                        return
                    default:
                        close(HTTP2Error(.connectionClosed, "TLS read failed: \(drainOpenSSLErrors())"))
                        return
                    }
                }
                count = Int(rc)
            } else {
                let rc = recv(fd, readBuffer, Self.readBufferSize, 0)
                if rc < 0 {
                    if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return }
                    close(HTTP2Error(.connectionClosed, "read failed: \(errnoText())"))
                    return
                }
                if rc == 0 { close(nil); return }
                count = rc
            }
            didRead()
            guard let session else { return }
            let consumed = nghttp2_session_mem_recv(session, readBuffer, count)
            if consumed < 0 {
                if let failure = callbackFailure {
                    // A bound was exceeded: tell the peer why (RFC 9113 §7 ENHANCE_YOUR_CALM) before closing.
                    nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
                    flush()
                    close(failure)
                    return
                }
                let text = String(cString: nghttp2_strerror(Int32(consumed)))
                // Let nghttp2's GOAWAY for the violation go out before closing.
                flush()
                close(HTTP2Error(.protocolError, "HTTP/2 protocol error: \(text)"))
                return
            }
            if state != .open { return }
            // A short plain read drained the socket; TLS reads one record at a time, so keep going to WANT_READ.
            if ssl == nil && count < Self.readBufferSize { return }
        }
        // Bound reached. Level-triggered epoll reports bytes still in the socket, but not bytes OpenSSL has
        // already pulled in: come back for those.
        if let ssl, SSL_pending(ssl) > 0 {
            // Held strongly for one turn of the loop (a weak reference would give the connection a side table and
            // slow every retain of it).
            loop.runSoon { [self] in
                guard self.state == .open else { return }
                self.readAvailable()
                self.scheduleFlush()
            }
        }
    }

    /// Bytes arrived (keepalive bookkeeping).
    func didRead() {}

    // MARK: Writing

    /// Flushes once after the current event, however many streams were submitted meanwhile.
    func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        loop.runSoon { [self] in
            flushScheduled = false
            flush()
        }
    }

    /// Moves frames from nghttp2 to the socket until either is exhausted; then updates epoll interest.
    func flush() {
        guard state == .open, let session else { return }
        while true {
            // Frames are taken from nghttp2 only once the socket has taken everything before them: while the peer
            // is not reading, new HEADERS stay inside nghttp2, where a timeout or cancellation can still withdraw
            // them (RST_STREAM on a stream whose HEADERS are queued cancels them), instead of sitting in
            // `outbound` bound to go out once the peer reads again.
            if outboundOffset < outbound.count {
                let drained = writeOutbound()
                if state != .open { return }
                if !drained { break }
            }
            while outbound.count - outboundOffset < Self.outboundHighWater {
                var data: UnsafePointer<UInt8>?
                let n = nghttp2_session_mem_send(session, &data)
                if n < 0 {
                    close(HTTP2Error(.protocolError, "nghttp2 send failed: \(String(cString: nghttp2_strerror(Int32(n))))"))
                    return
                }
                if n == 0 { break }
                if let data { outbound.append(contentsOf: UnsafeBufferPointer(start: data, count: n)) }
            }
            if outboundOffset == outbound.count { break }
        }
        let pending = outboundOffset < outbound.count
        setInterest(write: (pending && !tlsWriteWantsRead) || tlsWantsWrite)
        if !pending, shouldCloseWhenIdle() || (nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0) {
            close(nil)
        }
    }

    /// Writes what it can; returns false when the socket would block.
    private func writeOutbound() -> Bool {
        tlsWriteWantsRead = false
        while outboundOffset < outbound.count {
            let remaining = outbound.count - outboundOffset
            let written: Int = outbound.withUnsafeBufferPointer { buffer in
                let start = buffer.baseAddress! + outboundOffset
                if let ssl {
                    ERR_clear_error()
                    let rc = SSL_write(ssl, start, Int32(min(remaining, Int(Int32.max))))
                    if rc > 0 { return Int(rc) }
                    switch SSL_get_error(ssl, rc) {
                    case SSL_ERROR_WANT_WRITE: return 0
                    case SSL_ERROR_WANT_READ: tlsWriteWantsRead = true; return 0
                    default: return -1
                    }
                } else {
                    let rc = send(fd, start, remaining, Int32(MSG_NOSIGNAL))
                    if rc >= 0 { return rc }
                    return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1
                }
            }
            if written < 0 {
                close(HTTP2Error(.connectionClosed, "write failed: \(ssl != nil ? drainOpenSSLErrors() : errnoText())"))
                return false
            }
            if written == 0 { return false }
            outboundOffset += written
        }
        outbound.removeAll(keepingCapacity: outbound.capacity <= 1 << 20)
        outboundOffset = 0
        return true
    }

    private func setInterest(write: Bool) {
        guard state != .closed else { return }
        let events = PZ_EPOLLIN | (write ? PZ_EPOLLOUT : 0)
        if events != registeredEvents {
            registeredEvents = events
            loop.modify(fd, events: events)
        }
    }

    // MARK: Closing

    /// Closes the socket once and reports `error` (nil = orderly) to the subclass. The nghttp2 session stays
    /// allocated until `deinit` because this may run inside one of its callbacks.
    func close(_ error: HTTP2Error?) {
        guard state != .closed else { return }
        state = .closed
        loop.unregister(fd)
        Glibc.close(fd)
        outbound = []
        didClose(error)
    }

    // MARK: Submitting

    /// Submits HEADERS (+ DATA from `body` when non-empty) for `stream`: `fields` fills the header list, `call`
    /// calls nghttp2 with it and the data provider (nil when there is no body). The data provider finds the body
    /// through the stream's user data, so `stream` must be its user data by the time nghttp2 sends DATA: passed to
    /// `nghttp2_submit_request`, or registered with ``attach(_:to:)`` for a response. Returns nghttp2's result:
    /// a new stream id, 0, or a negative error.
    func submit(_ stream: H2Stream, body: [UInt8], fields: (inout HeaderFieldList) -> Void,
                _ call: (UnsafePointer<nghttp2_nv>, Int, UnsafePointer<nghttp2_data_provider>?) -> Int32) -> Int32 {
        fieldScratch.removeAll()
        fields(&fieldScratch)
        stream.outgoing = body
        stream.outgoingOffset = 0
        if body.isEmpty { return fieldScratch.withNameValues { nva, count in call(nva, count, nil) } }
        var provider = nghttp2_data_provider()
        provider.source.ptr = nil
        provider.read_callback = { session, streamID, buffer, length, flags, _, _ in
            guard let session, let buffer, let flags else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
            guard let pointer = nghttp2_session_get_stream_user_data(session, streamID) else {
                flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
                return 0
            }
            // Owned by the connection's stream table for as long as nghttp2 has the stream open.
            return Unmanaged<H2Stream>.fromOpaque(pointer)._withUnsafeGuaranteedRef { stream in
                let offset = stream.outgoingOffset
                let count = stream.outgoing.withUnsafeBufferPointer { source in
                    let count = min(length, source.count - offset)
                    buffer.update(from: source.baseAddress! + offset, count: count)
                    return count
                }
                if offset + count == stream.outgoing.count {
                    flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
                    stream.outgoing = []
                    stream.outgoingOffset = 0
                } else {
                    stream.outgoingOffset = offset + count
                }
                return count
            }
        }
        return fieldScratch.withNameValues { nva, count in
            withUnsafePointer(to: &provider) { call(nva, count, $0) }
        }
    }

    // MARK: Streams

    /// Makes `stream` the user data of nghttp2's stream `streamID` (which must be open), unretained: the subclass
    /// keeps it alive until nghttp2 reports the stream closed, or detaches it first (``detach(_:)``).
    func attach(_ stream: H2Stream, to streamID: Int32) {
        guard let session else { return }
        nghttp2_session_set_stream_user_data(session, streamID, Unmanaged.passUnretained(stream).toOpaque())
    }

    /// Forgets the user data of `streamID` (before its object is released while nghttp2 still has the stream).
    func detach(_ streamID: Int32) {
        guard let session else { return }
        nghttp2_session_set_stream_user_data(session, streamID, nil)
    }

    /// The object attached to `streamID`, or nil (none attached, or nghttp2 has closed the stream). A lookup in
    /// nghttp2's own stream map, cheaper than hashing the id again in a Swift dictionary for every header field
    /// and DATA chunk. `type` is the subclass's own stream type: a connection attaches only objects of that type,
    /// so the cast is not checked.
    func attachedStream<S: H2Stream>(_ streamID: Int32, as type: S.Type) -> S? {
        guard let session, let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return unsafeDowncast(Unmanaged<H2Stream>.fromOpaque(pointer).takeUnretainedValue(), to: type)
    }

    // MARK: Callbacks

    private func installCallbacks(_ callbacks: OpaquePointer) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, userData in
            guard let frame, let userData else { return 0 }
            return H2Connection.connection(userData) { $0.onBeginHeaders(frame) }
        }
        nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks) { _, header, userData in
            guard let header, let userData else { return 0 }
            return H2Connection.connection(userData) { $0.onBeginFrame(header.pointee) }
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, userData in
            guard let frame, let name, let value, let userData else { return 0 }
            return H2Connection.connection(userData) {
                $0.onHeader(frame, name: UnsafeBufferPointer(start: name, count: nameLength),
                            value: UnsafeBufferPointer(start: value, count: valueLength))
            }
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, userData in
            guard let frame, let userData else { return 0 }
            return H2Connection.connection(userData) { $0.onFrameReceived(frame) }
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, length, userData in
            guard let userData else { return 0 }
            return H2Connection.connection(userData) { $0.onDataChunk(streamID: streamID, UnsafeBufferPointer(start: data, count: length)) }
        }
        nghttp2_session_callbacks_set_before_frame_send_callback(callbacks) { _, frame, userData in
            guard let frame, let userData else { return 0 }
            return H2Connection.connection(userData) { $0.beforeFrameSend(frame) }
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, userData in
            guard let userData else { return 0 }
            return H2Connection.connection(userData) { $0.onStreamClosed(streamID: streamID, errorCode: errorCode) }
        }
    }

    /// Runs `body` on the connection behind nghttp2's `user_data` without a retain and release per callback (a
    /// dozen callbacks per request): nghttp2 calls back only from inside a method of the connection that owns the
    /// session, which holds it for the call.
    private static func connection(_ userData: UnsafeMutableRawPointer, _ body: (H2Connection) -> Int32) -> Int32 {
        Unmanaged<H2Connection>.fromOpaque(userData)._withUnsafeGuaranteedRef(body)
    }

    /// Counts the frames of each header block (this callback, unlike on_frame_recv, sees each of them).
    private func onBeginFrame(_ header: nghttp2_frame_hd) -> Int32 {
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue, NGHTTP2_PUSH_PROMISE.rawValue:
            headerBlockFrames = 1
        case NGHTTP2_CONTINUATION.rawValue:
            headerBlockFrames += 1
            if headerBlockFrames > Self.maximumHeaderBlockFrames {
                callbackFailure = headerBlockTooLong(streamID: header.stream_id)
                return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
            }
        default:
            break
        }
        return 0
    }

    var userData: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }
}

/// One stream of an ``H2Connection``, subclassed by the client's and the server's: the body it sends. nghttp2 holds
/// it as the stream's user data, unretained; the connection's subclass owns it.
class H2Stream {
    /// The request or response body being sent, and how much of it nghttp2 has taken; emptied once all is taken.
    var outgoing: [UInt8] = []
    var outgoingOffset = 0
}

extension UnsafeBufferPointer<UInt8> {
    /// The bytes as text (header names and values are ASCII; anything else is replaced, never trusted).
    var text: String { String(decoding: self, as: UTF8.self) }
}

extension UnsafePointer where Pointee == nghttp2_frame {
    var frameType: UInt32 { UInt32(pointee.hd.type) }
    var streamID: Int32 { pointee.hd.stream_id }
    func has(_ flag: nghttp2_flag) -> Bool { pointee.hd.flags & UInt8(flag.rawValue) != 0 }
}
