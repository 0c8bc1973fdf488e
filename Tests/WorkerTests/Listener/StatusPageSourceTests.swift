import Foundation
import MetricsServer
import Synchronization
import Testing

@testable import Worker

/// The status page's cache: how often the report is read, whatever the number of requests. Its reads are a
/// counting stand-in and its instants values, so no database and no clock are involved.
@Suite("Status page cache")
struct StatusPageSourceTests {
    @Test func manyRequestsWithinTheLifetimeCostOneRead() {
        let reads = Atomic<Int>(0)
        let source = StatusPageSource {
            reads.add(1, ordering: .relaxed)
            return .success(FleetStatusRendererTests.sample())
        }
        let start = ContinuousClock.now
        for second in 0..<5 {
            let page = source.page(now: start + .seconds(second))
            #expect(page.status == 200 && page.contentType == "text/html; charset=utf-8")
            #expect(page.body.contains("read \(second)s ago"))
        }
        #expect(reads.load(ordering: .relaxed) == 1)
        _ = source.page(now: start + StatusPageSource.cacheLifetime)
        #expect(reads.load(ordering: .relaxed) == 2)
    }

    /// Requests that come while the first report is being read wait for it (one read for all of them); while a
    /// later read is under way they get the previous report at once.
    @Test func concurrentRequestsShareOneRead() async throws {
        let reads = Atomic<Int>(0)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let source = StatusPageSource {
            reads.add(1, ordering: .relaxed)
            entered.signal()
            release.wait()
            return .success(FleetStatusRendererTests.sample())
        }
        let start = ContinuousClock.now
        // Each request on a thread of its own, as the listener's connections are.
        let first = Task { try await onThread { source.page(now: start) } }
        await Self.wait(entered)
        let waiting = (0..<8).map { _ in Task { try await onThread { source.page(now: start) } } }
        release.signal()
        #expect(try await first.value.status == 200)
        for request in waiting { #expect(try await request.value.status == 200) }
        #expect(reads.load(ordering: .relaxed) == 1)

        let later = start + StatusPageSource.cacheLifetime
        let refresh = Task { try await onThread { source.page(now: later) } }
        await Self.wait(entered)
        // The stale report, at once, while the read is under way.
        let meanwhile = try await onThread { source.page(now: later) }
        #expect(meanwhile.status == 200 && meanwhile.body.contains("read 5s ago"))
        release.signal()
        #expect(try await refresh.value.body.contains("read 0s ago"))
        #expect(reads.load(ordering: .relaxed) == 2)
    }

    @Test func aFailedReadIsA503PageThatSaysWhy() {
        let source = StatusPageSource { .failure(.init(reason: "connection refused")) }
        let page = source.page()
        #expect(page.status == 503)
        #expect(page.body.contains("The fleet's status cannot be read: connection refused"))
    }

    /// Waits for `semaphore` on a thread of its own (never on the cooperative pool).
    static func wait(_ semaphore: DispatchSemaphore) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                semaphore.wait()
                continuation.resume()
            }
        }
    }
}
