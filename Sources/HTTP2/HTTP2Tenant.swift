/// Whom a request is sent for, as the pool's queues see it: an opaque key (the worker uses its app's id), compared
/// for equality only and never sent or logged. Requests of one origin that wait for a stream are served tenant
/// by tenant in turn, and a tenant holding its share of the origin's streams gets no new one while another
/// waits (`PoolStateMachine`, docs/http2-client.md "Tenants take turns"). Requests without a tenant
/// (`HTTP2Request.tenant` nil) are one tenant together.
public struct HTTP2Tenant: Hashable, Sendable {
    /// The key, as the caller gave it.
    public var key: String

    public init(_ key: String) {
        self.key = key
    }
}
