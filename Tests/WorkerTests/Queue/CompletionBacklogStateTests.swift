import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// The completer's bookkeeping without a database: batches, splitting refused batches, setting aside the
/// completions at fault, lease renewals, adoption by a new claim.
@Suite("Completion backlog bookkeeping")
struct CompletionBacklogStateTests {
    static let start = ContinuousClock.now

    func entry(_ id: Int64, leaseIn seconds: Int? = nil) -> CompletionBacklog.Entry {
        CompletionBacklog.Entry(
            completion: DeliveryCompletion(
                source: .row(id), fence: 1, event: .sent, reason: nil, detailJSON: "{}", nextRunAt: nil),
            leaseExpiry: seconds.map { Self.start + .seconds($0) })
    }

    func ids(_ entries: [CompletionBacklog.Entry]) -> [Int64] { entries.map(\.completion.source.rowID!) }

    /// Writes like the completer: every batch holding a refused id is refused (as a statement would be).
    func drain(_ backlog: inout CompletionBacklog, refusing: Set<Int64>, now: ContinuousClock.Instant) -> (written: [Int64], statements: Int) {
        var written: [Int64] = []
        var statements = 0
        while true {
            let batch = backlog.nextBatch(now: now).entries
            if batch.isEmpty { break }
            statements += 1
            if batch.contains(where: { refusing.contains($0.completion.source.rowID!) }) {
                _ = backlog.refused(batch, dataError: true, now: now)
            } else {
                backlog.written(batch)
                written += ids(batch)
            }
        }
        return (written, statements)
    }

    @Test func everyWaitingCompletionCountsUntilWritten() {
        var backlog = CompletionBacklog(batchSize: 3)
        for id in 1...5 { backlog.add(entry(Int64(id))) }
        #expect(backlog.count == 5)
        let batch = backlog.nextBatch(now: Self.start).entries
        #expect(ids(batch) == [1, 2, 3])
        #expect(backlog.count == 5)  // being written still holds the slots
        backlog.written(batch)
        #expect(backlog.count == 2)
    }

    @Test func aRefusedBatchIsSplitUntilTheBadCompletionStandsAlone() {
        var backlog = CompletionBacklog(batchSize: 100)
        for id in 1...64 { backlog.add(entry(Int64(id))) }
        let (written, statements) = drain(&backlog, refusing: [37], now: Self.start)
        #expect(written.count == 63)
        #expect(!written.contains(37))
        #expect(backlog.count == 1)
        #expect(backlog.isolatedCount == 1)
        // log2(64) levels, two statements each, plus the first: bisection, not one statement per row.
        #expect(statements <= 2 * 6 + 1)
        // Set aside: not offered again before its backoff is over, then offered alone.
        let early = backlog.nextBatch(now: Self.start).entries
        #expect(early.isEmpty)
        let later = backlog.nextBatch(now: Self.start + CompletionBacklog.isolationDelay(failures: 1)).entries
        #expect(ids(later) == [37])
    }

    @Test func aConnectionProblemPutsTheWholeBatchBackInFront() {
        var backlog = CompletionBacklog(batchSize: 2)
        for id in 1...3 { backlog.add(entry(Int64(id))) }
        let batch = backlog.nextBatch(now: Self.start).entries
        let refusal = backlog.refused(batch, dataError: false, now: Self.start)
        #expect(refusal == .requeued)
        #expect(backlog.isolatedCount == 0)
        let again = backlog.nextBatch(now: Self.start).entries
        #expect(ids(again) == [1, 2])
    }

    @Test func theBackoffOfACompletionRefusedAloneGrowsAndIsCapped() {
        #expect(CompletionBacklog.isolationDelay(failures: 1) == .milliseconds(250))
        #expect(CompletionBacklog.isolationDelay(failures: 2) == .milliseconds(500))
        #expect(CompletionBacklog.isolationDelay(failures: 100) == .seconds(30))
    }

    @Test func leasesWithLessThanHalfLeftAreRenewed() {
        var backlog = CompletionBacklog(batchSize: 10)
        backlog.add(entry(1, leaseIn: 1))
        backlog.add(entry(2, leaseIn: 100))
        backlog.add(entry(3))
        let due = backlog.leasesToRenew(now: Self.start, lease: .seconds(10))
        #expect(due.map(\.source) == [.row(1)])
        backlog.renewed([.row(1)], until: Self.start + .seconds(10))
        #expect(backlog.leasesToRenew(now: Self.start, lease: .seconds(10)).isEmpty)
    }

    @Test func aNewClaimOfAWaitingCompletionIsAdoptedNotSentAgain() {
        var backlog = CompletionBacklog(batchSize: 10)
        backlog.add(entry(7))
        let adopted = backlog.adopt(source: .row(7), fence: 9, leaseExpiry: nil)
        #expect(adopted)
        let unknown = backlog.adopt(source: .row(8), fence: 9, leaseExpiry: nil)
        #expect(!unknown)
        let batch = backlog.nextBatch(now: Self.start).entries
        #expect(batch.first?.completion.fence == 9)
        // Being written: the outcome of the old fence is not known yet, so it is not adopted.
        let inWrite = backlog.adopt(source: .row(7), fence: 10, leaseExpiry: nil)
        #expect(!inWrite)
    }

    @Test func givingUpEmptiesEverything() {
        var backlog = CompletionBacklog(batchSize: 2)
        for id in 1...4 { backlog.add(entry(Int64(id))) }
        let batch = backlog.nextBatch(now: Self.start).entries
        _ = backlog.refused(batch, dataError: true, now: Self.start)
        let left = backlog.removeAll()
        #expect(Set(ids(left)) == [1, 2, 3, 4])
        #expect(backlog.count == 0)
    }
}
