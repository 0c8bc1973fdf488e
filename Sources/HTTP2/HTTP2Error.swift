/// Every failure of the HTTP2 module. `code` is for programs, `message` for people; messages never hold
/// secrets (no key material, no tokens from headers).
public struct HTTP2Error: Error, CustomStringConvertible, Sendable {
    /// Extensible error code (postgres-nio `PSQLError.Code` style): compare with `==`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// `HTTP2Origin(parsing:)` got text that is not an http(s) origin.
        public static let invalidURL = Code("invalidURL")
        /// Name resolution or TCP connect failed (refused, unreachable).
        public static let connectFailed = Code("connectFailed")
        /// The origin's host is an address, or resolves to one, that `HTTP2ClientConfiguration.egressPolicy`
        /// refuses (loopback, private, link-local, ...; see ``EgressPolicy``), or is not a valid host spelling.
        /// Nothing was connected to. Permanent for that host under that policy.
        public static let forbiddenAddress = Code("forbiddenAddress")
        /// TCP connect + TLS handshake + first SETTINGS took longer than `connectTimeout`.
        public static let connectTimeout = Code("connectTimeout")
        /// TLS handshake failed for a reason other than certificate verification.
        public static let tlsHandshakeFailed = Code("tlsHandshakeFailed")
        /// The peer's certificate chain or host name did not verify (RFC 6125 / RFC 5280).
        public static let certificateVerificationFailed = Code("certificateVerificationFailed")
        /// The TLS peer did not select ALPN `h2` (RFC 7301, RFC 9113 §3.2).
        public static let alpnNotNegotiated = Code("alpnNotNegotiated")
        /// The connection closed (EOF, I/O error, missed keepalive PONG) while the request was in flight.
        public static let connectionClosed = Code("connectionClosed")
        /// The peer sent GOAWAY with an error (RFC 9113 §6.8) and the request could not be completed.
        public static let goAway = Code("goAway")
        /// The peer kept answering RST_STREAM(REFUSED_STREAM) (RFC 9113 §8.7) past the retry limit.
        public static let refusedStream = Code("refusedStream")
        /// The peer reset the stream with an error code other than REFUSED_STREAM (RFC 9113 §6.4).
        public static let streamReset = Code("streamReset")
        /// The per-request deadline passed; the stream was reset with CANCEL.
        public static let requestTimeout = Code("requestTimeout")
        /// The request waited `HTTP2ClientConfiguration.maximumQueueWait` for a stream (every stream of its origin
        /// in use, or a connection still opening) and was withdrawn. Never sent: `isSafeToRetry` is true.
        public static let originBusy = Code("originBusy")
        /// nghttp2 reported an HTTP/2 protocol violation or an unusable request.
        public static let protocolError = Code("protocolError")
        /// The client, server or event loop is shut down.
        public static let shutdown = Code("shutdown")
        /// The request cannot be sent as given (RFC 9113 §8.2.1, §8.2.2: a header name that is not a token, a
        /// connection-specific header, or a value with NUL/CR/LF or leading/trailing whitespace). Never sent, and
        /// sending it again cannot succeed, so `isSafeToRetry` is false.
        public static let invalidRequest = Code("invalidRequest")
        /// The response went beyond a read bound (`HTTP2ClientConfiguration.maximumResponseBodySize`,
        /// `maximumResponseHeaderListSize` or `maximumResponseHeaderCount`, or a header block spread over too many
        /// CONTINUATION frames); the message names the bound. The stream was reset (or, for a CONTINUATION flood,
        /// the connection closed). The peer had the whole request and may have acted on it (a push provider may
        /// have accepted the notification), so `isSafeToRetry` is false: a resend counts as an attempt.
        public static let responseTooLarge = Code("responseTooLarge")
        /// Server set-up failed (bind, listen, certificate/key files) or certificate generation failed.
        public static let setupFailed = Code("setupFailed")
    }

    public var code: Code
    public var message: String
    /// True when the peer certainly did not process the request (connect failures, REFUSED_STREAM, GOAWAY with
    /// the stream above last-stream-id, RFC 9113 §8.7), or when its HEADERS never left the process (it was still
    /// queued, or still inside nghttp2 and withdrawn, when it timed out, its connection closed or the loop shut
    /// down), so resending cannot duplicate it and need not count as an attempt. False when the request may have
    /// reached the peer, and for `.invalidRequest` (resending the same request cannot succeed).
    public var isSafeToRetry: Bool

    public init(_ code: Code, _ message: String, isSafeToRetry: Bool = false) {
        self.code = code
        self.message = message
        self.isSafeToRetry = isSafeToRetry
    }

    public var description: String { "HTTP2Error.\(code): \(message)" }
}
