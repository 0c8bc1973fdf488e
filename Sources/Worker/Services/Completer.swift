import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// Collects completions from concurrent sends and writes them in batches (one transaction per batch), so
/// writing events costs a round trip per batch rather than per delivery.
///
/// While a completion waits it holds its delivery's concurrency slot (``pending`` counts against the
/// claim loop's free capacity), so claiming stops when completions back up, and its lease is kept alive
/// (renewed, fenced, whenever less than half of it is left), so no other worker sends the delivery again.
/// A batch PostgreSQL refuses is split until the refused completions stand alone; those are retried alone
/// with backoff (logged at most once a minute) while the others are written (``CompletionBacklog``). At
/// shutdown the final flush ends at a deadline: what is still unwritten is logged and counted
/// (``unwritten``); those leases then run out and the deliveries are sent again with the same `apns-id`.
final class Completer: Sendable {
    private struct State {
        var backlog: CompletionBacklog
        var pages = PageLedger()
        var finishing = false
        var deadline: ContinuousClock.Instant?
    }

    private let state: Mutex<State>
    private let wake = WakeSignal()
    private let database: PostgresClient
    private let logger: Logger
    private let batchSize: Int
    /// How long a completion may wait for companions before its batch is written.
    private let maximumDelay: Duration
    /// How long a claim lasts (`PUSHIZO_LEASE_SECONDS`), for lease renewals.
    private let lease: Duration
    private let onProgress: @Sendable () -> Void
    private let settledCount = Atomic<Int>(0)
    private let lostLeaseCount = Atomic<Int>(0)
    private let unwrittenCount = Atomic<Int>(0)
    private let refusalLog = LogRateLimiter(interval: .seconds(60))
    /// The write loop's progress stamp, for the systemd watchdog.
    let heartbeat = LoopHeartbeat(name: "completer")
    private let metrics: WorkerMetrics?
    /// Whether the queue is Citus-distributed (``QueueTopology/lanes(_:)``): completions and renewals are then
    /// written lane by lane.
    private let distributed: @Sendable () -> Bool

    /// - Parameters:
    ///   - lease: the claim's lifetime; leases of waiting completions are renewed by this much.
    ///   - onProgress: called after each write (slots may have become free).
    ///   - metrics: where batch write durations and written / ignored completions are counted.
    ///   - distributed: whether the queue is Citus-distributed, asked before each write.
    init(
        database: PostgresClient, logger: Logger, lease: Duration, batchSize: Int = 500,
        maximumDelay: Duration = .milliseconds(5), onProgress: @escaping @Sendable () -> Void = {}, metrics: WorkerMetrics? = nil,
        distributed: @escaping @Sendable () -> Bool = { false }
    ) {
        self.metrics = metrics
        self.distributed = distributed
        self.database = database
        self.logger = logger
        self.batchSize = batchSize
        self.maximumDelay = maximumDelay
        self.lease = lease
        self.onProgress = onProgress
        state = Mutex(State(backlog: CompletionBacklog(batchSize: batchSize)))
    }

    /// Completions written so far.
    var settled: Int { settledCount.load(ordering: .relaxed) }
    /// Completions ignored because the delivery had been claimed again (fence mismatch).
    var lostLeases: Int { lostLeaseCount.load(ordering: .relaxed) }
    /// Completions not written yet (queued, being written, or set aside after a refusal).
    var pending: Int { state.withLock { $0.backlog.count } }
    /// Completions given up at the shutdown deadline.
    var unwritten: Int { unwrittenCount.load(ordering: .relaxed) }

    /// Queues one completion; it is written within about `maximumDelay`.
    /// - Parameter leaseExpiry: when the claim it completes runs out (its lease is renewed before that).
    func add(_ completion: DeliveryCompletion, leaseExpiry: ContinuousClock.Instant? = nil) {
        let queued = state.withLock { state in
            state.backlog.add(CompletionBacklog.Entry(completion: completion, leaseExpiry: leaseExpiry))
            return state.backlog.queuedCount
        }
        if queued == 1 || queued >= batchSize { wake.signal() }
    }

    /// See ``CompletionBacklog/adopt(source:subscriptionID:fence:leaseExpiry:)``: `true` when a completion of this
    /// delivery still waits here, so the new claim must not be sent.
    func adopt(_ delivery: ClaimedDelivery) -> Bool {
        // A row's or page's first lease (fence 1) has nothing waiting here: no lock taken (see the backlog's check).
        guard delivery.fence > 1 else { return false }
        return state.withLock {
            $0.backlog.adopt(
                source: delivery.source, subscriptionID: delivery.subscriptionID, fence: delivery.fence,
                leaseExpiry: delivery.leaseExpiry)
        }
    }

    /// Counts the deliveries of leased pages among `deliveries` as handed out (``PageLedger``), before any is
    /// sent: the completion that writes a page's last one deletes the page.
    func pagesHandedOut(_ deliveries: [ClaimedDelivery]) {
        var counts: [PageLedger.Lease: Int] = [:]
        for delivery in deliveries {
            guard let page = delivery.source.pageID else { continue }
            counts[PageLedger.Lease(page: page, fence: delivery.fence), default: 0] += 1
        }
        guard !counts.isEmpty else { return }
        state.withLock { state in
            for (lease, count) in counts { state.pages.handedOut(page: lease.page, fence: lease.fence, deliveries: count) }
        }
    }

    /// Asks ``run()`` to write what is left and return, at the latest at `deadline` (then what is left is
    /// logged and counted in ``unwritten``).
    func finish(deadline: ContinuousClock.Instant) {
        state.withLock {
            $0.finishing = true
            $0.deadline = deadline
        }
        wake.signal()
    }

    /// The write loop; returns after ``finish(deadline:)`` once everything is written or the deadline passed.
    func run() async {
        var failures = 0
        defer { heartbeat.finished() }
        while true {
            heartbeat.working()
            await renewLeases()
            let now = ContinuousClock.now
            let (next, finishing, deadline, nextRetry) = state.withLock { state in
                (state.backlog.nextBatch(now: now), state.finishing, state.deadline, state.backlog.nextIsolatedRetry)
            }
            let batch = next.entries
            if finishing, let deadline, now >= deadline {
                if !batch.isEmpty { state.withLock { _ = $0.backlog.refused(batch, dataError: false, now: now) } }
                giveUp()
                return
            }
            if batch.isEmpty {
                if finishing && nextRetry == nil { return }
                // Wake for set-aside completions' retries and for lease renewals.
                var wait = min(.seconds(1), lease / 4)
                if let nextRetry { wait = min(wait, max(.milliseconds(10), nextRetry - now)) }
                if let deadline { wait = min(wait, max(.milliseconds(10), deadline - now)) }
                heartbeat.waiting(for: wait)
                await wake.wait(timeout: wait)
                continue
            }
            // Give concurrent sends a moment to join a small batch.
            var full = batch
            if batch.count < batchSize && !next.isSplit && !finishing && maximumDelay > .zero {
                try? await Task.sleep(for: maximumDelay)
                full += state.withLock { $0.backlog.takeQueued(upTo: batchSize - batch.count) }
            }
            await write(full, failures: &failures, deadline: deadline)
            onProgress()
        }
    }

    private func write(_ batch: [CompletionBacklog.Entry], failures: inout Int, deadline: ContinuousClock.Instant?) async {
        let completions = batch.map(\.completion)
        let started = ContinuousClock.now
        let finishedPages = state.withLock { $0.pages.finished(by: completions) }
        let lanes = distributed()
        do {
            let applied = try await database.withConnection { connection in
                try CompletionStore.complete(on: connection, completions, finishedPages: finishedPages, lanes: lanes)
            }
            state.withLock { $0.pages.written(completions) }
            metrics?.completionBatchFinished(startedAt: started, written: applied, ignored: batch.count - applied, failed: false)
            failures = 0
            state.withLock { $0.backlog.written(batch) }
            settledCount.add(applied, ordering: .relaxed)
            await requeueIfResumed(completions)
            if applied < batch.count {
                lostLeaseCount.add(batch.count - applied, ordering: .relaxed)
                logger.warning(
                    "completions ignored: their deliveries were claimed again after the lease expired",
                    ["count": "\(batch.count - applied)"])
            }
        } catch {
            metrics?.completionBatchFinished(startedAt: started, written: 0, ignored: 0, failed: true)
            let dataError = (error as? PostgresError).map { $0.code == .queryFailed && !$0.isSessionLevel } ?? false
            let now = ContinuousClock.now
            let refusal = state.withLock { $0.backlog.refused(batch, dataError: dataError, now: now) }
            switch refusal {
            case .split:
                break
            case .isolated(let source, let count, let retryIn):
                if refusalLog.allow("isolated") {
                    logger.error(
                        "completion refused by the database; retrying it alone with backoff while the others are written "
                            + "(more such lines within a minute are not logged)",
                        [
                            "delivery": "\(source)", "failures": "\(count)",
                            "retry_in_s": String(format: "%.2f", retryIn.inSeconds),
                            "set_aside": "\(state.withLock { $0.backlog.isolatedCount })", "error": "\(error)",
                        ])
                }
            case .requeued:
                failures += 1
                var delay = min(.seconds(5), .milliseconds(100) * (1 << min(failures, 6)), lease / 4)
                if let deadline { delay = min(delay, max(.zero, deadline - now)) }
                if refusalLog.allow("requeued") {
                    logger.error(
                        "writing completions failed; keeping them and retrying",
                        ["count": "\(batch.count)", "error": "\(error)", "retry_in_s": String(format: "%.1f", delay.inSeconds)])
                }
                try? await Task.sleep(for: delay)
            }
        }
    }

    /// The deliveries of `completions` put back for a paused channel whose pause an operator ended while they
    /// were in flight are made due again (``ClaimPauses/requeueIfResumed(_:on:)``). A failure is logged and left:
    /// an operator's next `resume` of the channel requeues them.
    private func requeueIfResumed(_ completions: [DeliveryCompletion]) async {
        let held = Set(completions.compactMap { completion in
            completion.heldByPausedChannel.flatMap { provider in
                completion.claimedAs.map { ClaimPauses.HeldChannel(app: $0.appID, provider: provider) }
            }
        })
        guard !held.isEmpty, !distributed() else { return }
        do {
            let requeued = try await database.withConnection { try ClaimPauses.requeueIfResumed(held, on: $0) }
            if requeued > 0 {
                logger.info("deliveries held for a paused channel are due again: the channel was resumed meanwhile",
                            ["count": "\(requeued)"])
            }
        } catch {
            logger.warning("could not check whether paused channels were resumed", ["error": "\(error)"])
        }
    }

    /// Renews, fenced, the leases of waiting completions that have less than half a lease left.
    private func renewLeases() async {
        let now = ContinuousClock.now
        let lease = self.lease
        let due = state.withLock { $0.backlog.leasesToRenew(now: now, lease: lease) }
        guard !due.isEmpty else { return }
        do {
            let rows = due.filter { $0.source.rowID != nil }
            let pages = due.filter { $0.source.pageID != nil }
            let lanes = distributed()
            let renewed = try await database.withConnection { connection in
                // On Citus one router statement per lane; on a single node every row's lane is 0, one statement.
                var renewedRows: Set<Int64> = []
                for (lane, ofLane) in Dictionary(grouping: rows, by: \.lane) {
                    renewedRows.formUnion(try ClaimStore.renewLeases(
                        on: connection, deliveryIDs: ofLane.compactMap(\.source.rowID), fences: ofLane.map(\.fence),
                        lease: lease, lane: lanes ? lane : nil))
                }
                let renewedPages = try DeliveryPageStore.renewLeases(
                    on: connection, pageIDs: pages.compactMap(\.source.pageID), fences: pages.map(\.fence), lease: lease)
                return Set(renewedRows.map(DeliverySource.row) + renewedPages.map(DeliverySource.page))
            }
            // Counted from before the statement: the lease really runs at least this long.
            state.withLock { $0.backlog.renewed(renewed, until: now + lease) }
        } catch {
            if refusalLog.allow("renew") {
                logger.error(
                    "renewing the leases of unwritten completions failed; if they run out, other workers may send those deliveries again",
                    ["count": "\(due.count)", "error": "\(error)"])
            }
        }
    }

    /// At the shutdown deadline: logs and counts what was not written.
    private func giveUp() {
        let left = state.withLock { $0.backlog.removeAll() }
        guard !left.isEmpty else { return }
        unwrittenCount.add(left.count, ordering: .relaxed)
        logger.error(
            "completions not written before the shutdown timeout; their leases will run out and the deliveries will be sent again (same apns-id)",
            [
                "count": "\(left.count)",
                "deliveries": left.prefix(20).map { "\($0.completion.source)" }.joined(separator: ","),
                "events": left.prefix(20).map { "\($0.completion.event)\($0.completion.reason.map { "/\($0)" } ?? "")" }
                    .joined(separator: ","),
            ])
    }
}
