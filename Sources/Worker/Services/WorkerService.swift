import Foundation
import Postgres

/// The `run` service: the owner of the worker's services. It makes them, starts them, and shuts them down in one
/// order (``ServiceGroup``):
///
/// - ``ClaimService``: claims due deliveries in batches, sends them concurrently through a
///   ``DeliveryProcessing``; a delivery holds one of `concurrency` slots from its claim until its completion is
///   written (not merely until its send ends), so claiming stops while completions back up (``Admission``);
/// - ``Completer``: writes completions back in batches;
/// - with the `expand` role, ``ExpansionService`` (the transactional lane), ``ChunkService`` and the
///   ``SliceService``s (large notifications); without the `send` role, ``ExpansionDrainService`` in the claim
///   service's place;
/// - ``ListenService`` (NOTIFY hints; every loop polls as a floor), ``StatisticsService``, and
///   ``MaintenanceService`` when `PUSHIZO_MAINTENANCE_INTERVAL` is set; with the `send` role,
///   ``LiveActivityChannelService`` (broadcast channels and their sends);
/// - ``HeartbeatService`` (this process's `worker_heartbeats` row), from the start until every other service has
///   returned, when it marks the row stopped.
///
/// Shutdown order: ``requestStop()`` stops claiming; ``run()`` then waits for in-flight sends to finish, at most
/// `shutdownTimeout` after the stop request (sends still in flight are then cancelled); the `LISTEN` connection
/// closes; the completer flushes what is left, ending at the same deadline or one second after the cancelled
/// sends end (what it could not write is logged and counted in ``unwrittenCompletions``); ``run()`` returns once
/// every service has returned. The caller closes the HTTP/2 connections and the database pool after that
/// (``WorkerRuntime/run()``).
public final class WorkerService: Sendable {
    private let context: WorkerLoopContext
    private let completer: Completer
    /// Nil in a worker without the `send` role.
    private let claims: ClaimService?
    private let statistics: StatisticsService
    /// This process's row in `worker_heartbeats`.
    private let heartbeat: HeartbeatService
    private let outcomes: ExpansionOutcomes
    /// The APNs side of Live Activity broadcast channels (nil: this worker leaves them to others).
    private let liveActivityChannels: LiveActivityChannelSender?
    /// The claim loop's progress stamp (the expand-only loop's when this worker does not send), for the
    /// systemd watchdog.
    let claimHeartbeat = LoopHeartbeat(name: "claim loop")
    /// The transactional expand lane's progress stamp, for the systemd watchdog: a pass that never returns (a
    /// statement waiting on a lock forever, a hung connection) stops the pings as a stuck claim does.
    let expansionHeartbeat = LoopHeartbeat(name: "expansion loop")
    /// The chunk loop's progress stamp, as ``expansionHeartbeat``.
    let chunkHeartbeat = LoopHeartbeat(name: "chunk loop")
    /// The slice-only expand tasks' progress stamps, one each (as ``WorkerLoopContext/sliceWakes``).
    private let sliceHeartbeats: [LoopHeartbeat]

    /// - Parameters:
    ///   - prefetch: what a claimed batch needs loaded on the claim's connection before its sends.
    ///   - onReady: called once, after the first successful database round trip of the claim or expand loop
    ///     (the executable sends systemd `READY=1`). While the database cannot be reached the loops retry and
    ///     `onReady` waits; it is never called if the service stops before reaching the database.
    ///   - metrics: where claims, completions, expansions, in-flight sends and the backlog are counted.
    public init(
        configuration: WorkerConfiguration, database: PostgresClient, processor: any DeliveryProcessing,
        prefetch: ClaimedBatchPrefetch = ClaimedBatchPrefetch(), logger: Logger, onReady: @escaping @Sendable () -> Void = {},
        metrics: WorkerMetrics = WorkerMetrics(), liveActivityChannels: LiveActivityChannelSender? = nil
    ) {
        self.liveActivityChannels = liveActivityChannels
        let context = WorkerLoopContext(
            configuration: configuration, database: database, logger: logger, metrics: metrics, onReady: onReady)
        self.context = context
        sliceHeartbeats = context.sliceWakes.indices.map { LoopHeartbeat(name: "slice loop \($0 + 1)") }
        let exitWhenDrained = configuration.exitWhenDrained
        completer = Completer(
            database: database, logger: logger.named("completer"), lease: configuration.lease,
            onProgress: { [context] in
                context.capacityWake.signal()
                context.completionsWritten()
                // A drained queue is only seen once the last completion is written: the claim loop checks again
                // now rather than a poll interval later.
                if exitWhenDrained { context.claimWake.signal() }
            }, metrics: metrics, distributed: { [context] in context.isDistributed })
        claims = configuration.roles.contains(.send)
            ? ClaimService(
                context: context, processor: processor, prefetch: prefetch, completer: completer, heartbeat: claimHeartbeat) : nil
        statistics = StatisticsService(context: context)
        outcomes = ExpansionOutcomes(context: context)
        let claims = self.claims
        heartbeat = HeartbeatService(context: context, inFlight: { claims?.sending ?? 0 })
        let completer = self.completer
        metrics.observe(inFlight: { claims?.sending ?? 0 }, pending: { completer.pending })
        context.onStopWorker { [weak self] in self?.requestStop() }
    }

    private var configuration: WorkerConfiguration { context.configuration }
    private var logger: Logger { context.logger }

    /// Completions given up at the shutdown deadline (0 after a clean stop): their deliveries are sent again
    /// once their leases run out.
    public var unwrittenCompletions: Int { completer.unwritten }

    /// Stops claiming; in-flight sends finish and their events are written before ``run()`` returns.
    /// Safe to call from any thread, any number of times.
    public func requestStop() {
        guard context.requestStop() else { return }
        logger.notice("stop requested: no new claims; finishing in-flight sends", ["in_flight": "\(claims?.sending ?? 0)"])
        statistics.cancelRefresh()
        heartbeat.beatNow()
    }

    public var isStopping: Bool { context.isStopping }

    /// Tells the loops the queue's form the runtime read at start-up (``QueueTopology/read(on:)``), so that none
    /// reads it again.
    func adopt(_ topology: QueueTopology) {
        context.adopt(topology)
    }

    /// Sets what the loops tell after each database round trip (true: it succeeded): the readiness probe's news.
    func onDatabaseContact(_ handler: @escaping @Sendable (Bool) -> Void) {
        context.onDatabaseContact(handler)
    }

    /// Completions written so far and sends in flight now (for `STATUS=` lines).
    var progress: (settled: Int, inFlight: Int) { (completer.settled, claims?.sending ?? 0) }

    /// The loops the systemd watchdog watches besides the HTTP/2 I/O thread: the expand loops only when this
    /// worker expands.
    var watchedLoops: [LoopHeartbeat] {
        [claimHeartbeat, completer.heartbeat]
            + (configuration.roles.contains(.expand) ? [expansionHeartbeat, chunkHeartbeat] + sliceHeartbeats : [])
    }

    /// The queue lag and the fleet's operator pause (``QueueLagStore/reading(on:)``), or nil when the database did
    /// not answer.
    func sampleQueueLag() async -> QueueLagReading? {
        try? await context.database.withConnection { try QueueLagStore.reading(on: $0) }
    }

    /// Runs until ``requestStop()`` (or, with `exitWhenDrained`, until the queue is empty).
    public func run() async {
        let configuration = self.configuration
        // Behind a transaction-mode pooler without a direct route for it, no LISTEN: the loops poll.
        let listener = configuration.databaseRoute.listenURL.map {
            PostgresListener(connectionString: $0, channels: ["pushizo_wakeup"], applicationName: "pushizo-worker-listen")
        }
        var background: [any Service] = []
        if let listener { background.append(ListenService(context: context, listener: listener)) }
        if configuration.roles.contains(.expand) {
            background.append(ExpansionService(context: context, outcomes: outcomes, claims: claims, heartbeat: expansionHeartbeat))
            background.append(ChunkService(context: context, outcomes: outcomes, claims: claims, heartbeat: chunkHeartbeat))
            for (wake, heartbeat) in zip(context.sliceWakes, sliceHeartbeats) {
                background.append(
                    SliceService(context: context, outcomes: outcomes, claims: claims, wake: wake, heartbeat: heartbeat))
            }
        } else {
            // Only the expand loops hand deliveries to the send tasks.
            claims?.finishHandOffs()
        }
        background.append(completer)
        background.append(statistics)
        if let liveActivityChannels, claims != nil {
            background.append(LiveActivityChannelService(context: context, sender: liveActivityChannels))
        }
        if let interval = configuration.maintenanceInterval {
            background.append(MaintenanceService(context: context, interval: interval))
        }
        let lead: any Service = claims ?? ExpansionDrainService(context: context, heartbeat: claimHeartbeat)
        let (context, completer) = (self.context, self.completer)
        let group = ServiceGroup(
            background: background, lead: lead,
            afterLead: [
                { listener?.shutdown() },
                {
                    // The final flush shares the shutdown deadline; completions of sends cancelled at the deadline
                    // get one more second.
                    let stoppedAt = context.stoppedAt ?? .now
                    completer.finish(deadline: max(stoppedAt + configuration.shutdownTimeout, .now + .seconds(1)))
                },
                {
                    context.expansionWake.signal()
                    context.chunkWake.signal()
                },
            ])
        logger.info(
            "worker running",
            [
                "worker_id": configuration.workerID, "heartbeat_id": heartbeat.workerID.uuidString.lowercased(),
                "concurrency": "\(configuration.concurrency)",
                "claim_batch": "\(configuration.claimBatch)", "database_route": configuration.databaseRoute.summary,
            ])
        let heartbeat = self.heartbeat
        let beats = Task { await heartbeat.run() }
        await group.run()
        await heartbeat.finish(inFlight: claims?.sending ?? 0)
        await beats.value
        logger.notice(
            "worker stopped",
            [
                "claimed": "\(claims?.claimedTotal ?? 0)", "settled": "\(completer.settled)",
                "lost_leases": "\(completer.lostLeases)", "unwritten": "\(completer.unwritten)",
                "peak_rss_mb": ProcessStatistics.peakResidentBytes().map { String($0 / 1_048_576) } ?? "?",
            ])
    }
}

/// The completer runs as one of the worker's services: its `run()` returns after its final flush
/// (``Completer/finish(deadline:)``).
extension Completer: Service {}
