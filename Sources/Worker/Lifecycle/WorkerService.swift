import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// Turns one claimed delivery into its completion: checks, rendering, the provider request and the
/// classification of the answer. Never throws: every problem becomes an outcome of that delivery.
public protocol DeliveryProcessing: Sendable {
    /// Called once per claimed batch before its deliveries are processed, on the claim's database connection
    /// and thread, in the claim's own hand-off to the pool: loads data the batch shares in one round trip (the
    /// messages). Must not throw: what it could not load is loaded again, or reported, per delivery.
    func prepare(_ batch: [ClaimedDelivery], on connection: PostgresConnection)
    func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion
    /// Processes a claimed batch (after ``prepare(_:on:)``), calling `completed` once per delivery as soon as its
    /// completion is known, from any task. Returns when every delivery has been completed.
    func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async
}

extension DeliveryProcessing {
    public func prepare(_ batch: [ClaimedDelivery], on connection: PostgresConnection) {}

    /// One task per delivery, each through ``process(_:)``.
    public func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async {
        await withDiscardingTaskGroup { group in
            for delivery in batch {
                group.addTask { completed(delivery, await self.process(delivery)) }
            }
        }
    }
}

/// The `run` service: expands notifications, claims due deliveries in batches, sends them concurrently through
/// a ``DeliveryProcessing``, and writes completions back in batches. Wakes on NOTIFY and polls as a floor.
///
/// A delivery holds one of `concurrency` slots from its claim until its completion is written (not merely
/// until its send ends), so claiming stops while completions back up (see ``Completer``).
///
/// Lifecycle (swift-service-lifecycle's shape, without the package): ``run()`` returns after
/// ``requestStop()`` once claiming has stopped, every in-flight send has finished and every completion is
/// written, or `shutdownTimeout` after the stop request (sends still in flight are then cancelled,
/// and the final flush ends at the same deadline, or one second after the cancelled sends end; what it could
/// not write is logged and counted in ``unwrittenCompletions``).
public final class WorkerService: Sendable {
    private let configuration: WorkerConfiguration
    private let database: PostgresClient
    private let processor: any DeliveryProcessing
    private let logger: Logger
    private let completer: Completer
    private let claimWake = WakeSignal()
    private let expansionWake = WakeSignal()
    private let chunkWake = WakeSignal()
    /// Deliveries the transactional expand lane claimed itself, admitted and split into parts, on their way to the
    /// send tasks (``claimAndSend()`` consumes them; the lane finishes the stream when it ends).
    private let handedOff = AsyncStream.makeStream(of: [(deliveries: [ClaimedDelivery], priority: TaskPriority?)].self)
    private let capacityWake = WakeSignal()
    private let maintenanceWake = WakeSignal()
    private let statisticsWake = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let stopRequestedAt = Mutex<ContinuousClock.Instant?>(nil)
    private let inFlight = Atomic<Int>(0)
    /// The slots each app holds, and the room each may claim (``AppSlotShares``).
    private let slotShares: Mutex<AppSlotShares>
    /// Row text held by claimed batches still being processed (``Swift/Array/heldTextBytes``).
    private let heldTextBytes = Atomic<Int>(0)
    /// Most row text held by batches in flight before the claim loop waits: 32 MiB. The slots bound deliveries
    /// by count; rows of hostile size (64 KiB of user tags each) would make 2048 slots 130 MiB and more while a
    /// slow provider keeps them. One claim may still pass the bound (200 such rows: about 15 MiB).
    static let heldTextBudget = 32 << 20
    private let claimedTotal = Atomic<Int>(0)
    /// Data-error suspects of this worker's expand loop (the loop is its only user; see ``ExpansionSuspects``).
    private let expansionSuspects = Mutex(ExpansionSuspects())
    /// Wake-ups of the slice-only expand tasks (``sliceLoop(wake:)``), one each: the main expand loop signals
    /// them when it may have cut a broadcast into slices.
    private let sliceWakes: [WakeSignal]
    /// The slice-only expand tasks' progress stamps, one each (as ``sliceWakes``), for the systemd watchdog.
    private let sliceHeartbeats: [LoopHeartbeat]
    private let expansionStallLog = LogRateLimiter(interval: .seconds(60))
    private let statisticsFailureLog = LogRateLimiter(interval: .seconds(60))
    /// Cancels the planner statistics refresh in progress, if any (``refreshStatistics()``).
    private let statisticsCanceller = Mutex<PostgresCanceller?>(nil)
    private let onReady: @Sendable () -> Void
    private let reachedDatabase = Atomic<Bool>(false)
    /// The claim loop's progress stamp (the expand-only loop's when this worker does not send), for the
    /// systemd watchdog.
    let claimHeartbeat = LoopHeartbeat(name: "claim loop")
    /// The transactional expand lane's progress stamp, for the systemd watchdog: a pass that never returns (a
    /// statement waiting on a lock forever, a hung connection) stops the pings as a stuck claim does.
    let expansionHeartbeat = LoopHeartbeat(name: "expansion loop")
    /// The chunk loop's progress stamp, as ``expansionHeartbeat``.
    let chunkHeartbeat = LoopHeartbeat(name: "chunk loop")
    #if DEBUG
        /// Test-only faults (debug builds only; release builds do not contain them): while the file named by
        /// `PUSHIZO_TEST_STALL_CLAIM_LOOP` (`PUSHIZO_TEST_STALL_EXPANSION_LOOP`) exists, the claim loop (the
        /// main expand loop) blocks inside an iteration, as a stuck claim (pass) would. `PUSHIZO_TEST_*` is
        /// reserved for the test suite and ignored as configuration.
        private let stallClaimLoopFile = ProcessInfo.processInfo.environment["PUSHIZO_TEST_STALL_CLAIM_LOOP"]
        private let stallExpansionLoopFile = ProcessInfo.processInfo.environment["PUSHIZO_TEST_STALL_EXPANSION_LOOP"]
    #endif
    private let metrics: WorkerMetrics
    /// This host's clock against PostgreSQL's, read with every claim (docs/clocks.md).
    private let clockWatch: DatabaseClockWatch

    /// - Parameters:
    ///   - onReady: called once, after the first successful database round trip of the claim or expand loop
    ///     (the executable sends systemd `READY=1`). While the database cannot be reached the loops retry and
    ///     `onReady` waits; it is never called if the service stops before reaching the database.
    ///   - metrics: where claims, completions, expansions, in-flight sends and the backlog are counted.
    public init(
        configuration: WorkerConfiguration, database: PostgresClient, processor: any DeliveryProcessing,
        logger: Logger, onReady: @escaping @Sendable () -> Void = {}, metrics: WorkerMetrics = WorkerMetrics()
    ) {
        self.metrics = metrics
        self.configuration = configuration
        clockWatch = DatabaseClockWatch(
            bound: configuration.clockOffsetWarning.inSeconds, logger: logger, metrics: metrics)
        slotShares = Mutex(
            AppSlotShares(
                concurrency: configuration.concurrency,
                minimumClaim: max(1, min(configuration.claimBatch, configuration.concurrency) / 2)))
        sliceWakes = (1..<max(configuration.expansionTasks, 1)).map { _ in WakeSignal() }
        sliceHeartbeats = sliceWakes.indices.map { LoopHeartbeat(name: "slice loop \($0 + 1)") }
        self.database = database
        self.processor = processor
        self.logger = logger
        let capacityWake = self.capacityWake
        let claimWake = self.claimWake
        let exitWhenDrained = configuration.exitWhenDrained
        self.completer = Completer(
            database: database, logger: logger.named("completer"), lease: configuration.lease,
            onProgress: {
                capacityWake.signal()
                // A drained queue is only seen once the last completion is written: the claim loop checks again
                // now rather than a poll interval later.
                if exitWhenDrained { claimWake.signal() }
            }, metrics: metrics)
        self.onReady = onReady
        metrics.observe(
            inFlight: { [weak self] in self?.inFlight.load(ordering: .relaxed) ?? 0 },
            pending: { [weak self] in self?.completer.pending ?? 0 })
    }

    /// Slots free for claiming while `sending` deliveries are in flight: unwritten completions hold their
    /// slots too, so claiming stops while they back up.
    private func freeSlots(sending: Int) -> Int {
        configuration.concurrency - sending - completer.pending
    }

    /// The fewest free slots worth a claim: half a batch, rather than claiming one row at a time.
    private var minimumClaim: Int { max(1, min(configuration.claimBatch, configuration.concurrency) / 2) }

    /// Completions given up at the shutdown deadline (0 after a clean stop): their deliveries are sent again
    /// once their leases run out.
    public var unwrittenCompletions: Int { completer.unwritten }

    /// Stops claiming; in-flight sends finish and their events are written before ``run()`` returns.
    /// Safe to call from any thread, any number of times.
    public func requestStop() {
        stopRequestedAt.withLock { $0 = $0 ?? .now }
        if stopping.exchange(true, ordering: .sequentiallyConsistent) { return }
        logger.notice("stop requested: no new claims; finishing in-flight sends", ["in_flight": "\(inFlight.load(ordering: .relaxed))"])
        claimWake.signal()
        expansionWake.signal()
        chunkWake.signal()
        capacityWake.signal()
        maintenanceWake.signal()
        statisticsWake.signal()
        // Otherwise each slice loop would notice the stop only after its poll interval.
        for wake in sliceWakes { wake.signal() }
        if let canceller = statisticsCanceller.withLock({ $0 }) {
            // PQcancel opens a connection to the server and blocks: not on the caller's (possibly cooperative)
            // thread.
            Thread { canceller.cancel() }.start()
        }
    }

    public var isStopping: Bool { stopping.load(ordering: .sequentiallyConsistent) }

    /// Completions written so far and sends in flight now (for `STATUS=` lines).
    var progress: (settled: Int, inFlight: Int) { (completer.settled, inFlight.load(ordering: .relaxed)) }

    /// The loops the systemd watchdog watches besides the HTTP/2 I/O thread: the expand loops only when this
    /// worker expands.
    var watchedLoops: [LoopHeartbeat] {
        [claimHeartbeat, completer.heartbeat]
            + (configuration.roles.contains(.expand) ? [expansionHeartbeat, chunkHeartbeat] + sliceHeartbeats : [])
    }

    /// The queue lag in seconds (``QueueStore/queueLag(on:)``), or nil when the database did not answer.
    func sampleQueueLag() async -> Double? {
        try? await database.withConnection { try QueueStore.queueLag(on: $0) }
    }

    /// Runs until ``requestStop()`` (or, with `exitWhenDrained`, until the queue is empty).
    public func run() async {
        // Behind a transaction-mode pooler without a direct route for it, no LISTEN: the loops poll.
        let listener = configuration.databaseRoute.listenURL.map {
            PostgresListener(connectionString: $0, channels: ["pushizo_wakeup"], applicationName: "pushizo-worker-listen")
        }
        // Only the transactional expand lane hands deliveries to the send tasks.
        if !configuration.roles.contains(.expand) { handedOff.continuation.finish() }
        await withTaskGroup(of: Void.self) { background in
            if let listener { background.addTask { await self.listen(listener) } }
            if configuration.roles.contains(.expand) {
                background.addTask { await self.expandLoop() }
                background.addTask { await self.chunkLoop() }
                for (wake, heartbeat) in zip(sliceWakes, sliceHeartbeats) {
                    background.addTask { await self.sliceLoop(wake: wake, heartbeat: heartbeat) }
                }
            }
            background.addTask { await self.completer.run() }
            background.addTask { await self.statisticsLoop() }
            if let interval = configuration.maintenanceInterval {
                background.addTask { await self.maintenanceLoop(every: interval) }
            }
            logger.info(
                "worker running",
                [
                    "worker_id": configuration.workerID, "concurrency": "\(configuration.concurrency)",
                    "claim_batch": "\(configuration.claimBatch)", "database_route": configuration.databaseRoute.summary,
                ])
            if configuration.roles.contains(.send) {
                await claimAndSend()
            } else {
                await expandOnlyUntilStop()
            }
            listener?.shutdown()
            // The final flush shares the shutdown deadline; completions of sends cancelled at the deadline get
            // one more second.
            let stoppedAt = stopRequestedAt.withLock { $0 } ?? .now
            completer.finish(
                deadline: max(stoppedAt + configuration.shutdownTimeout, .now + .seconds(1)))
            expansionWake.signal()
            chunkWake.signal()
            await background.waitForAll()
        }
        logger.notice(
            "worker stopped",
            [
                "claimed": "\(claimedTotal.load(ordering: .relaxed))", "settled": "\(completer.settled)",
                "lost_leases": "\(completer.lostLeases)", "unwritten": "\(completer.unwritten)",
                "peak_rss_mb": ProcessStatistics.peakResidentBytes().map { String($0 / 1_048_576) } ?? "?",
            ])
    }

    /// Called after each successful round trip of a loop; the first one makes the service ready.
    private func databaseReached() {
        if reachedDatabase.exchange(true, ordering: .acquiringAndReleasing) { return }
        logger.info("database reached; ready")
        onReady()
    }

    // MARK: Loops

    private func listen(_ listener: PostgresListener) async {
        for await event in listener.events() {
            if isStopping { break }
            switch event {
            case .notification(let notification):
                // A hint from one of this worker's own transactions is for the rest of the fleet: the loop that
                // committed it already acts on its work (the expand loops wake the claim loop themselves once
                // deliveries are committed, and keep going while they find notifications). Acted on, each
                // small-notification pass woke the expand loop for an empty pass (its own status update) and
                // the claim loop for an empty claim (its own insert).
                if database.isPooledSession(processID: notification.processID) { continue }
                if notification.payload == "notifications" {
                    expansionWake.signal()
                    chunkWake.signal()
                } else {
                    claimWake.signal()
                }
            case .reconnected:
                // The server may have restarted: the pool's sessions are known again as they are used, so a
                // dead one's process ID, which a new session of another client may get, is not taken for ours.
                database.forgetSessions()
                // Notifications may have been missed while disconnected: look at both queues now.
                expansionWake.signal()
                chunkWake.signal()
                claimWake.signal()
            }
        }
    }

    /// An expand-only worker's main loop: it waits for a stop request, or with `exitWhenDrained` for no due
    /// notification left to expand.
    private func expandOnlyUntilStop() async {
        defer { claimHeartbeat.finished() }
        while !isStopping {
            claimHeartbeat.waiting(for: configuration.pollInterval)
            await claimWake.wait(timeout: configuration.pollInterval)
            claimHeartbeat.working()
            if configuration.exitWhenDrained,
                (try? await database.withConnection({ try QueueStore.isExpansionDrained(on: $0) })) == true
            {
                logger.notice("no notification left to expand; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                requestStop()
            }
        }
    }

    /// The transactional lane of expansion: cancellations, scheduled notifications whose time has come, and
    /// small notifications (id lists) in bulk passes, many per transaction and statement. It never runs a chunk
    /// of a large notification, so a one-device notification is expanded within a pass's time whatever
    /// broadcasts are expanding meanwhile (``chunkLoop()`` and the slice loops take those, on connections of
    /// their own).
    private func expandLoop() async {
        var failures = 0
        // Under a steady stream of small notifications every hint wakes this loop: the checks that usually
        // find nothing (cancellations, scheduled notifications) run at most this often while they find nothing,
        // so a wake-up costs one bulk pass, not three transactions.
        let idleSweepInterval = Duration.seconds(1)
        // Notifications scheduled for later are out of the picks' indexes until released: looked for at most
        // this often while none falls due, so one is taken within about this long after its send_after.
        let idleReleaseInterval = Duration.milliseconds(100)
        var nextSweep = ContinuousClock.now
        var nextRelease = ContinuousClock.now
        // Set after a pass that found small notifications but not a full batch: the next pass starts no earlier.
        var spacedUntil: ContinuousClock.Instant?
        let heartbeat = expansionHeartbeat
        defer {
            heartbeat.finished()
            // Nothing more is handed to the send tasks: they end once what was handed is sent.
            handedOff.continuation.finish()
        }
        // Every wait of the loop says how long it may last before it does, for the watchdog.
        func wait(_ timeout: Duration) async {
            heartbeat.waiting(for: timeout)
            await expansionWake.wait(timeout: timeout)
        }
        while !isStopping {
            if let until = spacedUntil {
                spacedUntil = nil
                let now = ContinuousClock.now
                if now < until {
                    heartbeat.waiting(for: until - now)
                    try? await Task.sleep(until: until, clock: .continuous)
                }
            }
            heartbeat.working()
            #if DEBUG
                await stallWhileFaultFileExists(stallExpansionLoopFile, loop: "expansion loop", variable: "PUSHIZO_TEST_STALL_EXPANSION_LOOP")
            #endif
            do {
                // Cancellations first: they are cheap and stop work that would otherwise be claimed.
                if ContinuousClock.now >= nextSweep {
                    let swept = try await database.withConnection({ try QueueStore.sweepCanceled(on: $0) })
                    databaseReached()
                    if let swept {
                        failures = 0
                        logger.debug(
                            "canceled notification's pending deliveries skipped",
                            ["notification_id": swept.notificationID.uuidString.lowercased(), "deliveries": "\(swept.skipped)"])
                        await Task.yield()
                        continue
                    }
                    nextSweep = .now + idleSweepInterval
                }
                if ContinuousClock.now >= nextRelease {
                    let released = try await database.withConnection { try QueueStore.releaseScheduled(on: $0) }
                    nextRelease = released > 0 ? .now : .now + idleReleaseInterval
                    // A released notification may be large: the chunk loop takes those.
                    if released > 0 { chunkWake.signal() }
                }
                // Small notifications (id lists) in bulk: many per transaction and statement.
                let passStarted = ContinuousClock.now
                let handOff = handOffTerms()
                let (small, handed) = try await database.withConnection { connection in
                    let small = try self.expansionSuspects.withLock {
                        try QueueStore.expandSmallNotifications(on: connection, suspects: &$0)
                    }
                    return (small, handOff.map { self.claimExpanded(small, on: connection, terms: $0) })
                }
                databaseReached()
                if small.picked > 0 {
                    metrics.expandedInBulk(expanded: small.expanded, created: small.created, failed: small.failed.count)
                    if let handed, !handed.parts.isEmpty { handedOff.continuation.yield(handed.parts) }
                    if small.created > 0 && !(handed?.tookAll ?? false) { claimWake.signal() }
                    if !small.chunked.isEmpty { chunkWake.signal() }
                    logger.debug(
                        "small notifications expanded",
                        [
                            "notifications": "\(small.picked)", "expanded": "\(small.expanded)", "deliveries": "\(small.created)",
                            "transactions": "\(small.transactions)", "one_at_a_time": "\(small.fellBack)",
                            "chunked": "\(small.chunked.count)", "deferred": "\(small.deferred)",
                        ])
                    for failed in small.failed {
                        logger.warning(
                            "notification failed", ["notification_id": failed.notificationID.uuidString.lowercased(), "reason": failed.reason])
                    }
                    if let sqlState = small.stalledSQLState {
                        failures += 1
                        logStall(sqlState)
                        await wait(Self.backoff(afterFailures: failures))
                        continue
                    }
                    failures = 0
                    // A full pass, or one that left notifications for the next: more are waiting. Otherwise the
                    // wake flag is sticky: a hint that came during the pass ends the wait below at once.
                    if small.picked >= QueueStore.smallNotificationBatch || small.deferred > 0 {
                        await Task.yield()
                        continue
                    }
                    spacedUntil = passStarted + Self.smallPassSpacing
                }
                failures = 0
            } catch {
                failures += 1
                logger.error("expanding notifications failed", ["error": "\(error)"])
                let pause = Self.backoff(afterFailures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            // The sweep and the release are due again within these intervals even when no hint comes.
            await wait(min(configuration.pollInterval, idleSweepInterval, max(.milliseconds(1), nextRelease - .now)))
        }
    }

    /// The most deliveries a small notifications' pass claims itself (``claimExpanded(_:on:terms:)``); a larger
    /// pass leaves them to the claim loop.
    static let handOffLimit = 100

    /// What a small notifications' pass may claim of what it creates (``claimExpanded(_:on:terms:)``), read before
    /// the pass: nil when this worker does not send, is stopping, or holds its budget of row text.
    private struct HandOffTerms {
        var free: Int
        var room: ClaimRoom
        var leaseExpiry: ContinuousClock.Instant
    }

    private func handOffTerms() -> HandOffTerms? {
        // As for the claim loop: no claim while batches being sent hold the row text budget.
        guard configuration.roles.contains(.send), !isStopping,
            heldTextBytes.load(ordering: .acquiring) < Self.heldTextBudget
        else { return nil }
        return HandOffTerms(
            free: freeSlots(sending: inFlight.load(ordering: .acquiring)), room: slotShares.withLock { $0.room },
            // Before the statement: the lease (from the database's now()) ends no earlier.
            leaseExpiry: .now + configuration.lease)
    }

    /// Claims what a small notifications' pass just created, on the pass's connection right after it, admitted
    /// and split into the parts the send tasks take: a one-device notification does not wait for the claim loop's
    /// next turn (behind a broadcast, a claim of its rows under way). The same claim statement, limited to those
    /// notifications and their apps (their turns, rooms and send limits apply). What it leaves (no room, a limit's
    /// permits, more than ``handOffLimit`` or than the free slots, or an error) is the claim loop's.
    /// - Returns: the parts to send, and whether they are all the pass created.
    private func claimExpanded(_ small: QueueStore.SmallExpansionResult, on connection: PostgresConnection, terms: HandOffTerms)
        -> (parts: [(deliveries: [ClaimedDelivery], priority: TaskPriority?)], tookAll: Bool)
    {
        guard small.created > 0, small.created <= Self.handOffLimit, small.created <= terms.free,
            !small.withDeliveries.isEmpty
        else { return ([], false) }
        let started = ContinuousClock.now
        let claimed: [ClaimedDelivery]
        do {
            claimed = try QueueStore.claim(
                on: connection, limit: small.created, lease: configuration.lease,
                workerID: configuration.workerID, room: terms.room, notifications: small.withDeliveries)
        } catch {
            logger.warning("claiming a pass's deliveries failed; the claim loop takes them", ["error": "\(error)"])
            return ([], false)
        }
        metrics.claimFinished(startedAt: started, endedAt: .now, claimed: claimed.count)
        if let clock = claimed.first?.databaseClock { clockWatch.record(clock) }
        // Nothing is thrown from here on: the claimed rows are leased and must be sent.
        processor.prepare(claimed, on: connection)
        let kept = withoutAdopted(claimed, leaseExpiry: terms.leaseExpiry)
        return (kept.isEmpty ? [] : admit(kept), claimed.count == small.created)
    }

    /// Chunks of notifications that are not small (broadcasts, filters, long lists): one chunk, then the least
    /// recently served notification's next one, so two broadcasts take turns; chunks of unsliced notifications
    /// and slices of sliced broadcasts take turns too (either goes when the other finds nothing). Woken by the
    /// transactional lane when it passed a notification on, by NOTIFY, and polls as a floor.
    private func chunkLoop() async {
        // Its data-error suspects are its own, as the slice loops' are: shared with the transactional lane, a
        // chunk in progress would hold that lane's passes on the lock.
        let suspects = Mutex(ExpansionSuspects())
        var failures = 0
        var slicesFirst = false
        let heartbeat = chunkHeartbeat
        defer { heartbeat.finished() }
        while !isStopping {
            heartbeat.working()
            do {
                let picks: [ExpansionPick] = slicesFirst ? [.slice, .skippingSmall] : [.skippingSmall, .slice]
                slicesFirst.toggle()
                let result = try await database.withConnection { connection -> QueueStore.ExpansionResult? in
                    try suspects.withLock { suspects -> QueueStore.ExpansionResult? in
                        for pick in picks {
                            if let result = try QueueStore.expandNext(on: connection, suspects: &suspects, pick: pick) {
                                return result
                            }
                        }
                        return nil
                    }
                }
                databaseReached()
                if case .expanding = result {
                    // Maybe just cut into slices: the slice tasks take the others.
                    for wake in sliceWakes { wake.signal() }
                }
                switch followUp(result, failures: &failures) {
                case .next:
                    continue
                case .yieldThenNext:
                    await Task.yield()
                    continue
                case .backOff(let pause):
                    heartbeat.waiting(for: pause)
                    await chunkWake.wait(timeout: pause)
                    continue
                case .idle:
                    break
                }
            } catch {
                failures += 1
                logger.error("expanding notifications failed", ["error": "\(error)"])
                let pause = Self.backoff(afterFailures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            // Nothing to chunk: the next look no sooner than this, whatever wakes it. Every new notification sends
            // the same hint, a one-device one too, so under a steady stream of those each wake-up would cost two
            // picks that find nothing; a large notification waits at most this long for its first chunk.
            heartbeat.waiting(for: configuration.pollInterval)
            try? await Task.sleep(for: Self.idleChunkInterval)
            await chunkWake.wait(timeout: max(.zero, configuration.pollInterval - Self.idleChunkInterval))
        }
    }

    /// The least time between two looks of the chunk loop that find nothing (``chunkLoop()``).
    static let idleChunkInterval = Duration.milliseconds(100)

    /// The least time from one pass over small notifications to the next while they keep coming (a pass that
    /// found none, or a full batch, is followed at once): under a steady stream each pass then takes what
    /// arrived meanwhile instead of one or two notifications, and every pass costs the same round trips and
    /// thread wake-ups whatever it carries. The first notification after a quiet spell is not delayed. As the
    /// completer's wait for companions, about 5 ms: a fraction of the latency a provider adds.
    static let smallPassSpacing = Duration.milliseconds(5)

    /// How long a loop waits after `failures` failures in a row: 0.2 s doubling to at most 5 s.
    private static func backoff(afterFailures failures: Int) -> Duration {
        .seconds(min(5.0, 0.1 * pow(2, Double(min(failures, 6)))))
    }

    /// What an expand loop does after a chunk.
    private enum ChunkFollowUp {
        /// Pick again at once.
        case next
        /// Pick again after letting other tasks run.
        case yieldThenNext
        /// A fault every chunk meets: wait this long (or for a wake-up) before picking again.
        case backOff(Duration)
        /// Nothing was due.
        case idle
    }

    /// Metrics, logs and wake-ups of one expansion chunk's `result`, and what the loop does next; `failures`
    /// counts stalls in a row (reset by anything else).
    private func followUp(_ result: QueueStore.ExpansionResult?, failures: inout Int) -> ChunkFollowUp {
        switch result {
        case .expanded(let id, let created)?:
            failures = 0
            metrics.expanded(created: created, outcome: "expanded")
            logger.debug("notification expanded", ["notification_id": id.uuidString.lowercased(), "deliveries": "\(created)"])
            claimWake.signal()
            return .next
        case .expanding(_, let created)?:
            failures = 0
            metrics.expanded(created: created, outcome: nil)
            if created > 0 { claimWake.signal() }
            return .yieldThenNext
        case .failed(let id, let reason)?:
            failures = 0
            metrics.expanded(created: 0, outcome: "failed")
            logger.warning("notification failed", ["notification_id": id.uuidString.lowercased(), "reason": reason])
            return .next
        case .setAside?:
            // Suspects pushed behind the others; the next call tries the others (no backoff: a producer's
            // poisoned notifications must not delay anyone else's).
            return .yieldThenNext
        case .stalled(_, let sqlState)?:
            // A fault every chunk meets: fail nothing, wait for the operator (or a new notification, or a stop
            // request). Only the SQLSTATE is logged; PostgreSQL's own log has the statement and message.
            failures += 1
            logStall(sqlState)
            return .backOff(Self.backoff(afterFailures: failures))
        case nil:
            failures = 0
            return .idle
        }
    }

    /// One of the `PUSHIZO_EXPANSION_TASKS - 1` slice-only expand tasks: chunks of sliced broadcasts
    /// (``ExpansionPick/slice``) while there are any, so one broadcast is expanded by several backends at once;
    /// otherwise it waits for the main expand loop's signal or the poll interval. Its data-error suspects are
    /// its own, as another worker's would be.
    private func sliceLoop(wake: WakeSignal, heartbeat: LoopHeartbeat) async {
        let suspects = Mutex(ExpansionSuspects())
        var failures = 0
        defer { heartbeat.finished() }
        while !isStopping {
            heartbeat.working()
            do {
                let result = try await database.withConnection { connection in
                    try suspects.withLock { try QueueStore.expandNext(on: connection, suspects: &$0, pick: .slice) }
                }
                switch followUp(result, failures: &failures) {
                case .next, .yieldThenNext:
                    await Task.yield()
                    continue
                case .backOff(let pause):
                    heartbeat.waiting(for: pause)
                    await wake.wait(timeout: pause)
                    continue
                case .idle:
                    break
                }
            } catch {
                failures += 1
                logger.error("expanding slices failed", ["error": "\(error)"])
                let pause = Self.backoff(afterFailures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            heartbeat.waiting(for: configuration.pollInterval)
            await wake.wait(timeout: configuration.pollInterval)
        }
    }

    /// The data-lifecycle maintenance (``DataLifecycle``) at start and then every `interval`: this worker does it
    /// when no other worker of the fleet is (advisory lock), and skips the round otherwise.
    private func maintenanceLoop(every interval: Duration) async {
        let settings = configuration.maintenance
        while !isStopping {
            do {
                let report = try await database.withConnection { connection in
                    try DataLifecycle.maintain(
                        on: connection, settings: settings, waitForLock: false,
                        shouldContinue: { !self.isStopping })
                }
                if let report {
                    for problem in report.problems {
                        logger.warning("data-lifecycle maintenance step failed; retried next round", ["problem": problem])
                    }
                    if report.didWork {
                        logger.notice("data-lifecycle maintenance done", report.fields)
                    }
                    if report.expiredDefaultRows > 0 {
                        logger.warning(
                            "events older than the retention were found in delivery_events_default and deleted",
                            ["rows": "\(report.expiredDefaultRows)"])
                    }
                } else {
                    logger.debug("data-lifecycle maintenance skipped: another worker is doing it")
                }
            } catch {
                logger.warning("data-lifecycle maintenance failed; retried next round", ["error": "\(error)"])
            }
            await maintenanceWake.wait(timeout: interval)
        }
    }

    /// Refreshes the planner statistics of the queue's tables when they have grown (``PlannerStatistics``): checks
    /// about once a second, less often after failures or a grown table held by another session. Failures (the
    /// database unreachable: the other loops say so too) are logged once a minute. Also refreshes the tz
    /// database's zone names (``TimeZoneNames``) soon after start and every hour, and brings forward claim turns
    /// that other writers left late (``QueueStore/repairClaimTurns(on:)``) every few seconds.
    private func statisticsLoop() async {
        var setbacks = 0
        var nextZoneRefresh = ContinuousClock.now + TimeZoneNames.firstRefreshDelay
        var nextTurnRepair = ContinuousClock.now + QueueStore.turnRepairInterval
        while !isStopping {
            if ContinuousClock.now >= nextTurnRepair {
                nextTurnRepair = .now + QueueStore.turnRepairInterval
                do {
                    let moved = try await database.withConnection { try QueueStore.repairClaimTurns(on: $0) }
                    if moved > 0 {
                        claimWake.signal()
                        logger.info("claim turns brought forward: deliveries made due outside the worker", ["apps": "\(moved)"])
                    }
                } catch {
                    if !isStopping && statisticsFailureLog.allow("turns") {
                        logger.warning("claim turn repair failed; retried", ["error": "\(error)"])
                    }
                }
            }
            if ContinuousClock.now >= nextZoneRefresh {
                do {
                    let changed = try await database.withConnection { try TimeZoneNames.refresh(on: $0) }
                    if changed > 0 { logger.info("time zone names refreshed", ["changed": "\(changed)"]) }
                    nextZoneRefresh = .now + TimeZoneNames.refreshInterval
                } catch {
                    nextZoneRefresh = .now + TimeZoneNames.retryInterval
                    if !isStopping && statisticsFailureLog.allow("time zones") {
                        logger.warning("time zone names refresh failed; retried", ["error": "\(error)"])
                    }
                }
            }
            do {
                let grown = try await database.withConnection { try PlannerStatistics.grownTables(on: $0) }
                var refresh = PlannerStatistics.Refresh()
                if !grown.isEmpty { refresh = try await refreshStatistics() }
                metrics.plannerStatistics(refresh)
                if !refresh.analyzed.isEmpty {
                    logger.info("planner statistics refreshed: tables grown", ["tables": refresh.analyzed.joined(separator: ",")])
                }
                setbacks = refresh.skipped.isEmpty ? 0 : setbacks + 1
            } catch {
                setbacks += 1
                if !isStopping {
                    metrics.plannerStatisticsFailed()
                    if statisticsFailureLog.allow("statistics") {
                        logger.warning("planner statistics check failed; retried", ["error": "\(error)"])
                    }
                }
            }
            await statisticsWake.wait(timeout: PlannerStatistics.pause(afterSetbacks: setbacks))
        }
    }

    /// ``PlannerStatistics/refresh(on:)`` on a connection of its own, opened for it and closed after: an ANALYZE
    /// of a large table can take seconds, which should neither hold one of the pool's connections from claims
    /// nor hold up a stop. ``requestStop()`` cancels it; a cancel request can land on whatever statement its
    /// connection runs next, which on this connection is none.
    private func refreshStatistics() async throws -> PlannerStatistics.Refresh {
        let client = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: 1,
            applicationName: "pushizo-worker-statistics", poolerMode: configuration.databaseRoute.poolerMode)
        let result: Result<PlannerStatistics.Refresh, any Error>
        do {
            result = .success(try await client.withConnection { connection in
                self.statisticsCanceller.withLock { $0 = connection.makeCanceller() }
                defer { self.statisticsCanceller.withLock { $0 = nil } }
                // A stop requested before the canceller was registered found nothing to cancel.
                guard !self.isStopping else { return PlannerStatistics.Refresh() }
                return try PlannerStatistics.refresh(on: connection)
            })
        } catch {
            result = .failure(error)
        }
        await client.shutdown()
        return try result.get()
    }

    /// Logs a stalled expansion once a minute per SQLSTATE. Only the SQLSTATE is logged; PostgreSQL's own log
    /// has the statement and message.
    private func logStall(_ sqlState: String) {
        guard expansionStallLog.allow(sqlState) else { return }
        logger.error(
            "expansion stalled: every due notification's chunk failed on data since the last one that "
                + "succeeded; none is failed until a chunk succeeds (check triggers and constraints on deliveries)",
            [
                "sqlstate": sqlState,
                "condition": sqlState.hasPrefix("23") ? "integrity_constraint_violation" : "data_exception",
                "suspects": "\(expansionSuspects.withLock { $0.suspects.count })",
            ])
    }

    private func claimAndSend() async {
        let sendTask = Task {
            await withDiscardingTaskGroup { sends in
                // What the transactional expand lane claimed itself, sent beside the claim loop's batches.
                sends.addTask {
                    await withDiscardingTaskGroup { handed in
                        for await parts in self.handedOff.stream {
                            for (part, priority) in parts {
                                handed.addTask(priority: priority) { [part] in await self.send(part) }
                            }
                        }
                    }
                }
                var failures = 0
                defer { claimHeartbeat.finished() }
                while !isStopping {
                    claimHeartbeat.working()
                    #if DEBUG
                        await stallWhileFaultFileExists(stallClaimLoopFile, loop: "claim loop", variable: "PUSHIZO_TEST_STALL_CLAIM_LOOP")
                    #endif
                    let free = freeSlots(sending: inFlight.load(ordering: .acquiring))
                    let wanted = min(configuration.claimBatch, configuration.concurrency)
                    if free < minimumClaim || heldTextBytes.load(ordering: .acquiring) >= Self.heldTextBudget {
                        claimHeartbeat.waiting(for: configuration.pollInterval)
                        await capacityWake.wait(timeout: configuration.pollInterval)
                        continue
                    }
                    let limit = QueueStore.claimLimit(free: free, batch: wanted)
                    let room = slotShares.withLock { $0.room }
                    var claimed: [ClaimedDelivery]
                    // How long to wait after a short claim, asked on the claim's connection in the same hand-off to
                    // the pool (a second hand-off cost two more thread wake-ups per claim); nil after a full one.
                    var nextTurn: Result<(wait: Double?, clock: DatabaseClockReading), any Error>?
                    let claimStarted = ContinuousClock.now
                    do {
                        let configuration = self.configuration
                        // Before the statement: the lease (from the database's now()) ends no earlier.
                        let leaseExpiry = ContinuousClock.now + configuration.lease
                        let processor = self.processor
                        let claimEnded: ContinuousClock.Instant
                        (claimed, claimEnded, nextTurn) = try await database.withConnection { connection in
                            let claimed = try QueueStore.claim(
                                on: connection, limit: limit, lease: configuration.lease,
                                workerID: configuration.workerID, room: room)
                            let claimEnded = ContinuousClock.now
                            // Nothing is thrown from here on: the claimed rows are leased and must be sent.
                            processor.prepare(claimed, on: connection)
                            let nextTurn = claimed.count < limit ? Result { try QueueStore.nextTurn(on: connection) } : nil
                            return (claimed, claimEnded, nextTurn)
                        }
                        databaseReached()
                        metrics.claimFinished(startedAt: claimStarted, endedAt: claimEnded, claimed: claimed.count)
                        // The claim's reading of PostgreSQL's clock, else (nothing claimed) the turn check's.
                        if let clock = claimed.first?.databaseClock ?? (try? nextTurn?.get())?.clock {
                            clockWatch.record(clock)
                        }
                        claimed = withoutAdopted(claimed, leaseExpiry: leaseExpiry)
                        failures = 0
                    } catch {
                        failures += 1
                        metrics.claimFinished(startedAt: claimStarted, claimed: 0)
                        logger.error("claiming deliveries failed", ["error": "\(error)"])
                        let backoff = Self.backoff(afterFailures: failures)
                        claimHeartbeat.waiting(for: backoff)
                        try? await Task.sleep(for: backoff)
                        continue
                    }
                    if !claimed.isEmpty {
                        for (part, priority) in admit(claimed) {
                            sends.addTask(priority: priority) { [part] in await self.send(part) }
                        }
                        if claimed.count == limit { continue }
                    } else if configuration.exitWhenDrained, await isDrained() {
                        logger.notice("queue drained; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                        requestStop()
                        break
                    }
                    let wait = claimWait(after: nextTurn)
                    claimHeartbeat.waiting(for: wait)
                    await claimWake.wait(timeout: wait)
                }
            }
        }
        // After a stop request, give in-flight sends `shutdownTimeout`; then cancel them. Their leases
        // expire and another worker sends them again (with the same apns-id).
        let timeout = configuration.shutdownTimeout
        let watchdog = Task {
            while !self.isStopping { try await Task.sleep(for: .milliseconds(200)) }
            let stoppedAt = self.stopRequestedAt.withLock { $0 } ?? .now
            try await Task.sleep(until: stoppedAt + timeout, clock: .continuous)
            self.logger.error("shutdown timeout: cancelling in-flight sends", ["in_flight": "\(self.inFlight.load(ordering: .relaxed))"])
            sendTask.cancel()
        }
        await sendTask.value
        watchdog.cancel()
    }

    /// `claimed` with its lease expiry set, less the deliveries this worker already answered: one claimed again
    /// because its lease ran out while the completion waited gives the waiting completion the new claim, and is
    /// not sent again.
    private func withoutAdopted(_ claimed: [ClaimedDelivery], leaseExpiry: ContinuousClock.Instant) -> [ClaimedDelivery] {
        var claimed = claimed
        for index in claimed.indices { claimed[index].leaseExpiry = leaseExpiry }
        let fetched = claimed.count
        claimed.removeAll { completer.adopt($0) }
        if claimed.count < fetched {
            logger.warning(
                "claimed deliveries whose completions still wait; not sending them again",
                ["count": "\(fetched - claimed.count)"])
        }
        return claimed
    }

    /// Counts claimed deliveries in: their slots (per app and in all) and their row text. Returns the parts their
    /// sends run as (``splitByShare(_:)``), each to be passed to ``send(_:)``.
    private func admit(_ claimed: [ClaimedDelivery]) -> [(deliveries: [ClaimedDelivery], priority: TaskPriority?)] {
        slotShares.withLock { shares in
            for delivery in claimed { shares.claimed(delivery.appID) }
        }
        claimedTotal.add(claimed.count, ordering: .relaxed)
        inFlight.add(claimed.count, ordering: .acquiringAndReleasing)
        heldTextBytes.add(claimed.heldTextBytes, ordering: .acquiringAndReleasing)
        return Self.splitByShare(claimed)
    }

    /// Sends one admitted part and hands each completion to the completer, releasing its slot.
    private func send(_ part: [ClaimedDelivery]) async {
        await processor.process(batch: part) { delivery, completion in
            self.completer.add(completion, leaseExpiry: delivery.leaseExpiry)
            if self.slotShares.withLock({ $0.released(delivery.appID, worthAClaim: self.minimumClaim) }) {
                // An app short of room for the last claim has some again.
                self.claimWake.signal()
            }
            let sending = self.inFlight.subtract(1, ordering: .acquiringAndReleasing).newValue
            // Only when the claim loop would claim: a wake-up per answer is a hop to the pool (and a fresh wait)
            // for nothing while the slot waits for its write.
            if self.freeSlots(sending: sending) >= self.minimumClaim { self.capacityWake.signal() }
        }
        // The part's rows are released with this task.
        let held = part.heldTextBytes
        let before = heldTextBytes.subtract(held, ordering: .acquiringAndReleasing).oldValue
        if before >= Self.heldTextBudget { capacityWake.signal() }
    }

    /// A claimed batch in the parts its sends run as, each with its task priority: the deliveries of apps with at
    /// most ``smallShare`` in the batch first, at high priority, then the rest at the default one (one part when
    /// the batch is all of one kind). Each app's deliveries stay together, in claim order.
    static func splitByShare(_ claimed: [ClaimedDelivery]) -> [(deliveries: [ClaimedDelivery], priority: TaskPriority?)] {
        var counts: [UUID: Int] = [:]
        for delivery in claimed { counts[delivery.appID, default: 0] += 1 }
        guard counts.count > 1 else { return [(claimed, nil)] }
        var small: [ClaimedDelivery] = []
        var large: [ClaimedDelivery] = []
        for delivery in claimed {
            if counts[delivery.appID, default: 0] <= smallShare { small.append(delivery) } else { large.append(delivery) }
        }
        return [(small, TaskPriority.high), (large, nil)].filter { !$0.0.isEmpty }
    }

    /// The most deliveries an app may have in a claimed batch for them to be sent at high priority: a few
    /// one-device notifications, not a share of a broadcast.
    static let smallShare = 8

    /// How long a claim loop whose claim came back short waits: the poll interval, or less when an app's claim
    /// turn comes sooner (a delivery falls due, a limited app's bucket holds its next permit: `nextTurn`, the
    /// answer of ``QueueStore/nextTurn(on:)``; at least 20 ms, so the fleet's claims for a limited app stay a
    /// few per tenth of a second). When that check failed, the poll interval: the next claim reports a database
    /// error.
    private func claimWait(after nextTurn: Result<(wait: Double?, clock: DatabaseClockReading), any Error>?) -> Duration {
        let poll = configuration.pollInterval
        switch nextTurn.map({ $0.map(\.wait) }) {
        case .success(let seconds?)?:
            return min(poll, max(.milliseconds(20), .seconds(seconds)))
        case .failure(let error)?:
            logger.debug("next claim turn check failed", ["error": "\(error)"])
            return poll
        case .success(nil)?, nil:
            return poll
        }
    }

    #if DEBUG
        /// See ``stallClaimLoopFile``: blocks (stamped as working) while the file at `path` exists, until a stop
        /// request.
        private func stallWhileFaultFileExists(_ path: String?, loop: String, variable: String) async {
            guard let path, FileManager.default.fileExists(atPath: path) else { return }
            logger.warning("test fault: \(loop) stalled (\(variable))")
            while !isStopping && FileManager.default.fileExists(atPath: path) {
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    #endif

    private func isDrained() async -> Bool {
        guard inFlight.load(ordering: .acquiring) == 0, completer.pending == 0 else { return false }
        do {
            return try await database.withConnection { try QueueStore.isDrained(on: $0) }
        } catch {
            logger.warning("drain check failed", ["error": "\(error)"])
            return false
        }
    }
}
