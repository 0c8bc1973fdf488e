/// How many lookups a ``HostResolver`` runs and keeps waiting, in all and per share.
///
/// A lookup counts against two shares: its host's registrable domain (``RegistrableDomain``: everything under
/// one registrable domain is one owner's DNS) and its tenant (an opaque key the caller passes, such as an app's id;
/// a lookup without one counts against its domain only). It starts only while both have room, so names that
/// never answer hold at most their domain's and their tenant's share of the threads, and a lookup of another
/// domain for another tenant still starts at once. `getaddrinfo` cannot be cancelled: a lookup stays counted until
/// the C library returns, also after its caller gave up on it.
public struct HostResolverLimits: Sendable, Equatable {
    /// Lookups running at once, one thread each. Threads are started as lookups need them (never more than this)
    /// and kept for the process's life.
    public var threads: Int
    /// Lookups waiting, in all, for a thread or for room in their shares; more are refused at once.
    public var queueCapacity: Int
    /// Lookups running at once for names under one registrable domain.
    public var runningPerDomain: Int
    /// Lookups running at once for one tenant.
    public var runningPerTenant: Int
    /// Lookups waiting at once for names under one registrable domain; more are refused at once.
    public var waitingPerDomain: Int
    /// Lookups waiting at once for one tenant; more are refused at once.
    public var waitingPerTenant: Int

    /// - Parameters: as the properties; each is at least 1 (`queueCapacity` and the waiting shares at least 0),
    ///   and no share is larger than what it is a share of.
    public init(
        threads: Int, queueCapacity: Int, runningPerDomain: Int, runningPerTenant: Int, waitingPerDomain: Int,
        waitingPerTenant: Int
    ) {
        self.threads = max(1, threads)
        self.queueCapacity = max(0, queueCapacity)
        self.runningPerDomain = min(max(1, runningPerDomain), self.threads)
        self.runningPerTenant = min(max(1, runningPerTenant), self.threads)
        self.waitingPerDomain = min(max(0, waitingPerDomain), self.queueCapacity)
        self.waitingPerTenant = min(max(0, waitingPerTenant), self.queueCapacity)
    }

    /// No shares: first come, first served on `threads` threads with `queueCapacity` waiting, for names the
    /// process trusts (the providers' own hosts).
    public static func unshared(threads: Int, queueCapacity: Int) -> HostResolverLimits {
        HostResolverLimits(
            threads: threads, queueCapacity: queueCapacity, runningPerDomain: threads, runningPerTenant: threads,
            waitingPerDomain: queueCapacity, waitingPerTenant: queueCapacity)
    }

    /// For names untrusted parties choose (Web Push endpoints, channel endpoint overrides): up to 32 threads, 2
    /// lookups running per registrable domain and 8 per tenant, 256 waiting in all, 32 per domain and 64 per
    /// tenant. Four tenants whose names never answer fill the threads, four fill the queue; one fills neither.
    public static let untrustedNames = HostResolverLimits(
        threads: 32, queueCapacity: 256, runningPerDomain: 2, runningPerTenant: 8, waitingPerDomain: 32,
        waitingPerTenant: 64)
}
