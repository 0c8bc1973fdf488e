import Testing
@testable import Worker

@Suite struct MallocArenasTests {
    @Test func anOperatorsMallocArenaMaxIsKept() {
        #expect(MallocArenas.limitUnlessConfigured(environment: ["MALLOC_ARENA_MAX": "8"]) == nil)
    }

    /// A limit above glibc's own (8 per core), so the test process allocates as before.
    @Test func otherwiseGlibcTakesTheLimit() {
        #expect(MallocArenas.limitUnlessConfigured(environment: [:], limit: 1024) == 1024)
        #expect(MallocArenas.limitUnlessConfigured(environment: [:], limit: 0) == nil)
    }
}
