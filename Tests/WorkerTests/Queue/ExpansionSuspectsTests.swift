import Foundation
import Testing
@testable import Worker

/// The evidence rule for chunks that fail on data (docs/targets.md, "Poison rows"), without a database.
@Suite("Expansion data-error suspects")
struct ExpansionSuspectsTests {
    /// Database times: `t(n)` is n seconds after an arbitrary origin.
    static func t(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_800_000_000 + seconds) }

    @Test func aFailureIsSetAsideUntilAnotherChunkSucceedsThenFailedOnItsNextFailure() {
        var suspects = ExpansionSuspects()
        let poisoned = UUID(), good = UUID()
        #expect(suspects.chunkFailed(poisoned, lastTouched: nil, at: Self.t(1)) == .setAside)
        #expect(suspects.suspects[poisoned]?.failures == 1)
        suspects.chunkCommitted(good, created: 3, at: Self.t(2))
        #expect(suspects.chunkFailed(poisoned, lastTouched: Self.t(1.5), at: Self.t(3)) == .fail)
        #expect(suspects.suspects.isEmpty)
    }

    @Test func aSuccessBeforeTheFirstFailureIsNoEvidence() {
        var suspects = ExpansionSuspects()
        let poisoned = UUID()
        suspects.chunkCommitted(UUID(), created: 1, at: Self.t(1))
        #expect(suspects.chunkFailed(poisoned, lastTouched: nil, at: Self.t(2)) == .setAside)
        // Picked again with nothing in between: every due notification was tried since; the fault is everyone's.
        #expect(suspects.chunkFailed(poisoned, lastTouched: Self.t(2.1), at: Self.t(3)) == .stalled)
        #expect(suspects.suspects[poisoned]?.failures == 2)
    }

    @Test func aChunkThatCreatedNothingIsNoEvidence() {
        var suspects = ExpansionSuspects()
        let poisoned = UUID()
        #expect(suspects.chunkFailed(poisoned, lastTouched: nil, at: Self.t(1)) == .setAside)
        suspects.chunkCommitted(UUID(), created: 0, at: Self.t(2))
        #expect(suspects.lastSuccess == nil)
        #expect(suspects.chunkFailed(poisoned, lastTouched: Self.t(1.1), at: Self.t(3)) == .stalled)
    }

    /// A broken trigger: every notification fails; once the picks come around, it is systemic, and nothing is
    /// ever failed however often it is retried. Once fixed, the suspects expand and are forgotten.
    @Test func aFaultEveryChunkMeetsFailsNothing() {
        var suspects = ExpansionSuspects()
        let ids = (0..<3).map { _ in UUID() }
        var now = 0.0
        for id in ids {
            now += 1
            #expect(suspects.chunkFailed(id, lastTouched: nil, at: Self.t(now)) == .setAside)
        }
        for round in 0..<20 {
            for id in ids {
                now += 1
                #expect(suspects.chunkFailed(id, lastTouched: Self.t(now - 2.5), at: Self.t(now)) == .stalled, "\(round)")
            }
        }
        for id in ids {
            now += 1
            suspects.chunkCommitted(id, created: 1, at: Self.t(now))
        }
        #expect(suspects.suspects.isEmpty)
        #expect(suspects.roundStart == nil)
    }

    /// The hostile producer: three poisoned notifications ahead of a good one. The good one's success is the
    /// evidence against all three, each failed on its next try.
    @Test func threePoisonedAndOneGood() {
        var suspects = ExpansionSuspects()
        let poisoned = (0..<3).map { _ in UUID() }
        for (index, id) in poisoned.enumerated() {
            #expect(suspects.chunkFailed(id, lastTouched: nil, at: Self.t(Double(index))) == .setAside)
        }
        suspects.chunkCommitted(UUID(), created: 1, at: Self.t(10))
        // A new poisoned notification in between starts a round, but does not shield the old suspects.
        #expect(suspects.chunkFailed(UUID(), lastTouched: nil, at: Self.t(11)) == .setAside)
        for (index, id) in poisoned.enumerated() {
            #expect(suspects.chunkFailed(id, lastTouched: Self.t(Double(index) + 0.5), at: Self.t(Double(12 + index))) == .fail)
        }
    }

    /// A touch by another worker since this worker's round began means every due notification was tried.
    @Test func aNotificationTouchedSinceTheRoundBeganMeansEveryoneWasTried() {
        var suspects = ExpansionSuspects()
        #expect(suspects.chunkFailed(UUID(), lastTouched: nil, at: Self.t(1)) == .setAside)
        #expect(suspects.chunkFailed(UUID(), lastTouched: Self.t(0.5), at: Self.t(2)) == .setAside)
        #expect(suspects.chunkFailed(UUID(), lastTouched: Self.t(1.5), at: Self.t(3)) == .stalled)
    }

    /// A suspect whose bump did not land is picked again at once: still "came around".
    @Test func aSuspectPickedAgainWithoutItsBumpIsStalledNotSetAsideForever() {
        var suspects = ExpansionSuspects()
        let id = UUID()
        #expect(suspects.chunkFailed(id, lastTouched: nil, at: Self.t(1)) == .setAside)
        #expect(suspects.chunkFailed(id, lastTouched: nil, at: Self.t(2)) == .stalled)
    }

    @Test func memoryIsBoundedAndStaleSuspectsMakeRoom() {
        var suspects = ExpansionSuspects(capacity: 3, forgetAfter: 100)
        let ids = (0..<5).map { _ in UUID() }
        for (index, id) in ids.enumerated() {
            _ = suspects.chunkFailed(id, lastTouched: nil, at: Self.t(Double(index)))
        }
        #expect(suspects.suspects.count == 3)
        #expect(Set(suspects.suspects.keys) == Set(ids[0..<3]))
        // Long after: the old ones are stale and give way to a new one.
        let late = UUID()
        _ = suspects.chunkFailed(late, lastTouched: nil, at: Self.t(1_000))
        #expect(Set(suspects.suspects.keys) == [late])
        // A suspect that expanded, or ended otherwise, is forgotten.
        suspects.forget(late)
        #expect(suspects.suspects.isEmpty)
    }
}
