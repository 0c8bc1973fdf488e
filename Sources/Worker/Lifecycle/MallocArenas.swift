internal import CPushizoGlibcShims

/// How many glibc malloc arenas the worker process uses.
///
/// glibc gives threads that allocate at the same time arenas of their own, up to eight per core, and an arena
/// keeps the memory freed into it. A claimed batch is a few large buffers (libpq's result, then the rows' text:
/// up to 200 rows of 64 KiB user tags each), made on one thread and freed on others, so each arena came to hold
/// its own high-water mark: peak RSS 147 MB draining one-device notifications to users with 60 KB of tags each,
/// 79 MB with one arena, at the same throughput and CPU (100,000-delivery drains, four alternating pairs). Small
/// allocations, most of them, are served from glibc's per-thread cache without the arena's lock either way.
public enum MallocArenas {
    /// The limit set at start-up when the environment sets none.
    public static let defaultLimit = 1

    /// Sets glibc's arena limit (`mallopt(M_ARENA_MAX)`) to `limit` unless the operator set one: a non-empty
    /// `MALLOC_ARENA_MAX`, or a positive `glibc.malloc.arena_max` in `GLIBC_TUNABLES` (glibc applies those itself;
    /// an empty `MALLOC_ARENA_MAX=` or `glibc.malloc.arena_max=`, as an `EnvironmentFile` line may leave, sets
    /// nothing and is ignored). Call it first thing, before other threads allocate: arenas already made stay.
    /// - Returns: the limit set, or nil when the operator's is kept or glibc refused.
    @discardableResult
    public static func limitUnlessConfigured(environment: [String: String], limit: Int = defaultLimit) -> Int? {
        if let value = environment["MALLOC_ARENA_MAX"], !value.isEmpty { return nil }
        if let tunables = environment["GLIBC_TUNABLES"], tunables.split(separator: ":").contains(where: { entry in
            // Only a value glibc takes as a limit: an empty one (`glibc.malloc.arena_max=`) sets none.
            guard entry.hasPrefix("glibc.malloc.arena_max="), let value = Int(entry.dropFirst("glibc.malloc.arena_max=".count))
            else { return false }
            return value > 0
        }) {
            return nil
        }
        guard limit > 0, let count = Int32(exactly: limit) else { return nil }
        return pz_set_malloc_arena_limit(count) == 1 ? limit : nil
    }
}
