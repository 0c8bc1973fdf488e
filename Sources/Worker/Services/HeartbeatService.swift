import BuildInfo
import Foundation
import Glibc
import Postgres
import Synchronization

/// This process's row in `worker_heartbeats` (``WorkerHeartbeatStore``, docs/status.md, "Workers"): written at
/// start, every `PUSHIZO_HEARTBEAT_INTERVAL` after, at once when a stop is requested (`stopping_at`), and marked
/// stopped by ``finish(inFlight:)`` once the worker's services have returned. A SIGKILL, a crash or a lost host
/// leaves the row as it was, and `status` shows it stale after three intervals.
///
/// Written on a connection of its own (a one-connection ``PostgresClient``, `application_name`
/// `pushizo-worker-heartbeat`), on that connection's thread: a pool busy with claims and completions does not
/// delay the heartbeat, so a busy worker never looks dead. A failed write is retried at the next beat and logged
/// at most once a minute; the worker's loops go on regardless.
final class HeartbeatService: Sendable {
    /// The process's UUID, made when the service is (one per `run`).
    let workerID = UUID()
    /// This host's name (``hostName()``), read once.
    private let host = HeartbeatService.hostName()
    private let context: WorkerLoopContext
    private let inFlight: @Sendable () -> Int
    private let client: PostgresClient
    private let wake = WakeSignal()
    private let done = Atomic<Bool>(false)
    private let failureLog = LogRateLimiter(interval: .seconds(60))
    /// Rates over the last minute, advanced by the loop alone.
    private let rates = Mutex((claims: PerMinuteRate(), sends: PerMinuteRate()))

    /// How long ``finish(inFlight:)`` waits for its write: a database that does not answer must not hold up the
    /// exit (the row then turns stale instead of stopped).
    static let finalWriteBound: Duration = .seconds(5)

    /// - Parameter inFlight: the worker's deliveries claimed whose sends have not ended.
    init(context: WorkerLoopContext, inFlight: @escaping @Sendable () -> Int) {
        self.context = context
        self.inFlight = inFlight
        let configuration = context.configuration
        client = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: 1,
            applicationName: "pushizo-worker-heartbeat",
            poolerMode: PostgresPoolerMode(configuration.databaseRoute.poolerMode))
    }

    /// Beats until ``finish(inFlight:)``.
    func run() async {
        let interval = context.configuration.heartbeatInterval
        while !done.load(ordering: .acquiring) {
            await beat()
            await wake.wait(timeout: interval)
        }
    }

    /// Beats now (a stop was requested: the row says so at once).
    func beatNow() {
        wake.signal()
    }

    /// Ends ``run()`` and marks the row stopped, waiting at most ``finalWriteBound``; then closes the connection.
    /// - Parameter inFlight: sends still in flight (0 after a clean drain).
    func finish(inFlight: Int) async {
        done.store(true, ordering: .releasing)
        wake.signal()
        let (client, workerID, logger) = (self.client, self.workerID, context.logger)
        let written = await Self.bounded(Self.finalWriteBound) {
            do {
                try await client.withConnection {
                    try WorkerHeartbeatStore.stopped(on: $0, workerID: workerID, inFlight: inFlight)
                }
            } catch {
                logger.warning(
                    "marking this worker stopped in worker_heartbeats failed; status will show it stale",
                    ["error": "\(error)"])
            }
        }
        if written {
            await client.shutdown()
        } else {
            logger.warning("marking this worker stopped in worker_heartbeats did not finish in time; status will show it stale")
            // The write may still hang in libpq: its thread ends with it, the exit does not wait.
            Task { [client] in await client.shutdown() }
        }
    }

    private func beat() async {
        let configuration = context.configuration
        let metrics = context.metrics
        let now = ContinuousClock.now
        let (claims, sends) = rates.withLock { rates in
            (rates.claims.record(metrics.claimedSoFar, at: now), rates.sends.record(metrics.sendsSoFar, at: now))
        }
        let beat = WorkerHeartbeatStore.Beat(
            workerID: workerID, leasedBy: configuration.workerID, host: host,
            pid: ProcessInfo.processInfo.processIdentifier, version: BuildInfo.version, commit: BuildInfo.commit,
            roles: configuration.roles.map(\.rawValue).sorted(), interval: configuration.heartbeatInterval,
            inFlight: inFlight(), claimsPerMinute: claims, sendsPerMinute: sends, stopping: context.isStopping)
        do {
            let live = try await client.withConnection { try WorkerHeartbeatStore.beat(on: $0, beat) }
            metrics.fleetWorkersSeen(live)
        } catch {
            if failureLog.allow("beat") {
                context.logger.warning(
                    "writing this worker's heartbeat failed; retried every interval", ["error": "\(error)"])
            }
        }
    }

    /// The kernel's host name (`gethostname(2)`): no name lookup, unlike Foundation's `hostName`, which may ask
    /// DNS for the canonical name and would block the thread it runs on.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "unknown" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Runs `body` in a task of its own and returns once it ended (`true`) or `bound` passed (`false`), whichever
    /// comes first; `body` is not waited for after the bound.
    private static func bounded(_ bound: Duration, _ body: @escaping @Sendable () async -> Void) async -> Bool {
        let first = FirstOutcome()
        return await withCheckedContinuation { continuation in
            first.set(continuation)
            Task {
                await body()
                first.resume(true)
            }
            Task {
                try? await Task.sleep(for: bound)
                first.resume(false)
            }
        }
    }

    /// A continuation resumed by the first of two racing tasks.
    private final class FirstOutcome: Sendable {
        private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)

        func set(_ continuation: CheckedContinuation<Bool, Never>) {
            self.continuation.withLock { $0 = continuation }
        }

        func resume(_ value: Bool) {
            continuation.withLock { $0.take() }?.resume(returning: value)
        }
    }
}
