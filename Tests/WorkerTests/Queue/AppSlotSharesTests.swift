import Foundation
import Testing
@testable import Worker

@Suite("Delivery slots shared between apps")
struct AppSlotSharesTests {
    let broadcast = UUID()
    let slow = UUID()
    let probe = UUID()

    @Test func aLoneAppMayUseAllButTheReserve() {
        var shares = AppSlotShares(concurrency: 2048)
        #expect(shares.reserve == 256)
        #expect(shares.room == .unbounded)
        shares.claimed(broadcast, count: 1000)
        #expect(shares.room.limited == [broadcast: 792])
        shares.claimed(broadcast, count: 792)
        #expect(shares.room.full == [broadcast] && shares.room.limited.isEmpty)
        // An app holding nothing is not bounded beyond the claim's limit: the reserve is its room.
        #expect(!shares.room.full.contains(probe) && shares.room.limited[probe] == nil)
    }

    @Test func busyAppsShareWhatTheReserveLeaves() {
        var shares = AppSlotShares(concurrency: 512)
        shares.claimed(slow, count: 448)
        #expect(shares.room.full == [slow])
        // A second app becomes busy: each may hold (512 - 64) / 2 = 224; the slow one takes nothing until it is
        // back under that, the other up to it.
        shares.claimed(broadcast, count: 10)
        #expect(shares.share == 224)
        #expect(shares.room.full == [slow] && shares.room.limited == [broadcast: 214])
        for _ in 0..<224 { shares.released(slow) }
        #expect(shares.room.full.contains(slow))  // exactly at its share
        shares.released(slow)
        #expect(shares.room.limited[slow] == 1)
    }

    @Test func aReleaseSignalsOnceWhenTheRoomBecomesWorthAClaim() {
        var shares = AppSlotShares(concurrency: 2048)
        shares.claimed(broadcast, count: 1792)
        var signals: [Int] = []
        for released in 1...300 where shares.released(broadcast, worthAClaim: 100) { signals.append(released) }
        #expect(signals == [100])
        // The last app of several leaving: the others' shares grow.
        shares.claimed(slow, count: 2)
        _ = shares.released(slow)
        let left = shares.released(slow)
        #expect(left)
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
