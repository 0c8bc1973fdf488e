internal import CPushizoShims

/// Where glibc puts the worker's large allocations: blocks of ``defaultThreshold`` bytes or more are mapped
/// (`mmap`) and given back to the kernel when freed, rather than carved from an arena that keeps them.
///
/// A claimed batch can be a few large buffers (libpq's result, then the rows' text: up to 200 rows of 64 KiB user
/// tags each), made on one thread and freed on others. glibc's threshold starts at 128 KiB but rises to the size of
/// every mapped block freed (up to 32 MiB), so after the first large result such blocks came from the arenas, of
/// which glibc makes up to eight per core, each then keeping its own high-water mark. Draining 20,000 one-device
/// notifications to users with 60 KB of tags behind a provider answering in 0.5 s peaked at 209-210 MB with glibc's
/// defaults and 100 MB with this threshold (a fixed threshold, set with `mallopt`, no longer rises). One arena for
/// the process bounded it as well (91 MB) but put every thread's allocations behind one lock: malloc and free were
/// 11.5-12.6 % of a broadcast drain's samples with one arena, 7.5-8.8 % with the threshold.
public enum MallocLargeBlocks {
    /// The threshold set at start-up when the environment sets none: 32 KiB, below a large row's text and above
    /// nearly everything a delivery allocates.
    public static let defaultThreshold = 32 * 1024

    /// Sets glibc's mmap threshold (`mallopt(M_MMAP_THRESHOLD)`) to `bytes` unless the operator set one: a
    /// non-empty `MALLOC_MMAP_THRESHOLD_`, or `glibc.malloc.mmap_threshold` in `GLIBC_TUNABLES` (glibc applies
    /// those itself; an empty `MALLOC_MMAP_THRESHOLD_=`, as an `EnvironmentFile` line may leave, sets nothing and
    /// is ignored). Call it first thing, before other threads allocate.
    /// - Returns: the threshold set in bytes, or nil when the operator's is kept or glibc refused.
    @discardableResult
    public static func mapUnlessConfigured(environment: [String: String], bytes: Int = defaultThreshold) -> Int? {
        if let value = environment["MALLOC_MMAP_THRESHOLD_"], !value.isEmpty { return nil }
        if environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.mmap_threshold=") == true { return nil }
        guard bytes > 0, let count = Int32(exactly: bytes) else { return nil }
        return pz_set_malloc_mmap_threshold(count) == 1 ? bytes : nil
    }
}
