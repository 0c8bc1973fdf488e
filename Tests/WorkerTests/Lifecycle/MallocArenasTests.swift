import Testing
@testable import Worker

@Suite struct MallocArenasTests {
    @Test(arguments: [["MALLOC_ARENA_MAX": "8"], ["GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=4"]])
    func anOperatorsLimitIsKept(_ environment: [String: String]) {
        #expect(MallocArenas.limitUnlessConfigured(environment: environment) == nil)
    }

    /// A limit above glibc's own (8 per core), so the test process allocates as before. An empty
    /// `MALLOC_ARENA_MAX=` sets nothing in glibc, so the worker's limit applies.
    @Test(arguments: [
        [:], ["MALLOC_ARENA_MAX": ""], ["GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"],
        ["GLIBC_TUNABLES": "glibc.malloc.arena_max=:glibc.malloc.tcache_count=0"],
    ])
    func otherwiseGlibcTakesTheLimit(_ environment: [String: String]) {
        #expect(MallocArenas.limitUnlessConfigured(environment: environment, limit: 1024) == 1024)
        #expect(MallocArenas.limitUnlessConfigured(environment: environment, limit: 0) == nil)
    }
}
