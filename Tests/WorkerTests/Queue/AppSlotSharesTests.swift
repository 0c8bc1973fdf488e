import Foundation
import Testing
@testable import Worker

@Suite("Delivery slots shared between apps")
struct AppSlotSharesTests {
    let broadcast = UUID()
    let slow = UUID()
    let probe = UUID()

    @Test func aLoneAppMayUseAllButTheReserveWhateverSmallAppsHold() {
        var shares = AppSlotShares(concurrency: 2048, minimumClaim: 100)
        #expect(shares.reserve == 256 && shares.small == 100)
        #expect(shares.room == .unbounded)
        shares.claimed(broadcast, count: 1000)
        #expect(shares.room.limited == [broadcast: 792])
        // One-device pushes of another app beside it: a small app, which neither halves the broadcast's share
        // nor is held to a share of its own below the reserve's.
        shares.claimed(probe, count: 3)
        #expect(shares.share == 1792)
        #expect(shares.room.limited == [broadcast: 792, probe: 1789])
        shares.claimed(broadcast, count: 792)
        #expect(shares.room.full == [broadcast])
        // An app holding nothing is not bounded beyond the claim's limit: the reserve is its room.
        #expect(shares.room.limited[slow] == nil && !shares.room.full.contains(slow))
    }

    /// What rows leased at insert may take: what an app could hold after claims enough, counted as a large app.
    @Test func theRoomToHoldIsTheShareAnAppWouldHaveAsALargeApp() {
        var shares = AppSlotShares(concurrency: 2048, minimumClaim: 100)
        // Alone: all but the reserve, which stays free for small apps.
        #expect(shares.roomToHold(broadcast) == 1792)
        shares.claimed(broadcast, count: 1000)
        #expect(shares.roomToHold(broadcast) == 792)
        // A second app would be the second large app: half of what the reserve leaves.
        #expect(shares.roomToHold(slow) == 896)
        shares.claimed(slow, count: 896)
        #expect(shares.roomToHold(slow) == 0)
        #expect(shares.roomToHold(broadcast) == 0)
        // A small app holding a few: its share as the third large app (1792 / 3), less what it holds.
        shares.claimed(probe, count: 3)
        #expect(shares.roomToHold(probe) == 594)
    }

    @Test func largeAppsShareWhatTheReserveLeaves() {
        var shares = AppSlotShares(concurrency: 512, minimumClaim: 100)
        #expect(shares.reserve == 100)
        shares.claimed(slow, count: 412)
        #expect(shares.room.full == [slow])
        // A second app grows past the small ones' bound: each may hold (512 - 100) / 2 = 206; the slow one takes
        // nothing until it is back under that, the other up to it.
        shares.claimed(broadcast, count: 150)
        #expect(shares.share == 206)
        #expect(shares.room.full == [slow] && shares.room.limited == [broadcast: 56])
        for _ in 0..<206 { shares.released(slow) }
        #expect(shares.room.full.contains(slow))  // exactly at its share
        shares.released(slow)
        #expect(shares.room.limited[slow] == 1)
    }

    @Test func aReleaseSignalsOnceWhenTheRoomBecomesWorthAClaim() {
        var shares = AppSlotShares(concurrency: 2048, minimumClaim: 100)
        shares.claimed(broadcast, count: 1792)
        var signals: [Int] = []
        for released in 1...300 where shares.released(broadcast, worthAClaim: 100) { signals.append(released) }
        #expect(signals == [100])
        // Another large app falling below the small apps' bound: the others' shares grow.
        shares.claimed(slow, count: 101)
        let stillLarge = shares.released(slow)
        #expect(!stillLarge)
        let small = shares.released(slow)
        #expect(small)
        let again = shares.released(slow)
        #expect(!again)
    }

    @Test func tinyConcurrencyStillLetsEachBusyAppHoldOne() {
        var shares = AppSlotShares(concurrency: 3)
        #expect(shares.reserve == 1)
        shares.claimed(broadcast)
        shares.claimed(slow)
        shares.claimed(probe)
        #expect(shares.share == 1)
        #expect(Set(shares.room.full) == [broadcast, slow, probe])
    }
}
