/// A request for `HTTP2Client.send(_:to:)`.
public struct HTTP2Request: Sendable {
    /// `:method`, e.g. `POST`.
    public var method: String
    /// `:path`, e.g. `/3/device/<token>`; must start with `/`.
    public var path: String
    /// Regular header fields (no pseudo-headers; names are lower-cased when sent).
    public var headers: [HTTP2Header]
    /// Request body bytes (sent through nghttp2's data provider, honouring flow control).
    public var body: [UInt8]
    /// Deadline for this request from the moment `send` is called (queueing included);
    /// nil uses `HTTP2ClientConfiguration.requestTimeout`.
    public var timeout: Duration?
    /// Whom the request is sent for (the worker: its app; ``HTTP2Tenant``). Never sent. While it waits for a
    /// stream, the origin's queue serves tenants in turn and holds back a tenant at its share of the origin's
    /// streams. A host name the client looks up to connect for it counts against this tenant's share of the
    /// resolver (``HostResolverLimits``), so one tenant's names that never answer cannot hold up another's
    /// lookups; a connection that requests of several tenants wait for may start on any of their shares. nil: the
    /// tenant of every request without one, and for lookups the name's registrable domain's share only.
    public var tenant: HTTP2Tenant?

    public init(
        method: String = "POST", path: String, headers: [HTTP2Header] = [], body: [UInt8] = [], timeout: Duration? = nil,
        tenant: HTTP2Tenant? = nil
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.tenant = tenant
    }
}

/// A complete response: status, headers and the whole body.
public struct HTTP2Response: Sendable {
    /// `:status`, e.g. 200.
    public var status: Int
    /// Response header fields (trailers appended), lower-case names as received.
    public var headers: [HTTP2Header]
    /// All DATA bytes of the response.
    public var body: [UInt8]

    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// First value of a header, matched case-insensitively; nil when absent.
    public func header(_ name: String) -> String? { headers.firstValue(named: name) }
}
