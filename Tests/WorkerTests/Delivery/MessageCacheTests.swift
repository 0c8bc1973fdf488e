import DeliveryCore
import Foundation
import Synchronization
import Testing
@testable import Worker

@Suite("Message cache")
struct MessageCacheTests {
    @Test func messageCacheParsesOncePerVersionAndReportsProblems() async {
        let loads = Counter()
        let good = UUID(), huge = UUID(), bad = UUID()
        let read: @Sendable ([UUID]) -> [UUID: MessageStore.StoredMessage] = { ids in
            loads.increment()
            var result: [UUID: MessageStore.StoredMessage] = [:]
            for id in ids {
                switch id {
                case good: result[id] = .init(version: "7", byteCount: 26, json: #"{"contents": {"en": "hi"}}"#)
                case huge: result[id] = .init(version: "1", byteCount: 9_000_000, json: nil)
                case bad: result[id] = .init(version: "1", byteCount: 10, json: #"{"ttl": -1}"#)
                default: break
                }
            }
            return result
        }
        let cache = MessageCache(load: { read($0) })
        cache.prefetch([(good, "7"), (huge, "1"), (bad, "1")], reading: read)
        #expect(loads.value == 1)
        // Cached at these versions: nothing is read again.
        cache.prefetch([(good, "7"), (bad, "1")], reading: read)
        #expect(loads.value == 1)
        guard case .success = await cache.message(for: good, version: "7") else {
            Issue.record("valid message refused")
            return
        }
        guard case .failure(let tooLarge) = await cache.message(for: huge, version: "1"),
            case .failed(let reason, _, _) = tooLarge.outcome
        else {
            Issue.record("oversized message accepted")
            return
        }
        #expect(reason == DeliveryReason.payloadTooLarge)
        guard case .failure(let invalid) = await cache.message(for: bad, version: "1"),
            case .failed(let badReason, _, _) = invalid.outcome
        else {
            Issue.record("invalid message accepted")
            return
        }
        #expect(badReason == DeliveryReason.invalidMessage)
        #expect(loads.value == 1)
        // A newer row version is read again; a vanished row is skipped.
        _ = await cache.message(for: good, version: "8")
        #expect(loads.value == 2)
        guard case .failure(let gone) = await cache.message(for: UUID(), version: "1") else {
            Issue.record("missing row produced a message")
            return
        }
        #expect(gone.outcome.eventName == "skipped")
    }

    @Test func databaseTroubleIsAnUncountedRetry() async {
        struct Down: Error {}
        let cache = MessageCache(load: { _ in throw Down() })
        guard case .failure(let problem) = await cache.message(for: UUID(), version: "1"),
            case .retry(let reason, _, _) = problem.outcome
        else {
            Issue.record("expected a retry")
            return
        }
        #expect(CompletionFactory.uncountedRetryReasons.contains(reason))
    }
}

final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
