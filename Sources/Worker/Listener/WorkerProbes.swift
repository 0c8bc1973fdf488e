import DeliveryCore
import Foundation
import Metrics
import MetricsServer
import Postgres
import Synchronization

/// The answers of `GET /healthz` (liveness) and `GET /readyz` (readiness) on the metrics listener
/// (docs/operations.md, "Health and readiness probes"), made on the listener connection's thread.
///
/// - Liveness is what the systemd watchdog asks (``WatchdogPolicy``): every watched loop (the claim loop, the
///   completer, the expand loops when expanding, the HTTP/2 I/O thread) makes progress. A loop stuck inside one
///   iteration for the watchdog interval (`WatchdogSec`, or ``defaultInterval`` without systemd's watchdog) fails
///   it; restarting the process is the remedy.
/// - Readiness is ``ReadinessState``: the database reached by the loops' latest round trip and the schema holding
///   the migrations this build needs (judged at start, and again now and then as the start-up check judges it). It fails while the database is unreachable or a migration is pending, and from the stop request on;
///   taking the worker out of rotation is the remedy, not a restart.
final class WorkerProbes: Sendable {
    /// The liveness interval without systemd's watchdog: a loop inside one iteration this long is stuck.
    static let defaultInterval: Duration = .seconds(60)

    private let policy: WatchdogPolicy
    private let loops: [LoopHeartbeat]
    private let ioThread: LoopHeartbeat
    private let probeIOThread: @Sendable (@escaping @Sendable () -> Void) -> Bool
    private let state: Mutex<ReadinessState>
    private let database: ListenerDatabase
    private let isStopping: @Sendable () -> Bool
    private let verifySchema: @Sendable (PostgresConnection) throws -> Void
    private let schemaCompatible: GaugeFamily
    private let onSchemaRefused: @Sendable (String) -> Void

    /// - Parameters:
    ///   - watchdog: systemd's watchdog interval, when it is on (the same bound for both).
    ///   - loops: the loops stamped by their own code (``WorkerService/watchedLoops``).
    ///   - ioThread: the HTTP/2 I/O thread's stamp, shared with the systemd reporter (both probe it the same way).
    ///   - probeIOThread: runs its argument on the I/O thread; false once that loop is shut down.
    ///   - isStopping: whether a stop was requested (not ready from then on).
    ///   - verifySchema: the start-up check's judgement of the schema (``WorkerSchema/verify(on:known:)``): throws
    ///     a ``ConfigurationError`` saying what is wrong when this build cannot run with it.
    ///   - metrics: `pushizo_schema_compatible` is set from each judgement (1 runnable, 0 refused).
    ///   - onSchemaRefused: called with the refusal's words when a judgement first finds it (the owner logs it once).
    init(
        watchdog: Duration?, loops: [LoopHeartbeat], ioThread: LoopHeartbeat,
        probeIOThread: @escaping @Sendable (@escaping @Sendable () -> Void) -> Bool, database: ListenerDatabase,
        isStopping: @escaping @Sendable () -> Bool,
        verifySchema: @escaping @Sendable (PostgresConnection) throws -> Void,
        metrics: WorkerMetrics, onSchemaRefused: @escaping @Sendable (String) -> Void
    ) {
        self.verifySchema = verifySchema
        schemaCompatible = metrics.schemaCompatible
        self.onSchemaRefused = onSchemaRefused
        self.isStopping = isStopping
        policy = WatchdogPolicy(interval: watchdog ?? Self.defaultInterval)
        self.loops = loops
        self.ioThread = ioThread
        self.probeIOThread = probeIOThread
        self.database = database
        state = Mutex(ReadinessState())
    }

    // MARK: What the worker reports

    /// A loop's database round trip succeeded.
    func loopReached() { state.withLock { $0.loopReached(at: .now) } }

    /// The start-up check found the schema current (``WorkerRuntime/verifyDatabaseRoute()``).
    func schemaVerified() {
        _ = state.withLock { $0.schemaChecked(.current, at: .now) }
        schemaCompatible.set(1)
    }

    /// A loop's database round trip failed.
    func loopFailed() { state.withLock { $0.loopFailed(at: .now) } }

    /// A read on the listener's own session (the status page) succeeded or failed: news of the database too.
    func listenerRead(succeeded: Bool) { state.withLock { $0.contactChecked(succeeded: succeeded, at: .now) } }

    // MARK: The probes

    /// `GET /healthz`: `ok`, or the stuck loops (by name, with how long) and 503. Starts a probe of the HTTP/2
    /// I/O thread unless one is outstanding, so a stuck I/O thread shows from the next request on.
    func liveness() -> ListenerPage {
        let now = ContinuousClock.now
        if ioThread.workingUnlessAlready(now: now), !probeIOThread({ [ioThread] in ioThread.waiting(for: nil) }) {
            ioThread.finished()
        }
        let watched = (loops + [ioThread]).map { (name: $0.name, activity: $0.activity) }
        let verdict: ProbeVerdict
        switch policy.verdict(watched, now: now) {
        case .ping:
            verdict = .healthy
        case .withhold(let stuck):
            verdict = .failing(stuck.map { "\($0.name): stuck for \(Int($0.overdue.inSeconds)) s" })
        }
        return .plainText(status: verdict.httpStatus, verdict.body)
    }

    /// `GET /readyz`: ``ReadinessState/verdict(now:)``, after the checks it finds due, made on the listener's own
    /// session unless a status page is reading on it (then the probe answers from what it knows).
    func readiness() -> ListenerPage {
        let stopping = isStopping()
        let due = state.withLock { state in
            state.stopping = stopping
            return state.checksDue(now: .now)
        }
        if due.any { check(due) }
        let verdict = state.withLock { $0.verdict(now: .now) }
        return .plainText(status: verdict.httpStatus, verdict.body)
    }

    private func check(_ due: ReadinessState.Checks) {
        let verifySchema = self.verifySchema
        let outcome: (contact: Bool, schema: ReadinessState.Schema?)?
        do {
            outcome = try database.withSessionIfFree { connection in
                if due.contact { _ = try connection.query("SELECT 1") }
                guard due.schema else { return (true, nil) }
                do {
                    try verifySchema(connection)
                    return (true, .current)
                } catch let refusal as ConfigurationError {
                    return (true, .refused(refusal.problem))
                } catch {
                    if let failure = error as? PostgresError, failure.isConnectionProblem { throw error }
                    return (true, .refused(Self.reason(error)))
                }
            }
        } catch {
            // The database was not reached: what was known of the schema stands.
            outcome = (false, nil)
        }
        guard let outcome else { return }
        let newlyRefused = state.withLock { state -> String? in
            let now = ContinuousClock.now
            if due.contact || !outcome.contact { state.contactChecked(succeeded: outcome.contact, at: now) }
            return due.schema ? state.schemaChecked(outcome.schema, at: now) : nil
        }
        switch outcome.schema {
        case .current?: schemaCompatible.set(1)
        case .refused?: schemaCompatible.set(0)
        case .unknown?, nil: break
        }
        if let newlyRefused { onSchemaRefused(newlyRefused) }
    }

    /// An error as one line: PostgreSQL's words (passwords already masked by ``PostgresConnection``), cut to 200
    /// characters.
    static func reason(_ error: any Error) -> String {
        let line = "\(error)".split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
        return TerminalText.sanitized(line.count > 200 ? String(line.prefix(200)) + "..." : line)
    }
}
