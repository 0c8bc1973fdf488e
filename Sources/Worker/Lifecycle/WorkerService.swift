import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// Turns one claimed delivery into its completion: checks, rendering, the provider request and the
/// classification of the answer. Never throws: every problem becomes an outcome of that delivery.
public protocol DeliveryProcessing: Sendable {
    /// Called once per claimed batch before its deliveries are processed (e.g. to load shared data in
    /// one round trip).
    func prepare(_ batch: [ClaimedDelivery]) async
    func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion
}

extension DeliveryProcessing {
    public func prepare(_ batch: [ClaimedDelivery]) async {}
}

/// The `run` service: expands notifications, claims due deliveries in batches, sends them concurrently through
/// a ``DeliveryProcessing``, and writes completions back in batches. Wakes on NOTIFY and polls as a floor.
///
/// A delivery holds one of `concurrency` slots from its claim until its completion is written (not merely
/// until its send ends), so claiming stops while completions back up (see ``Completer``).
///
/// Lifecycle (swift-service-lifecycle's shape, without the package): ``run()`` returns after
/// ``requestStop()`` once claiming has stopped, every in-flight send has finished and every completion is
/// written, or `shutdownTimeout` seconds after the stop request (sends still in flight are then cancelled,
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
    private let capacityWake = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let stopRequestedAt = Mutex<ContinuousClock.Instant?>(nil)
    private let inFlight = Atomic<Int>(0)
    private let claimedTotal = Atomic<Int>(0)
    /// Data-error suspects of this worker's expand loop (the loop is its only user; see ``ExpansionSuspects``).
    private let expansionSuspects = Mutex(ExpansionSuspects())
    private let expansionStallLog = LogRateLimiter(interval: 60)
    private let onReady: @Sendable () -> Void
    private let reachedDatabase = Atomic<Bool>(false)
    private let metrics: WorkerMetrics

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
        self.database = database
        self.processor = processor
        self.logger = logger
        let capacityWake = self.capacityWake
        self.completer = Completer(
            database: database, logger: logger.named("completer"), leaseSeconds: configuration.leaseSeconds,
            onProgress: { capacityWake.signal() }, metrics: metrics)
        self.onReady = onReady
        metrics.observe(
            inFlight: { [weak self] in self?.inFlight.load(ordering: .relaxed) ?? 0 },
            pending: { [weak self] in self?.completer.pending ?? 0 })
    }

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
        capacityWake.signal()
    }

    public var isStopping: Bool { stopping.load(ordering: .sequentiallyConsistent) }

    /// Runs until ``requestStop()`` (or, with `exitWhenDrained`, until the queue is empty).
    public func run() async {
        let listener = PostgresListener(
            connectionString: configuration.databaseURL, channels: ["pushizo_wakeup"],
            applicationName: "pushizo-worker-listen")
        await withTaskGroup(of: Void.self) { background in
            background.addTask { await self.listen(listener) }
            if configuration.roles.contains(.expand) {
                background.addTask { await self.expandLoop() }
            }
            background.addTask { await self.completer.run() }
            logger.info(
                "worker running",
                [
                    "worker_id": configuration.workerID, "concurrency": "\(configuration.concurrency)",
                    "claim_batch": "\(configuration.claimBatch)",
                ])
            if configuration.roles.contains(.send) {
                await claimAndSend()
            } else {
                await expandOnlyUntilStop()
            }
            listener.shutdown()
            // The final flush shares the shutdown deadline; completions of sends cancelled at the deadline get
            // one more second.
            let stoppedAt = stopRequestedAt.withLock { $0 } ?? .now
            completer.finish(
                deadline: max(stoppedAt + .milliseconds(Int64(configuration.shutdownTimeout * 1000)), .now + .seconds(1)))
            expansionWake.signal()
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
                if notification.payload == "notifications" { expansionWake.signal() } else { claimWake.signal() }
            case .reconnected:
                // Notifications may have been missed while disconnected: look at both queues now.
                expansionWake.signal()
                claimWake.signal()
            }
        }
    }

    /// An expand-only worker's main loop: it waits for a stop request, or with `exitWhenDrained` for no due
    /// notification left to expand.
    private func expandOnlyUntilStop() async {
        while !isStopping {
            await claimWake.wait(timeout: configuration.pollInterval)
            if configuration.exitWhenDrained,
                (try? await database.withConnection({ try QueueStore.isExpansionDrained(on: $0) })) == true
            {
                logger.notice("no notification left to expand; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                requestStop()
            }
        }
    }

    private func expandLoop() async {
        var failures = 0
        while !isStopping {
            do {
                // Cancellations first: they are cheap and stop work that would otherwise be claimed.
                let swept = try await database.withConnection({ try QueueStore.sweepCanceled(on: $0) })
                databaseReached()
                if let swept {
                    failures = 0
                    logger.info(
                        "canceled notification's pending deliveries skipped",
                        ["notification_id": swept.notificationID.uuidString.lowercased(), "deliveries": "\(swept.skipped)"])
                    await Task.yield()
                    continue
                }
                // One chunk per call, then yield: the next call picks the least recently served notification,
                // so one created during a broadcast is expanded before the broadcast's next chunk.
                let result = try await database.withConnection { connection in
                    try self.expansionSuspects.withLock { try QueueStore.expandNext(on: connection, suspects: &$0) }
                }
                switch result {
                case .expanded(let id, let created)?:
                    failures = 0
                    metrics.expanded(created: created, outcome: "expanded")
                    logger.info("notification expanded", ["notification_id": id.uuidString.lowercased(), "deliveries": "\(created)"])
                    claimWake.signal()
                    continue
                case .expanding(_, let created)?:
                    failures = 0
                    metrics.expanded(created: created, outcome: nil)
                    if created > 0 { claimWake.signal() }
                    await Task.yield()
                    continue
                case .failed(let id, let reason)?:
                    failures = 0
                    metrics.expanded(created: 0, outcome: "failed")
                    logger.warning("notification failed", ["notification_id": id.uuidString.lowercased(), "reason": reason])
                    continue
                case .setAside?:
                    // Suspects pushed behind the others; the next call tries the others (no backoff: a producer's
                    // poisoned notifications must not delay anyone else's).
                    await Task.yield()
                    continue
                case .stalled(_, let sqlState)?:
                    // A fault every chunk meets: fail nothing, wait for the operator (or a new notification, or a
                    // stop request). Only the SQLSTATE is logged; PostgreSQL's own log has the statement and message.
                    failures += 1
                    if expansionStallLog.allow(sqlState) {
                        logger.error(
                            "expansion stalled: every due notification's chunk failed on data since the last one that "
                                + "succeeded; none is failed until a chunk succeeds (check triggers and constraints on deliveries)",
                            [
                                "sqlstate": sqlState,
                                "condition": sqlState.hasPrefix("23") ? "integrity_constraint_violation" : "data_exception",
                                "suspects": "\(expansionSuspects.withLock { $0.suspects.count })",
                            ])
                    }
                    await expansionWake.wait(timeout: min(5.0, 0.1 * pow(2, Double(min(failures, 6)))))
                    continue
                case nil:
                    failures = 0
                }
            } catch {
                failures += 1
                logger.error("expanding notifications failed", ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(min(5.0, 0.1 * pow(2, Double(min(failures, 6))))))
            }
            await expansionWake.wait(timeout: configuration.pollInterval)
        }
    }

    private func claimAndSend() async {
        let sendTask = Task {
            await withDiscardingTaskGroup { sends in
                var failures = 0
                while !isStopping {
                    // Unwritten completions hold their slots: claiming stops while they back up.
                    let free = configuration.concurrency - inFlight.load(ordering: .acquiring) - completer.pending
                    // Wait for room for a worthwhile batch rather than claiming one row at a time.
                    let wanted = min(configuration.claimBatch, configuration.concurrency)
                    if free < max(1, wanted / 2) {
                        await capacityWake.wait(timeout: configuration.pollInterval)
                        continue
                    }
                    let limit = min(wanted, free)
                    var claimed: [ClaimedDelivery]
                    let claimStarted = ContinuousClock.now
                    do {
                        let configuration = self.configuration
                        // Before the statement: the lease (from the database's now()) ends no earlier.
                        let leaseExpiry = ContinuousClock.now + .milliseconds(Int64(configuration.leaseSeconds * 1000))
                        claimed = try await database.withConnection { connection in
                            try QueueStore.claim(
                                on: connection, limit: limit, leaseSeconds: configuration.leaseSeconds,
                                workerID: configuration.workerID)
                        }
                        databaseReached()
                        metrics.claimFinished(startedAt: claimStarted, claimed: claimed.count)
                        for index in claimed.indices { claimed[index].leaseExpiry = leaseExpiry }
                        // A delivery this worker already answered, claimed again because its lease ran out
                        // while the completion waited: the waiting completion takes the new claim; no resend.
                        let fetched = claimed.count
                        claimed.removeAll { completer.adopt($0) }
                        if claimed.count < fetched {
                            logger.warning(
                                "claimed deliveries whose completions still wait; not sending them again",
                                ["count": "\(fetched - claimed.count)"])
                        }
                        failures = 0
                    } catch {
                        failures += 1
                        metrics.claimFinished(startedAt: claimStarted, claimed: 0)
                        logger.error("claiming deliveries failed", ["error": "\(error)"])
                        try? await Task.sleep(for: .seconds(min(5.0, 0.1 * pow(2, Double(min(failures, 6))))))
                        continue
                    }
                    if !claimed.isEmpty {
                        await processor.prepare(claimed)
                        claimedTotal.add(claimed.count, ordering: .relaxed)
                        inFlight.add(claimed.count, ordering: .acquiringAndReleasing)
                        for delivery in claimed {
                            sends.addTask {
                                let completion = await self.processor.process(delivery)
                                self.completer.add(completion, leaseExpiry: delivery.leaseExpiry)
                                self.inFlight.subtract(1, ordering: .acquiringAndReleasing)
                                self.capacityWake.signal()
                            }
                        }
                        if claimed.count == limit { continue }
                    } else if configuration.exitWhenDrained, await isDrained() {
                        logger.notice("queue drained; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                        requestStop()
                        break
                    }
                    await claimWake.wait(timeout: configuration.pollInterval)
                }
            }
        }
        // After a stop request, give in-flight sends `shutdownTimeout` seconds; then cancel them. Their leases
        // expire and another worker sends them again (with the same apns-id).
        let timeout = configuration.shutdownTimeout
        let watchdog = Task {
            while !self.isStopping { try await Task.sleep(for: .milliseconds(200)) }
            let stoppedAt = self.stopRequestedAt.withLock { $0 } ?? .now
            try await Task.sleep(until: stoppedAt + .milliseconds(Int64(timeout * 1000)), clock: .continuous)
            self.logger.error("shutdown timeout: cancelling in-flight sends", ["in_flight": "\(self.inFlight.load(ordering: .relaxed))"])
            sendTask.cancel()
        }
        await sendTask.value
        watchdog.cancel()
    }

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
