import DeliveryCore
import Foundation

/// The completer's bookkeeping, without I/O: which completions wait, which batch to write next, what a
/// refused batch becomes, whose leases need renewing. ``Completer`` holds one under a lock and carries out
/// its answers (SQL, sleeps, log lines).
///
/// A batch PostgreSQL refuses because of its data (an SQLSTATE error, not a lost connection) is split in
/// halves, each written on its own, until the completions at fault stand alone; those are set aside and
/// retried alone with a growing backoff (``isolationDelay(failures:)``) while the rest are written. A
/// batch refused for a connection problem goes back, whole, to the front of the queue.
struct CompletionBacklog: Sendable {
    struct Entry: Sendable {
        var completion: DeliveryCompletion
        /// When this worker's claim of the delivery runs out; `nil` when unknown (never renewed).
        var leaseExpiry: ContinuousClock.Instant?
        /// Times this completion was refused alone.
        var failures = 0
        /// Not written again before this instant (set when refused alone).
        var notBefore: ContinuousClock.Instant?
    }

    /// What became of a refused batch.
    enum Refusal: Equatable, Sendable {
        /// Split in halves, written next.
        case split
        /// One completion refused alone: set aside until its backoff is over.
        case isolated(source: DeliverySource, failures: Int, retryIn: Duration)
        /// Not the data's fault (connection problem): back at the front of the queue, whole.
        case requeued
    }

    /// Most completions in one written batch.
    let batchSize: Int
    private var queued: [Entry] = []
    /// Halves of refused batches, written before anything else (last pushed, first written).
    private var splits: [[Entry]] = []
    /// Refused alone, waiting for their `notBefore`.
    private var isolated: [Entry] = []
    /// Completions handed out by ``nextBatch(now:)`` and not yet reported back.
    private(set) var writing = 0

    init(batchSize: Int) {
        self.batchSize = max(1, batchSize)
    }

    /// Completions not yet written: queued, being written, split or set aside. Each holds a concurrency slot.
    var count: Int { queued.count + splits.reduce(0) { $0 + $1.count } + isolated.count + writing }

    /// Completions set aside after being refused alone.
    var isolatedCount: Int { isolated.count }

    /// Completions queued for their first write.
    var queuedCount: Int { queued.count }

    mutating func add(_ entry: Entry) {
        queued.append(entry)
    }

    /// The next batch to write, or an empty one when nothing is due: a half of a refused batch first; else
    /// the set-aside completions whose backoff is over, then queued ones, up to ``batchSize``.
    /// `isSplit`: the batch is a half of a refused one and must be written as it is.
    mutating func nextBatch(now: ContinuousClock.Instant) -> (entries: [Entry], isSplit: Bool) {
        if let split = splits.popLast() {
            writing += split.count
            return (split, true)
        }
        var batch: [Entry] = []
        var waiting: [Entry] = []
        for entry in isolated {
            if batch.count < batchSize, (entry.notBefore ?? now) <= now { batch.append(entry) } else { waiting.append(entry) }
        }
        isolated = waiting
        let take = min(queued.count, batchSize - batch.count)
        batch += queued.prefix(take)
        queued.removeFirst(take)
        writing += batch.count
        return (batch, false)
    }

    /// Up to `limit` more queued completions for a batch being assembled (counted as being written).
    mutating func takeQueued(upTo limit: Int) -> [Entry] {
        let take = min(queued.count, max(0, limit))
        let taken = Array(queued.prefix(take))
        queued.removeFirst(take)
        writing += taken.count
        return taken
    }

    /// The earliest instant a set-aside completion may be written again.
    var nextIsolatedRetry: ContinuousClock.Instant? {
        isolated.compactMap(\.notBefore).min()
    }

    /// `batch` (from ``nextBatch(now:)``) is written.
    mutating func written(_ batch: [Entry]) {
        writing -= batch.count
    }

    /// `batch` (from ``nextBatch(now:)``) was refused.
    /// - Parameter dataError: PostgreSQL refused a statement (SQLSTATE), as opposed to a connection problem.
    mutating func refused(_ batch: [Entry], dataError: Bool, now: ContinuousClock.Instant) -> Refusal {
        writing -= batch.count
        guard dataError else {
            queued.insert(contentsOf: batch, at: 0)
            return .requeued
        }
        if batch.count > 1 {
            let middle = batch.count / 2
            splits.append(Array(batch[middle...]))
            splits.append(Array(batch[..<middle]))
            return .split
        }
        var entry = batch[0]
        entry.failures += 1
        let delay = Self.isolationDelay(failures: entry.failures)
        entry.notBefore = now + delay
        isolated.append(entry)
        return .isolated(source: entry.completion.source, failures: entry.failures, retryIn: delay)
    }

    /// Backoff of a completion refused alone `failures` times: 0.25 s doubling, at most 30 s.
    static func isolationDelay(failures: Int) -> Duration {
        .milliseconds(min(30_000, 250 << min(max(failures - 1, 0), 7)))
    }

    /// Waiting completions (not being written) whose lease runs out within half of `lease`: the rows and pages
    /// whose leases to renew, with the fences this worker holds and their lanes (a page once, however many of its
    /// completions wait).
    func leasesToRenew(now: ContinuousClock.Instant, lease: Duration) -> [(source: DeliverySource, fence: Int64, lane: Int32)] {
        let horizon = now + lease / 2
        var result: [(source: DeliverySource, fence: Int64, lane: Int32)] = []
        var pages: Set<Int64> = []
        func visit(_ entry: Entry) {
            if let expiry = entry.leaseExpiry, expiry <= horizon {
                if let page = entry.completion.source.pageID, !pages.insert(page).inserted { return }
                result.append((entry.completion.source, entry.completion.fence, entry.completion.lane))
            }
        }
        queued.forEach(visit)
        splits.forEach { $0.forEach(visit) }
        isolated.forEach(visit)
        return result
    }

    /// The leases of `sources` now run until `expiry`.
    mutating func renewed(_ sources: Set<DeliverySource>, until expiry: ContinuousClock.Instant) {
        func update(_ entry: inout Entry) {
            if sources.contains(entry.completion.source) { entry.leaseExpiry = expiry }
        }
        for index in queued.indices { update(&queued[index]) }
        for group in splits.indices { for index in splits[group].indices { update(&splits[group][index]) } }
        for index in isolated.indices { update(&isolated[index]) }
    }

    /// This worker claimed `source` again (its lease had run out) while its completion still waits: the
    /// waiting completion takes the new claim's fence and lease, and the delivery must not be sent again.
    /// A page's delivery is told by its subscription too.
    /// - Returns: `false` when no completion of that delivery waits (or it is being written right now).
    mutating func adopt(
        source: DeliverySource, subscriptionID: UUID? = nil, fence: Int64, leaseExpiry: ContinuousClock.Instant?
    ) -> Bool {
        // Every claim raises the fence by one from 0, so a claim with fence 1 is the row's first: nothing of it
        // can wait here. That spares the usual claim a scan of the whole backlog per row.
        guard fence > 1, count > 0 else { return false }
        func take(_ entry: inout Entry) -> Bool {
            guard entry.completion.source == source else { return false }
            if source.pageID != nil, entry.completion.claimedAs?.subscriptionID != subscriptionID { return false }
            entry.completion.fence = fence
            entry.leaseExpiry = leaseExpiry
            return true
        }
        for index in queued.indices where take(&queued[index]) { return true }
        for group in splits.indices { for index in splits[group].indices where take(&splits[group][index]) { return true } }
        for index in isolated.indices where take(&isolated[index]) { return true }
        return false
    }

    /// Empties the backlog (given up at shutdown); returns what was not written.
    mutating func removeAll() -> [Entry] {
        let all = splits.flatMap { $0 } + isolated + queued
        splits = []
        isolated = []
        queued = []
        return all
    }
}
