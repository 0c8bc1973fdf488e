import Foundation
import Testing
@testable import Worker

/// ``Admission`` driven with values: slots, completions waiting for their write, row text, app shares, the claim's
/// limit, the wait after a claim and the backoff after failed ones.
@Suite("Admission of claims")
struct AdmissionTests {
    let broadcast = UUID()
    let probe = UUID()

    func admission(concurrency: Int = 64, claimBatch: Int = 32, heldTextBudget: Int = 1000) -> Admission {
        Admission(
            concurrency: concurrency, claimBatch: claimBatch, pollInterval: .seconds(1), heldTextBudget: heldTextBudget)
    }

    @Test func aWorkerWithFreeSlotsClaimsAFullBatchAndEveryAppIsBoundedByTheLimitAlone() {
        let admission = admission()
        #expect(admission.minimumClaim == 16)
        #expect(admission.nextStep(pendingCompletions: 0) == .claim(limit: 32, room: .unbounded))
    }

    /// Slots held for rows an expansion chunk may lease at insert count against claims until the chunk settles
    /// them: those it leased are sent as a claim's, the others free again.
    @Test func slotsHeldForALeasingChunkAreSettledIntoSendsAndFreeSlots() {
        var admission = admission()
        // A lone app may hold all but the reserve (16 of 64, half a batch), and the chunk asked for 100.
        #expect(admission.reserve(app: broadcast, upTo: 100, pendingCompletions: 0) == 48)
        #expect(admission.freeSlots(pendingCompletions: 0) == 16)
        #expect(admission.reserve(app: probe, upTo: 100, pendingCompletions: 4) == 12)
        _ = admission.admitReserved(12, app: probe, kept: 0, textBytes: 0, pendingCompletions: 4)
        // 40 leased: sent as claimed; 8 free again.
        let wakes = admission.admitReserved(48, app: broadcast, kept: 40, textBytes: 10, pendingCompletions: 0)
        #expect(wakes.contains(.capacity))
        #expect(admission.sending == 40 && admission.claimedTotal == 40 && admission.heldTextBytes == 10)
        #expect(admission.freeSlots(pendingCompletions: 0) == 24)
        #expect(admission.shares.held[broadcast] == 40)
        // Nothing is held for a chunk while the row text budget is held.
        admission.admit(apps: [probe], textBytes: 1000)
        #expect(admission.reserve(app: probe, upTo: 10, pendingCompletions: 0) == 0)
    }

    /// A small pass may lease more rows than it held slots for (a device registered between its count of a user's
    /// devices and its insert): every row sent is counted in, so the slots come back to exactly the worker's
    /// concurrency once their completions are written, never more.
    @Test func rowsLeasedBeyondTheHeldSlotsAreCountedInAndGiveBackOnlyTheirOwnSlots() {
        var admission = admission()
        #expect(admission.reserve(app: probe, upTo: 1, pendingCompletions: 0) == 1)
        _ = admission.admitReserved(1, app: probe, kept: 3, textBytes: 0, pendingCompletions: 0)
        #expect(admission.sending == 3 && admission.claimedTotal == 3)
        #expect(admission.shares.held[probe] == 3)
        #expect(admission.freeSlots(pendingCompletions: 0) == 61)
        for _ in 0..<3 { _ = admission.completed(app: probe, pendingCompletions: 0) }
        #expect(admission.sending == 0 && admission.shares.held[probe] == nil)
        #expect(admission.freeSlots(pendingCompletions: 0) == 64)
    }

    /// A broadcast paced by its sends waits for its app's room: a send's completion wakes it once that room is
    /// worth a chunk (12: a quarter of the 48 slots apps share), then no more until it waits again; meanwhile its
    /// chunks lease nothing, while another app holding nothing takes what room there is. A wait for any app's room
    /// ends on free slots, which written completions free too.
    @Test func anExpansionWaitingForRoomIsWokenOnceTheRoomIsWorthAChunk() {
        var admission = admission()
        #expect(admission.roomWorthAChunk(broadcast) == 12)
        let held = admission.reserve(app: broadcast, upTo: 100, pendingCompletions: 0)
        #expect(held == 48)
        _ = admission.admitReserved(48, app: broadcast, kept: 48, textBytes: 0, pendingCompletions: 0)
        #expect(admission.roomToLease(broadcast, pendingCompletions: 0) == 0)
        #expect(admission.roomWorthAChunk(broadcast) == 12)
        // Beside it another app holding as many as a large app would share with it: a quarter of 24 each.
        #expect(admission.roomWorthAChunk(probe) == 6)
        #expect(!admission.hasNoRoom(pendingCompletions: 0))
        var roomThere = admission.awaitRoom(apps: [broadcast], pendingCompletions: 0)
        #expect(!roomThere)
        var wakes: [Admission.Wakes] = []
        for _ in 0..<11 { wakes.append(admission.completed(app: broadcast, pendingCompletions: 0)) }
        // 11 of the broadcast's slots free: not worth its chunk; the probe, holding none, may take them.
        #expect(admission.roomToLease(broadcast, pendingCompletions: 0) == 11)
        #expect(!admission.hasRoomWorthAChunk(broadcast, pendingCompletions: 0))
        #expect(admission.hasRoomWorthAChunk(probe, pendingCompletions: 0))
        for _ in 0..<2 { wakes.append(admission.completed(app: broadcast, pendingCompletions: 0)) }
        // The 12th completion leaves the app 12 slots; the 13th finds the wait ended.
        #expect(wakes.map { $0.contains(.expansion) } == Array(repeating: false, count: 11) + [true, false])
        #expect(admission.roomWaits == nil)

        // Room for any app: 64 slots, 35 sending, 20 completions unwritten: 9 free, fewer than a small app's 16.
        #expect(admission.hasNoRoom(pendingCompletions: 29))
        roomThere = admission.awaitRoom(apps: [], pendingCompletions: 20)
        #expect(!roomThere)
        var written = admission.roomChecked(pendingCompletions: 14)
        #expect(written == [])
        written = admission.roomChecked(pendingCompletions: 13)
        #expect(written == .expansion)
        written = admission.roomChecked(pendingCompletions: 0)
        #expect(written == [])
        // Already there: no wait.
        roomThere = admission.awaitRoom(apps: [probe], pendingCompletions: 0)
        #expect(roomThere)
        #expect(admission.roomWaits == nil)
    }

    @Test func unwrittenCompletionsHoldTheirSlotsSoClaimingStopsWhileTheyBackUp() {
        var admission = admission()
        admission.admit(apps: Array(repeating: broadcast, count: 40), textBytes: 0)
        // 24 free: the limit is the largest multiple of an eighth of the batch (4) that fits.
        #expect(admission.nextStep(pendingCompletions: 0) == .claim(limit: 24, room: admission.shares.room))
        // 9 more answered, their completions not yet written: 15 free, below half a batch.
        for _ in 0..<9 { _ = admission.completed(app: broadcast, pendingCompletions: 9) }
        #expect(admission.sending == 31)
        #expect(admission.nextStep(pendingCompletions: 18) == .waitForCapacity(.seconds(1)))
        // Written: 33 free.
        #expect(admission.nextStep(pendingCompletions: 0) == .claim(limit: 32, room: admission.shares.room))
    }

    @Test func aCompletionWakesTheCapacityWaitOnlyWhenTheLoopWouldClaim() {
        var admission = admission()
        admission.admit(apps: Array(repeating: broadcast, count: 64), textBytes: 0)
        // 63 sending, the answered one's completion pending: 0 free.
        #expect(!admission.completed(app: broadcast, pendingCompletions: 1).contains(.capacity))
        for _ in 0..<14 { _ = admission.completed(app: broadcast, pendingCompletions: 0) }
        // 48 sending, one completion pending: 15 free.
        #expect(!admission.completed(app: broadcast, pendingCompletions: 1).contains(.capacity))
        // 47 sending, none pending: 17 free, more than half a batch.
        #expect(admission.completed(app: broadcast, pendingCompletions: 0).contains(.capacity))
    }

    @Test func heldRowTextStopsClaimsUntilAPartIsReleased() {
        var admission = admission()
        admission.admit(apps: [broadcast], textBytes: 999)
        #expect(admission.roomToLease(probe, pendingCompletions: 0) > 0)
        admission.admit(apps: [probe], textBytes: 1)
        #expect(admission.holdsTextBudget)
        #expect(admission.nextStep(pendingCompletions: 0) == .waitForCapacity(.seconds(1)))
        #expect(admission.roomToLease(probe, pendingCompletions: 0) == 0)
        // Releasing a part while the budget was held wakes the capacity wait; with it free no wake-up.
        #expect(admission.released(textBytes: 1) == .capacity)
        #expect(admission.released(textBytes: 999) == [])
        #expect(admission.heldTextBytes == 0)
        if case .claim = admission.nextStep(pendingCompletions: 0) {} else { Issue.record("no claim with the budget free") }
    }

    @Test func theRoomOfALargeAppReachesTheClaimAndAReleaseWorthAClaimWakesTheTurnWait() {
        var admission = admission(concurrency: 512, claimBatch: 200)
        #expect(admission.shares.reserve == 100)
        admission.admit(apps: Array(repeating: broadcast, count: 412), textBytes: 0)
        // The lone broadcast holds all but the reserve: it is full, the claim may still take 100 of others.
        #expect(admission.nextStep(pendingCompletions: 0) == .claim(limit: 100, room: ClaimRoom(full: [broadcast])))
        var wokeClaim = 0
        for _ in 0..<100 {
            if admission.completed(app: broadcast, pendingCompletions: 0).contains(.claim) { wokeClaim += 1 }
        }
        // Its room reached half a batch (100) once, on the hundredth release.
        #expect(wokeClaim == 1)
        #expect(admission.shares.room.limited == [broadcast: 100])
    }

    @Test func aFullClaimClaimsAgainAndAShortOneWaitsForTheNextTurnWithinBounds() {
        var admission = admission()
        #expect(admission.claimSucceeded(kept: 32, limit: 32, nextTurn: .notAsked) == .claimAgain)
        #expect(admission.claimSucceeded(kept: 3, limit: 32, nextTurn: .answered(nil)) == .wait(.seconds(1)))
        #expect(admission.claimSucceeded(kept: 3, limit: 32, nextTurn: .answered(.milliseconds(300))) == .wait(.milliseconds(300)))
        // At least 20 ms, at most the poll interval.
        #expect(admission.claimSucceeded(kept: 0, limit: 32, nextTurn: .answered(.zero)) == .wait(.milliseconds(20)))
        #expect(admission.claimSucceeded(kept: 0, limit: 32, nextTurn: .answered(.seconds(30))) == .wait(.seconds(1)))
        #expect(admission.claimSucceeded(kept: 0, limit: 32, nextTurn: .failed) == .wait(.seconds(1)))
        // Deliveries already answered set aside: short, so the loop waits as after any short claim.
        #expect(admission.claimSucceeded(kept: 30, limit: 32, nextTurn: .notAsked) == .wait(.seconds(1)))
    }

    @Test func failedClaimsBackOffDoublingToFiveSecondsAndASuccessEndsTheRun() {
        var admission = admission()
        let pauses = (0..<8).map { _ in admission.claimFailed() }
        #expect(pauses.prefix(5) == [.milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600), .milliseconds(3200)])
        #expect(pauses.dropFirst(5).allSatisfy { $0 == .seconds(5) })
        _ = admission.claimSucceeded(kept: 0, limit: 32, nextTurn: .notAsked)
        #expect(admission.failures == 0 && admission.claimFailed() == .milliseconds(200))
    }

    @Test func theBatchIsAtMostTheSlotsAndSmallWorkersClaimOneAtATime() {
        let narrow = admission(concurrency: 10, claimBatch: 200)
        #expect(narrow.batch == 10 && narrow.minimumClaim == 5)
        #expect(narrow.nextStep(pendingCompletions: 0) == .claim(limit: 10, room: .unbounded))
        let single = admission(concurrency: 1, claimBatch: 1)
        #expect(single.minimumClaim == 1)
        #expect(single.nextStep(pendingCompletions: 1) == .waitForCapacity(.seconds(1)))
    }

    @Test func theCountsFollowClaimsAndCompletions() {
        var admission = admission()
        admission.admit(apps: [broadcast, broadcast, probe], textBytes: 30)
        #expect(admission.sending == 3 && admission.claimedTotal == 3 && admission.heldTextBytes == 30)
        _ = admission.completed(app: probe, pendingCompletions: 1)
        #expect(admission.sending == 2 && admission.shares.held == [broadcast: 2])
    }
}
