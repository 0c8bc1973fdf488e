import Foundation
import Postgres
import Synchronization

/// What the worker's services share: the configuration, the database pool, the wake-up signals by which one
/// loop tells another there is work, the stop request and the first round trip that makes the worker ready.
/// No loop of its own; ``WorkerService`` makes one and hands it to every service.
final class WorkerLoopContext: Sendable {
    let configuration: WorkerConfiguration
    let database: PostgresClient
    let logger: Logger
    let metrics: WorkerMetrics
    /// Wakes the claim loop: deliveries were committed (an expand loop, NOTIFY), an app has room again.
    let claimWake = WakeSignal()
    /// Wakes the transactional expand lane (NOTIFY `notifications`).
    let expansionWake = WakeSignal()
    /// Wakes the chunk loop (a large notification was passed on or released).
    let chunkWake = WakeSignal()
    /// Wakes the claim loop's wait for capacity (slots, row text).
    let capacityWake = WakeSignal()
    let maintenanceWake = WakeSignal()
    let statisticsWake = WakeSignal()
    /// Wakes the Live Activity channels' loop out of its poll (``LiveActivityChannelService``).
    let liveActivityChannelWake = WakeSignal()
    /// Wake-ups of the slice-only expand tasks, one each (`PUSHIZO_EXPANSION_TASKS - 1`): the chunk loop signals
    /// them when it may have cut a broadcast into slices.
    let sliceWakes: [WakeSignal]
    /// This host's clock against PostgreSQL's, read with every claim (docs/clocks.md).
    let clockWatch: DatabaseClockWatch
    /// The queue's form (``QueueTopology``), read once: by the runtime at start-up (``adopt(_:)``), else by the first
    /// loop that asks (``topology(on:)``).
    private let knownTopology = Mutex<QueueTopology?>(nil)
    private let stopping = Atomic<Bool>(false)
    private let stopRequestedAt = Mutex<ContinuousClock.Instant?>(nil)
    private let reachedDatabase = Atomic<Bool>(false)
    private let onReady: @Sendable () -> Void
    /// Told when completions are written (``ClaimService/completionsWritten()``), set once the claim service
    /// exists: the completer is made before it.
    private let completionsWrittenHandler = Mutex<(@Sendable () -> Void)?>(nil)
    /// Told of each loop's database round trip (true: it succeeded), for the readiness probe; set by the runtime.
    private let databaseContactHandler = Mutex<(@Sendable (Bool) -> Void)?>(nil)
    /// The owner's stop request (``WorkerService/requestStop()``), set once the owner exists.
    private let ownerStop = Mutex<(@Sendable () -> Void)?>(nil)

    init(
        configuration: WorkerConfiguration, database: PostgresClient, logger: Logger, metrics: WorkerMetrics,
        onReady: @escaping @Sendable () -> Void
    ) {
        self.configuration = configuration
        self.database = database
        self.logger = logger
        self.metrics = metrics
        self.onReady = onReady
        sliceWakes = (1..<max(configuration.expansionTasks, 1)).map { _ in WakeSignal() }
        clockWatch = DatabaseClockWatch(bound: configuration.clockOffsetWarning.inSeconds, logger: logger, metrics: metrics)
    }

    /// Records the topology the runtime read at start-up.
    func adopt(_ topology: QueueTopology) {
        knownTopology.withLock { $0 = topology }
    }

    /// The queue's form: as read at start-up, else read now on `connection` (two catalog reads) and kept.
    func topology(on connection: PostgresConnection) throws -> QueueTopology {
        if let known = knownTopology.withLock({ $0 }) { return known }
        let read = try QueueTopology.read(on: connection)
        knownTopology.withLock { $0 = $0 ?? read }
        return read
    }

    /// Whether the queue is Citus-distributed, as far as known (false before the topology is read).
    var isDistributed: Bool { knownTopology.withLock { $0?.laneValues != nil } }

    var isStopping: Bool { stopping.load(ordering: .sequentiallyConsistent) }

    /// When the stop was first requested (nil before).
    var stoppedAt: ContinuousClock.Instant? { stopRequestedAt.withLock { $0 } }

    /// Records the stop request and wakes every loop's wait, so each sees it now rather than a poll interval later.
    /// - Returns: whether this was the first request.
    func requestStop() -> Bool {
        stopRequestedAt.withLock { $0 = $0 ?? .now }
        if stopping.exchange(true, ordering: .sequentiallyConsistent) { return false }
        for wake in [claimWake, expansionWake, chunkWake, capacityWake, maintenanceWake, statisticsWake, liveActivityChannelWake]
            + sliceWakes {
            wake.signal()
        }
        return true
    }

    /// Sets what ``completionsWritten()`` calls.
    func onCompletionsWritten(_ handler: @escaping @Sendable () -> Void) {
        completionsWrittenHandler.withLock { $0 = handler }
    }

    /// The completer wrote completions: their slots are free.
    func completionsWritten() {
        completionsWrittenHandler.withLock { $0 }?()
    }

    /// Sets what ``stopWorker()`` calls: the owner's stop request.
    func onStopWorker(_ stop: @escaping @Sendable () -> Void) {
        ownerStop.withLock { $0 = stop }
    }

    /// Asks the owner to stop the worker: a loop found the work done (`PUSHIZO_EXIT_WHEN_DRAINED`).
    func stopWorker() {
        if let stop = ownerStop.withLock({ $0 }) { stop() } else { _ = requestStop() }
    }

    /// Sets what ``databaseReached()`` and ``databaseFailed()`` tell (the readiness probe's news).
    func onDatabaseContact(_ handler: @escaping @Sendable (Bool) -> Void) {
        databaseContactHandler.withLock { $0 = handler }
    }

    /// Called after a loop's round trip failed.
    func databaseFailed() {
        databaseContactHandler.withLock { $0 }?(false)
    }

    /// Called after each successful round trip of a loop; the first one makes the worker ready.
    func databaseReached() {
        databaseContactHandler.withLock { $0 }?(true)
        if reachedDatabase.exchange(true, ordering: .acquiringAndReleasing) { return }
        logger.info("database reached; ready")
        onReady()
    }

    #if DEBUG
        /// The test-only fault files by variable, read once (see ``stallWhileFaultFileExists(loop:variable:)``).
        private let faultFiles = ProcessInfo.processInfo.environment.filter {
            ["PUSHIZO_TEST_STALL_CLAIM_LOOP", "PUSHIZO_TEST_STALL_EXPANSION_LOOP"].contains($0.key)
        }

        /// Test-only faults (debug builds only; release builds do not contain them): while the file named by the
        /// environment variable `variable` (`PUSHIZO_TEST_STALL_CLAIM_LOOP`, `PUSHIZO_TEST_STALL_EXPANSION_LOOP`)
        /// exists, the loop blocks inside an iteration (stamped as working), as a stuck claim (pass) would, until
        /// a stop request. `PUSHIZO_TEST_*` is reserved for the test suite and ignored as configuration.
        func stallWhileFaultFileExists(loop: String, variable: String) async {
            guard let path = faultFiles[variable], FileManager.default.fileExists(atPath: path) else { return }
            logger.warning("test fault: \(loop) stalled (\(variable))")
            while !isStopping && FileManager.default.fileExists(atPath: path) {
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    #endif
}
