/// Connection-pool and timing settings for `HTTP2Client`.
public struct HTTP2ClientConfiguration: Sendable {
    /// Connections opened per origin at most; requests share their streams (RFC 9113 §9.1.1 reuse).
    public var maximumConnectionsPerOrigin: Int = 2
    /// Limit for TCP connect + TLS handshake + the server's first SETTINGS frame.
    public var connectTimeout: Duration = .seconds(10)
    /// Default per-request deadline (`HTTP2Request.timeout` overrides it), counted from `send`.
    public var requestTimeout: Duration = .seconds(30)
    /// A keepalive PING (RFC 9113 §6.7) is sent on a connection without open streams that received nothing
    /// for this long.
    public var pingInterval: Duration = .seconds(60)
    /// A PING not acknowledged within this time drops the connection (its in-flight requests fail with
    /// `.connectionClosed`).
    public var pingTimeout: Duration = .seconds(10)
    /// First wait before reconnecting after a failed connect; doubled after each failure.
    public var reconnectBackoffInitial: Duration = .milliseconds(100)
    /// Upper bound of the reconnect wait.
    public var reconnectBackoffMaximum: Duration = .seconds(30)
    /// How often a request refused with REFUSED_STREAM or left unprocessed by GOAWAY is resent before failing.
    public var maximumRetries: Int = 3

    /// Which addresses connections may go to: every resolved address (and every address literal) is checked
    /// before connecting, and a refused one fails the request with `.forbiddenAddress`. The library default
    /// allows everything; the worker sets ``EgressPolicy/publicInternetOnly`` unless the operator allows private
    /// networks.
    public var egressPolicy: EgressPolicy = .unrestricted

    /// Testing hook: a fixed SO_SNDBUF (bytes) for new connections, so tests can fill the socket deterministically
    /// (the kernel otherwise grows the buffer on its own). Not public: production keeps the kernel's autotuning.
    var testingSendBufferSize: Int32?

    public init() {}
}
