/// Connection-pool and timing settings for `HTTP2Client`.
public struct HTTP2ClientConfiguration: Sendable {
    /// Connections opened per origin at most; requests share their streams (RFC 9113 §9.1.1 reuse).
    public var maximumConnectionsPerOrigin: Int = 2
    /// Limit for TCP connect + TLS handshake + the server's first SETTINGS frame.
    public var connectTimeout: Duration = .seconds(10)
    /// Default per-request deadline (`HTTP2Request.timeout` overrides it), counted from `send`.
    public var requestTimeout: Duration = .seconds(30)
    /// A keepalive PING (RFC 9113 §6.7) is sent on a connection without open streams that received nothing for
    /// this long and was used within `idleTimeout` (connections unused longer are closed, not kept alive).
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
    /// After REFUSED_STREAM lowered a connection's stream limit (to the streams the peer had accepted, RFC 9113
    /// §8.7), the limit grows back by one stream per window of that many answered streams, and at most once per
    /// this interval, never above the peer's SETTINGS_MAX_CONCURRENT_STREAMS. A refusal that lowered the limit
    /// is resent without counting against `maximumRetries`.
    public var streamLimitRecoveryInterval: Duration = .seconds(1)
    /// Connections open at once over all origins (the global cap; keep it well below the process's
    /// LimitNOFILE). At the cap the least recently used idle connection is closed to make room; when none is idle,
    /// requests for a new origin wait for one to close.
    public var maximumConnections: Int = 1024
    /// Streams open at once to one origin, whatever its SETTINGS_MAX_CONCURRENT_STREAMS: one slow endpoint cannot
    /// take every stream. Further requests to it wait in its queue (until their deadline, or `maximumQueueWait`),
    /// served tenant by tenant in turn, a tenant at its share of these streams after the others
    /// (`HTTP2Request.tenant`).
    public var maximumInFlightPerOrigin: Int = 256
    /// How long a request may wait for a stream (every stream of its origin in use, or a connection still
    /// opening) before it fails with `.originBusy`, unsent. Callers that hold a slot per request (a worker's
    /// deliveries) so get it back from an origin that answers slowly or never completes a handshake, instead of
    /// waiting out the request's deadline behind it. A fast origin's queue drains long before (256 streams
    /// answered in 5 ms each serve 50,000 requests a second), and a TLS handshake takes well under it. nil: wait
    /// until the deadline. Checked every half of it, so a request may wait up to one and a half times as long.
    public var maximumQueueWait: Duration? = .seconds(2)
    /// A connection without streams for this long is closed (GOAWAY); an origin with no connection left, nothing
    /// waiting and no backoff pending is then forgotten.
    public var idleTimeout: Duration = .seconds(120)
    /// Largest response body (bytes) read per request. Push providers answer with small JSON; a stream whose
    /// DATA goes beyond this is reset with CANCEL (RFC 9113 §8.7) and its request fails with
    /// `.responseTooLarge`.
    public var maximumResponseBodySize: Int = 64 * 1024
    /// Largest response header list (bytes), counted as RFC 9113 §6.5.2 does: name + value + 32 octets per field,
    /// over every header block of one response (interim 1xx, final, trailers). Advertised as
    /// SETTINGS_MAX_HEADER_LIST_SIZE; a stream beyond it is reset with ENHANCE_YOUR_CALM and its request fails
    /// with `.responseTooLarge`.
    public var maximumResponseHeaderListSize: Int = 16 * 1024
    /// Most header fields (pseudo-headers included) accepted in one response, enforced like
    /// `maximumResponseHeaderListSize`: many tiny fields cost per-field work the size cap barely sees.
    public var maximumResponseHeaderCount: Int = 100

    /// Which addresses connections may go to: every resolved address (and every address literal) is checked
    /// before connecting, and a refused one fails the request with `.forbiddenAddress`. The library default
    /// allows everything; the worker sets ``EgressPolicy/publicInternetOnly`` unless the operator allows private
    /// networks.
    public var egressPolicy: EgressPolicy = .unrestricted

    /// Where each origin's host name is looked up: the process-wide ``HostResolver/shared`` (4 threads, 256 queued
    /// lookups, first come first served) unless this chooses another. Names that come from untrusted parties
    /// should go to a resolver of their own with ``HostResolverLimits/untrustedNames``, so that names whose DNS
    /// never answers (each holding a thread until the C library gives up) cannot hold up the lookups of trusted
    /// hosts, and hold only their registrable domain's and their tenant's (``HTTP2Request/tenant``) share of
    /// their own resolver.
    public var resolver: @Sendable (HTTP2Origin) -> HostResolver = { _ in .shared }

    /// Testing hook: a fixed SO_SNDBUF (bytes) for new connections, so tests can fill the socket deterministically
    /// (the kernel otherwise grows the buffer on its own). Not public: production keeps the kernel's autotuning.
    var testingSendBufferSize: Int32?

    public init() {}
}
