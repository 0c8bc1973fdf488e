internal import CNghttp2
internal import COpenSSL
internal import Glibc

/// A request accepted by `HTTP2Client.send`, from queueing to completion (loop thread only).
final class PendingRequest {
    let id: UInt64
    let request: HTTP2Request
    let origin: HTTP2Origin
    /// Who waits for the outcome: the continuation of one `send`, or the burst of a submission.
    enum Completion {
        case continuation(UnsafeContinuation<HTTP2Response, any Error>)
        /// Request `index` of a submission: its result goes into the submission's burst (no closure per request).
        case burst(AnswerBurst, index: Int)
    }

    /// Called once with the outcome; nil once finished.
    private var completion: Completion?
    var timer: LoopTimerID?
    /// Resends after REFUSED_STREAM or GOAWAY above last-stream-id.
    var retries = 0
    /// The connection whose stream carries the request, while one does. An id, not a weak reference: a weak
    /// reference gives the connection a side table, after which every retain and release of it (one pair per
    /// nghttp2 callback) takes the Swift runtime's slow path.
    var connectionID: PoolStateMachine.ConnectionID?
    var streamID: Int32 = 0
    /// Set when nghttp2 serializes this attempt's HEADERS (from then on its bytes may leave the process); reset
    /// when the request is queued again after REFUSED_STREAM or GOAWAY. While false, the peer certainly has not
    /// seen the request, so a failure is safe to retry.
    var headersSent = false
    /// True while the request waits in its origin's queue (not yet on a connection).
    var isQueued = false

    init(id: UInt64, request: HTTP2Request, origin: HTTP2Origin, completion: Completion) {
        self.id = id
        self.request = request
        self.origin = origin
        self.completion = completion
    }

    var isFinished: Bool { completion == nil }

    func finish(_ result: Result<HTTP2Response, any Error>) {
        guard let completion else { return }
        self.completion = nil
        switch completion {
        case .continuation(let continuation): continuation.resume(with: result)
        case .burst(let burst, let index): burst.add(HTTP2Answer(index: index, result: result))
        }
    }
}

/// The client side of one connection: streams for pooled requests, keepalive PING, GOAWAY bookkeeping.
/// `@unchecked Sendable` as its base class: loop thread only.
final class ClientConnection: H2Connection, @unchecked Sendable {
    final class Stream: H2Stream {
        let request: PendingRequest
        var status: Int?
        var headers: [HTTP2Header] = []
        var body: [UInt8] = []
        /// Header bytes as RFC 9113 §6.5.2 counts them (name + value + 32 per field) and fields, all blocks.
        var headerListSize = 0
        var headerCount = 0
        /// Set once the response went beyond a read bound: the stream is being reset and nothing more is kept.
        var overLimit: HTTP2Error?
        init(_ request: PendingRequest) { self.request = request }
    }

    /// The open stream `streamID` (owned by `streams`, attached as nghttp2's user data), or nil.
    private func stream(_ streamID: Int32) -> Stream? { attachedStream(streamID, as: Stream.self) }

    let core: ClientCore
    /// This connection's id in the pool's `PoolStateMachine`.
    let id: PoolStateMachine.ConnectionID
    let origin: HTTP2Origin
    /// `origin.authority`, computed once: it is sent with every request.
    private let authority: String
    /// True after the server's first SETTINGS (its stream limit is known).
    private(set) var isReady = false
    private(set) var goingAway = false
    private var goAwayLastStreamID: Int32 = Int32.max
    private var goAwayErrorCode: UInt32 = 0
    private(set) var streams: [Int32: Stream] = [:]
    private var connectTimer: LoopTimerID?
    private var pingTimer: LoopTimerID?
    private var pongTimer: LoopTimerID?
    private var readSinceLastPing = true
    private var closeRequested = false
    /// A dispatch of this connection's origin is queued for the end of the loop's turn (`ClientCore.streamClosed`).
    var dispatchScheduled = false
    /// The header fields of the last response completed on this connection (see `reusedOrNewHeader`).
    private var previousResponseHeaders: [HTTP2Header] = []

    /// Addresses of the origin not tried yet (the next is used when TCP connect fails).
    let remainingAddresses: [SocketAddress]

    init(core: ClientCore, id: PoolStateMachine.ConnectionID, origin: HTTP2Origin, fd: Int32, ssl: OpaquePointer?,
         remainingAddresses: [SocketAddress]) {
        self.core = core
        self.id = id
        self.origin = origin
        self.authority = origin.authority
        self.remainingAddresses = remainingAddresses
        super.init(loop: core.loop.core, fd: fd, ssl: ssl, connecting: true)
    }

    /// Starts connecting; the connect timer covers TCP, TLS and the first SETTINGS.
    func begin(timeout: Duration) {
        // Timer and run-soon closures hold the connection strongly (no weak reference, see `PendingRequest.
        // connectionID`); `didClose` cancels every timer, which drops its closure and so the reference.
        connectTimer = loop.schedule(after: timeout) { [self] in
            self.close(HTTP2Error(.connectTimeout, "no HTTP/2 connection to \(self.origin) within \(timeout)", isSafeToRetry: true))
        }
        start()
    }

    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2; unlimited until it says otherwise).
    var peerStreamLimit: Int {
        guard let session else { return 0 }
        return Int(nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
    }

    // MARK: TLS

    override func tlsEstablished() -> HTTP2Error? {
        guard let ssl else { return nil }
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        let selected = data.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self) } ?? ""
        if selected != "h2" {
            return HTTP2Error(.alpnNotNegotiated,
                              "\(origin) did not negotiate ALPN h2 (selected: \(selected.isEmpty ? "none" : selected))",
                              isSafeToRetry: true)
        }
        return nil
    }

    override func tlsFailed(_ reason: String) -> HTTP2Error {
        if let ssl {
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                return HTTP2Error(.certificateVerificationFailed,
                                  "certificate of \(origin) did not verify: \(String(cString: X509_verify_cert_error_string(verify)))",
                                  isSafeToRetry: true)
            }
        }
        if reason.contains("no application protocol") {
            // The server refused our ALPN list with a fatal alert (RFC 7301 §3.2).
            return HTTP2Error(.alpnNotNegotiated, "\(origin) does not speak h2 (ALPN refused: \(reason))", isSafeToRetry: true)
        }
        return HTTP2Error(.tlsHandshakeFailed, "TLS handshake with \(origin) failed: \(reason)", isSafeToRetry: true)
    }

    // MARK: Session

    override func makeSession(callbacks: OpaquePointer) -> Bool {
        var session: OpaquePointer?
        guard nghttp2_session_client_new(&session, callbacks, userData) == 0, let session else { return false }
        self.session = session
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20),
            // Advisory for the peer (RFC 9113 §6.5.2); `onHeader` enforces it.
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue),
                                   value: UInt32(clamping: core.configuration.maximumResponseHeaderListSize)),
        ]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        // A larger connection window so many concurrent response bodies do not stall (RFC 9113 §6.9.2).
        nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 << 20)
        return true
    }

    override func onFrameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        switch frame.frameType {
        case NGHTTP2_SETTINGS.rawValue where !frame.has(NGHTTP2_FLAG_ACK):
            if !isReady {
                isReady = true
                loop.cancelTimer(connectTimer)
                connectTimer = nil
                schedulePing()
                loop.runSoon { [core, self] in
                    if self.state == .open { core.connectionReady(self) }
                }
            } else {
                // The stream limit may have changed.
                core.settingsChanged(self)
            }
        case NGHTTP2_GOAWAY.rawValue:
            goingAway = true
            goAwayLastStreamID = min(goAwayLastStreamID, frame.pointee.goaway.last_stream_id)
            goAwayErrorCode = frame.pointee.goaway.error_code
            core.goingAway(self)
        case NGHTTP2_PING.rawValue where frame.has(NGHTTP2_FLAG_ACK):
            loop.cancelTimer(pongTimer)
            pongTimer = nil
        default:
            break
        }
        return 0
    }

    override func onHeader(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Int32 {
        guard let stream = stream(frame.streamID), stream.overLimit == nil else { return 0 }
        // Counted before anything is kept: an HPACK block can name one dynamic-table entry thousands of times
        // at one byte each (RFC 7541 §6.1), so the decoded size, not the bytes received, is what is bounded.
        let configuration = core.configuration
        stream.headerListSize += name.count + value.count + 32
        stream.headerCount += 1
        if stream.headerListSize > configuration.maximumResponseHeaderListSize {
            exceeded(stream, "its header list exceeds maximumResponseHeaderListSize (\(configuration.maximumResponseHeaderListSize) bytes, counting 32 per field as RFC 9113 §6.5.2 does)",
                     resetWith: NGHTTP2_ENHANCE_YOUR_CALM)
            return 0
        }
        if stream.headerCount > configuration.maximumResponseHeaderCount {
            exceeded(stream, "it has more than maximumResponseHeaderCount (\(configuration.maximumResponseHeaderCount)) header fields",
                     resetWith: NGHTTP2_ENHANCE_YOUR_CALM)
            return 0
        }
        if name.first == UInt8(ascii: ":") {
            // 1xx responses are interim (RFC 9110 §15.2); the final status replaces them.
            if name.text == ":status" { stream.status = Int(value.text) }
        } else {
            // Providers answer with a handful of fields: one allocation instead of growing 1, 2, 4, 8.
            if stream.headers.isEmpty { stream.headers.reserveCapacity(8) }
            stream.headers.append(reusedOrNewHeader(at: stream.headers.count, name: name, value: value))
        }
        return 0
    }

    /// The field at `index` of the last response read on this connection when it has the same bytes (a server's
    /// `server`, `content-type` or `date`, FCM's `vary` and `alt-svc`: most fields repeat from one response to
    /// the next), else a new one. A repeated field then costs a comparison, not two strings.
    private func reusedOrNewHeader(at index: Int, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> HTTP2Header {
        if index < previousResponseHeaders.count {
            let previous = previousResponseHeaders[index]
            if previous.name.hasUTF8(name), previous.value.hasUTF8(value) { return previous }
        }
        return HTTP2Header(name.text, value.text)
    }

    override func onDataChunk(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) -> Int32 {
        guard let stream = stream(streamID), stream.overLimit == nil else { return 0 }
        let limit = core.configuration.maximumResponseBodySize
        if stream.body.count + data.count > limit {
            // Nothing more is needed from this stream (RFC 9113 §8.7 CANCEL); DATA already in flight is dropped
            // by nghttp2, which still credits the connection window.
            exceeded(stream, "its body exceeds maximumResponseBodySize (\(limit) bytes)", resetWith: NGHTTP2_CANCEL)
            return 0
        }
        stream.body.append(contentsOf: data)
        return 0
    }

    /// Stops keeping anything of `stream`'s response and resets it; its request fails with `.responseTooLarge`
    /// when nghttp2 reports the stream closed.
    private func exceeded(_ stream: Stream, _ what: String, resetWith code: nghttp2_error_code) {
        let status = stream.status.map { " (status \($0))" } ?? ""
        stream.overLimit = HTTP2Error(.responseTooLarge, "the response from \(origin)\(status) was not read: \(what); stream reset with \(String(cString: nghttp2_http2_strerror(code.rawValue)))")
        stream.body = []
        stream.headers = []
        if let session {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.request.streamID, code.rawValue)
        }
    }

    override func headerBlockTooLong(streamID: Int32) -> HTTP2Error {
        let error = HTTP2Error(.responseTooLarge, "\(origin) sent a header block over more than \(Self.maximumHeaderBlockFrames) frames (HEADERS and CONTINUATION); connection closed with ENHANCE_YOUR_CALM")
        if let stream = stream(streamID), stream.overLimit == nil { stream.overLimit = error }
        return error
    }

    override func onStreamClosed(streamID: Int32, errorCode: UInt32) -> Int32 {
        guard let stream = streams.removeValue(forKey: streamID) else { return 0 }
        let request = stream.request
        request.connectionID = nil
        let refused = errorCode == NGHTTP2_REFUSED_STREAM.rawValue
        defer { core.streamClosed(self, tenant: request.request.tenant, processed: !refused) }
        guard !request.isFinished else { return 0 }
        if let error = stream.overLimit {
            core.finish(request, .failure(error))
            return 0
        }
        if errorCode == NGHTTP2_NO_ERROR.rawValue, let status = stream.status, status >= 200 {
            previousResponseHeaders = stream.headers
            core.finish(request, .success(HTTP2Response(status: status, headers: stream.headers, body: stream.body)))
            return 0
        }
        let unprocessed = goingAway && streamID > goAwayLastStreamID
        if unprocessed {
            // Not processed by the peer (RFC 9113 §6.8): safe to send again, on another connection.
            core.retry(request, reason: HTTP2Error(.goAway, "\(origin) sent GOAWAY before processing the request", isSafeToRetry: true))
            return 0
        }
        if refused {
            // Not processed (RFC 9113 §8.7), most likely more streams than the peer takes at once: sent again
            // within this connection's lowered limit.
            core.refused(request, on: self, reason: HTTP2Error(.refusedStream, "\(origin) refused the stream (REFUSED_STREAM)", isSafeToRetry: true))
            return 0
        }
        let reason = String(cString: nghttp2_http2_strerror(errorCode))
        if errorCode == NGHTTP2_NO_ERROR.rawValue {
            core.finish(request, .failure(HTTP2Error(.protocolError, "stream closed without a final response")))
        } else {
            core.finish(request, .failure(HTTP2Error(.streamReset, "\(origin) reset the stream: \(reason) (\(errorCode))")))
        }
        return 0
    }

    override func beforeFrameSend(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        guard frame.frameType == NGHTTP2_HEADERS.rawValue, let stream = stream(frame.streamID) else { return 0 }
        // Never NGHTTP2_ERR_CANCEL here: nghttp2 has already HPACK-encoded the block, so dropping it would desync
        // the peer's header table (RFC 7541 §2.3.2). Answered requests are withdrawn earlier instead: `abort`
        // submits RST_STREAM, which cancels HEADERS still queued in nghttp2.
        stream.request.headersSent = true
        return 0
    }

    override func didRead() { readSinceLastPing = true }

    // MARK: Requests

    /// Opens a stream for `request`; on failure the request is completed with the error and false returned.
    func startStream(_ request: PendingRequest) -> Bool {
        guard let session, state == .open, !closeRequested else {
            core.finish(request, .failure(HTTP2Error(.connectionClosed, "connection to \(origin) closed before the request was sent", isSafeToRetry: true)))
            return false
        }
        let r = request.request
        let stream = Stream(request)
        let streamID = submit(stream, body: r.body, fields: { fields in
            fields.append(":method", r.method)
            fields.append(":scheme", origin.scheme.rawValue)
            fields.append(":authority", authority)
            fields.append(":path", r.path)
            var hasContentLength = false
            for header in r.headers {
                let name = header.name.lowercasedFieldName
                if name == "content-length" { hasContentLength = true }
                fields.append(name, header.value)
            }
            if !r.body.isEmpty, !hasContentLength { fields.append("content-length", decimal: r.body.count) }
        }) { nva, count, provider in
            nghttp2_submit_request(session, nil, nva, count, provider, Unmanaged.passUnretained(stream).toOpaque())
        }
        guard streamID > 0 else {
            core.finish(request, .failure(HTTP2Error(.protocolError, "cannot submit request: \(String(cString: nghttp2_strerror(streamID)))")))
            return false
        }
        request.connectionID = id
        request.streamID = streamID
        streams[streamID] = stream
        // Stream ids are 31-bit, odd for clients (RFC 9113 §5.1.1): about a billion requests per connection
        // (days at APNs rates). Drain this one near the end; the pool opens a successor.
        if nghttp2_session_get_next_stream_id(session) > UInt32(Int32.max - 1000) {
            goingAway = true
            core.goingAway(self)
        }
        scheduleFlush()
        return true
    }

    /// Resets a stream whose request timed out or was cancelled (RST_STREAM CANCEL, RFC 9113 §8.7).
    func cancelStream(_ streamID: Int32) {
        guard let session, state == .open, streams[streamID] != nil else { return }
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_CANCEL.rawValue)
        scheduleFlush()
    }

    /// Sends GOAWAY(NO_ERROR) and closes once written (client shutdown).
    func terminate() {
        guard let session, state == .open else {
            close(nil)
            return
        }
        closeRequested = true
        nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR.rawValue)
        flush()
    }

    override func shouldCloseWhenIdle() -> Bool {
        closeRequested || (goingAway && streams.isEmpty)
    }

    // MARK: Keepalive

    private func schedulePing() {
        pingTimer = loop.schedule(after: core.configuration.pingInterval) { [self] in
            guard self.state == .open, let session = self.session else { return }
            // Silent for a whole interval, no streams (those have their own deadlines), used within the idle timeout.
            if !self.readSinceLastPing && self.pongTimer == nil && self.core.machine.keepaliveWanted(self.id, now: .now) {
                nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
                let timeout = self.core.configuration.pingTimeout
                self.pongTimer = self.loop.schedule(after: timeout) { [self] in
                    self.close(HTTP2Error(.connectionClosed, "keepalive PING unanswered within \(timeout)"))
                }
                self.flush()
            }
            self.readSinceLastPing = false
            self.schedulePing()
        }
    }

    // MARK: Close

    override func didClose(_ error: HTTP2Error?) {
        loop.cancelTimer(connectTimer)
        loop.cancelTimer(pingTimer)
        loop.cancelTimer(pongTimer)
        let open = streams
        streams = [:]
        // nghttp2 keeps the session (and these streams) until deinit: leave it no pointer to a released object.
        for streamID in open.keys { detach(streamID) }
        let wasReady = isReady
        // The pool counts these streams off their tenants when the connection's close reaches it.
        let openTenants = open.values.map { $0.request.request.tenant }
        for (streamID, stream) in open.sorted(by: { $0.key < $1.key }) {
            let request = stream.request
            request.connectionID = nil
            guard !request.isFinished else { continue }
            if let overLimit = stream.overLimit {
                core.finish(request, .failure(overLimit))
            } else if goingAway && streamID > goAwayLastStreamID {
                core.retry(request, reason: HTTP2Error(.goAway, "\(origin) went away before processing the request", isSafeToRetry: true))
            } else if !request.headersSent {
                // Its HEADERS never left nghttp2: the peer cannot have seen it.
                let base = error ?? HTTP2Error(.connectionClosed, "\(origin) closed the connection")
                let code: HTTP2Error.Code = base.code == .shutdown ? .shutdown : .connectionClosed
                core.finish(request, .failure(HTTP2Error(code, "connection to \(origin) closed before the request was sent: \(base.message)", isSafeToRetry: true)))
            } else {
                let base = error ?? HTTP2Error(.connectionClosed, "\(origin) closed the connection")
                let code: HTTP2Error.Code = base.code == .shutdown ? .shutdown : .connectionClosed
                core.finish(request, .failure(HTTP2Error(code, "connection to \(origin) closed with the request in flight: \(base.message)")))
            }
        }
        let poolError = error ?? HTTP2Error(.connectionClosed, "\(origin) closed the connection before SETTINGS", isSafeToRetry: true)
        loop.runSoon { [core] in core.connectionClosed(self, wasReady: wasReady, error: poolError, openStreams: openTenants) }
    }
}
