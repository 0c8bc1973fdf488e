import Testing
@testable import Worker

@Suite struct MallocLargeBlocksTests {
    @Test(arguments: [["MALLOC_MMAP_THRESHOLD_": "65536"], ["GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.mmap_threshold=4096"]])
    func anOperatorsThresholdIsKept(_ environment: [String: String]) {
        #expect(MallocLargeBlocks.mapUnlessConfigured(environment: environment) == nil)
    }

    /// glibc's own starting threshold (128 KiB), so the test process allocates much as before. An empty
    /// `MALLOC_MMAP_THRESHOLD_=` sets nothing in glibc, so the worker's threshold applies.
    @Test(arguments: [[:], ["MALLOC_MMAP_THRESHOLD_": ""], ["GLIBC_TUNABLES": "glibc.malloc.arena_max=2"]])
    func otherwiseGlibcTakesTheThreshold(_ environment: [String: String]) {
        #expect(MallocLargeBlocks.mapUnlessConfigured(environment: environment, bytes: 128 * 1024) == 128 * 1024)
        #expect(MallocLargeBlocks.mapUnlessConfigured(environment: environment, bytes: 0) == nil)
    }
}
