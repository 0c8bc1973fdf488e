import Foundation
import Synchronization

/// An async facade over a fixed number of ``PostgresConnection``s, each owned by its own dedicated
/// `Thread`, so blocking libpq calls never run on Swift's cooperative thread pool.
///
/// - Threads and connections start lazily, one more each time a call finds every existing one busy, up to
///   `maximumConnections`.
/// - Calls beyond that wait in FIFO order.
/// - When a connection is bad after a call (``PostgresConnection/isConnectionBad``: lost, or its session
///   turned out read-only), it is closed; the call's own error is rethrown; a later call reconnects. A failed
///   connect throws `.connectionFailed` to the call that needed it.
/// - Reconnecting after a failure is paced for the whole pool, not per thread: after a failed connect or a
///   dropped session, one thread at a time tries, each try after the jittered delay of a
///   ``PostgresReconnectBackoff`` (0.1 s doubling to 5 s; 1 s doubling to 60 s when the server has no
///   connection slot left, SQLSTATE 53300). A call that needs a new connection meanwhile waits up to 1 s for
///   its turn; past that (or refused for want of slots) it goes back to the head of the queue for a thread that
///   holds a connection, and its thread ends, so a pool the server cannot grow works on with what it has;
///   with no connection left, it fails at once with `.connectionFailed` naming the last failure. A successful
///   connect lifts the pacing. So a pool of any size makes one attempt per delay, and a fleet cut
///   off together does not come back in step.
/// - A body that leaves a transaction open (threw between `BEGIN` and `COMMIT` without
///   ``PostgresConnection/transaction(_:)``) has it rolled back before the connection is reused.
public final class PostgresClient: Sendable {
    private let pool: PostgresPool

    /// - Parameters:
    ///   - connectionString: libpq URL or `key=value` string (see ``PostgresConnection``).
    ///   - maximumConnections: the most connections (and threads) ever open at once; at least 1.
    ///   - applicationName: `application_name` of every connection unless the string sets one.
    ///   - poolerMode: what stands between the connections and PostgreSQL (``PostgresPoolerMode``).
    public init(
        connectionString: String, maximumConnections: Int, applicationName: String = "pushizo-worker",
        poolerMode: PostgresPoolerMode = .none
    ) {
        pool = PostgresPool(
            connectionString: connectionString, maximumConnections: max(1, maximumConnections),
            applicationName: applicationName, poolerMode: poolerMode)
    }

    deinit { pool.beginShutdown() }

    /// Runs `body` on a pooled connection's dedicated thread and returns its value.
    ///
    /// Waits (FIFO) while every connection is busy. Cancelling the calling task while it waits removes it
    /// from the queue (throws `CancellationError`); a body already running is not interrupted.
    /// - Throws: `body`'s error; `.connectionFailed` when connecting failed; `.shutdown` after
    ///   ``shutdown()``.
    public func withConnection<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        let job = PostgresPoolJob(body: body)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard job.attach(continuation) else { return }
                pool.enqueue(job)
            }
        } onCancel: {
            job.cancel()
        }
    }

    /// ``PostgresConnection/query(_:_:)`` on a pooled connection.
    public func query(_ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> PostgresQueryResult {
        try await withConnection { try $0.query(sql, parameters) }
    }

    /// ``PostgresConnection/preparedQuery(_:_:)`` on a pooled connection (each connection prepares the
    /// statement on its first use).
    public func preparedQuery(_ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> PostgresQueryResult {
        try await withConnection { try $0.preparedQuery(sql, parameters) }
    }

    /// Whether `processID` is the server process (`PQbackendPID`, `pg_stat_activity.pid`) of one of this
    /// client's open connections: a `NOTIFY` whose ``PostgresNotification/processID`` it is came from a
    /// transaction this client ran.
    public func isPooledSession(processID: Int32) -> Bool {
        pool.isPooledSession(processID: processID)
    }

    /// Forgets the server process IDs of the open connections; each is known again after its next call. For when
    /// the server may have restarted (a listener reconnected): a connection found dead only at its next use would
    /// otherwise keep its old process ID known, which a new session of another client may be given.
    public func forgetSessions() {
        pool.forgetSessions()
    }

    /// Stops the client: waiting calls throw `.shutdown`, running bodies finish, then every connection
    /// is closed and every thread ends. Later calls throw `.shutdown`.
    public func shutdown() async {
        pool.beginShutdown()
        await withCheckedContinuation { continuation in
            pool.whenStopped { continuation.resume() }
        }
    }
}

/// A type-erased queued call.
protocol PostgresPoolJobProtocol: AnyObject, Sendable {
    /// Moves the job from waiting to running; false when it was cancelled (skip it).
    func claim() -> Bool
    /// Runs the body (the job was claimed) and resumes the caller.
    func run(on connection: PostgresConnection)
    /// Resumes the caller with `error` (the job was claimed, or is still waiting).
    func fail(_ error: any Error)
    /// Moves a claimed job back to waiting, to be claimed again by another thread.
    func release()
}

final class PostgresPoolJob<T: Sendable>: PostgresPoolJobProtocol {
    private enum State {
        case created
        case waiting(CheckedContinuation<T, any Error>)
        case running(CheckedContinuation<T, any Error>)
        case cancelled
        case finished
    }

    let body: @Sendable (PostgresConnection) throws -> T
    private let state = Mutex<State>(.created)

    init(body: @escaping @Sendable (PostgresConnection) throws -> T) { self.body = body }

    /// Stores the continuation; false (and resumes it with `CancellationError`) if already cancelled.
    func attach(_ continuation: CheckedContinuation<T, any Error>) -> Bool {
        let attached = state.withLock { state -> Bool in
            if case .created = state {
                state = .waiting(continuation)
                return true
            }
            return false
        }
        if !attached { continuation.resume(throwing: CancellationError()) }
        return attached
    }

    func cancel() {
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            switch state {
            case .created:
                state = .cancelled
                return nil
            case .waiting(let continuation):
                state = .cancelled
                return continuation
            default:
                return nil
            }
        }
        continuation?.resume(throwing: CancellationError())
    }

    func claim() -> Bool {
        state.withLock { state in
            if case .waiting(let continuation) = state {
                state = .running(continuation)
                return true
            }
            return false
        }
    }

    func release() {
        state.withLock { state in
            if case .running(let continuation) = state { state = .waiting(continuation) }
        }
    }

    func run(on connection: PostgresConnection) {
        let result = Result { try body(connection) }
        finish(result)
    }

    func fail(_ error: any Error) { finish(.failure(error)) }

    private func finish(_ result: Result<T, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            switch state {
            case .waiting(let continuation), .running(let continuation):
                state = .finished
                return continuation
            default:
                return nil
            }
        }
        continuation?.resume(with: result)
    }
}

/// The queue and threads behind ``PostgresClient``.
///
/// `@unchecked Sendable`: every mutable field is read and written only with `condition` locked; the
/// connection of each thread lives in that thread's stack frame and never leaves it.
final class PostgresPool: @unchecked Sendable {
    private let connectionString: String
    private let maximumConnections: Int
    private let applicationName: String
    private let poolerMode: PostgresPoolerMode

    private let condition = NSCondition()
    private var jobs: [any PostgresPoolJobProtocol] = []
    private var jobsHead = 0
    private var idleThreads = 0
    private var liveThreads = 0
    private var threadCounter = 0
    private var isShuttingDown = false
    private var stoppedCallbacks: [@Sendable () -> Void] = []
    /// The server process IDs of the open connections.
    private var sessionProcessIDs: Set<Int32> = []
    /// The pool's reconnect pacing (see ``PostgresClient``).
    private var reconnectBackoff = PostgresReconnectBackoff()
    /// No connect attempt before this while ``reconnectBackoff`` has failures.
    private var nextConnectAttempt = ContinuousClock.now
    /// A thread is trying to connect while ``reconnectBackoff`` has failures: the others wait for its outcome.
    private var probing = false
    /// The last failed connect's error (passwords already masked), for the calls turned away meanwhile.
    private var lastConnectError: PostgresError?
    /// Threads holding an open connection.
    private var connectedThreads = 0

    init(connectionString: String, maximumConnections: Int, applicationName: String, poolerMode: PostgresPoolerMode) {
        self.poolerMode = poolerMode
        self.connectionString = connectionString
        self.maximumConnections = maximumConnections
        self.applicationName = applicationName
    }

    private var queuedCount: Int { jobs.count - jobsHead }

    func enqueue(_ job: any PostgresPoolJobProtocol) {
        condition.lock()
        if isShuttingDown {
            condition.unlock()
            if job.claim() { job.fail(PostgresError(code: .shutdown, message: "the PostgreSQL client is shut down")) }
            return
        }
        jobs.append(job)
        if queuedCount > idleThreads && liveThreads < maximumConnections {
            liveThreads += 1
            threadCounter += 1
            let number = threadCounter
            condition.unlock()
            let thread = Thread { [self] in self.threadMain() }
            thread.name = "pushizo-postgres-\(number)"
            thread.start()
            return
        }
        condition.signal()
        condition.unlock()
    }

    /// Marks the pool as stopping, fails waiting calls and wakes idle threads so they exit.
    func beginShutdown() {
        condition.lock()
        isShuttingDown = true
        let waiting = Array(jobs[jobsHead...])
        jobs.removeAll()
        jobsHead = 0
        condition.broadcast()
        condition.unlock()
        for job in waiting where job.claim() {
            job.fail(PostgresError(code: .shutdown, message: "the PostgreSQL client is shut down"))
        }
    }

    func isPooledSession(processID: Int32) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return sessionProcessIDs.contains(processID)
    }

    func forgetSessions() {
        condition.lock()
        sessionProcessIDs.removeAll()
        condition.unlock()
    }

    private func sessionInUse(_ connection: PostgresConnection) {
        condition.lock()
        sessionProcessIDs.insert(connection.processID)
        condition.unlock()
    }

    private func sessionClosing(_ connection: PostgresConnection) {
        condition.lock()
        sessionProcessIDs.remove(connection.processID)
        condition.unlock()
    }

    /// Calls `callback` once every thread has exited (at once if none is running).
    func whenStopped(_ callback: @escaping @Sendable () -> Void) {
        condition.lock()
        if liveThreads == 0 {
            condition.unlock()
            callback()
            return
        }
        stoppedCallbacks.append(callback)
        condition.unlock()
    }

    /// Takes the next job, waiting while there is none; nil when the thread should exit.
    private func nextJob() -> (any PostgresPoolJobProtocol)? {
        condition.lock()
        defer { condition.unlock() }
        while queuedCount == 0 && !isShuttingDown {
            idleThreads += 1
            condition.wait()
            idleThreads -= 1
        }
        guard queuedCount > 0 else { return nil }
        let job = jobs[jobsHead]
        jobsHead += 1
        if jobsHead > 64 && jobsHead * 2 > jobs.count {
            jobs.removeFirst(jobsHead)
            jobsHead = 0
        }
        return job
    }

    /// Whether this thread may try to connect now: at once while the last connect succeeded; after failures, once
    /// the backoff's delay has passed and no other thread is trying. A turn at most ``turnWait`` away is waited
    /// for; a later one is `.notYet`, naming the last failure (the call then goes to a connected thread, or fails
    /// and its caller backs off on its own: a loop waiting out a 60 s backoff inside a call would look stuck).
    private func connectTurn() -> ConnectTurn {
        condition.lock()
        defer { condition.unlock() }
        let waitEnd = ContinuousClock.now + Self.turnWait
        while !isShuttingDown {
            if reconnectBackoff.failures == 0 { return .go }
            let now = ContinuousClock.now
            if !probing && now >= nextConnectAttempt {
                probing = true
                return .go
            }
            let turn = probing ? now + Self.turnWait : nextConnectAttempt
            if turn > waitEnd {
                let last = lastConnectError.map { ": \($0.message)" } ?? ""
                let message = probing
                    ? "another connection attempt is under way after failures\(last)"
                    : "waiting \(Self.text(now.duration(to: nextConnectAttempt))) before connecting again\(last)"
                return .notYet(
                    PostgresError(code: .connectionFailed, message: message, sqlState: lastConnectError?.sqlState))
            }
            _ = condition.wait(until: Date() + Self.seconds(min(now.duration(to: turn), now.duration(to: waitEnd))))
        }
        return .shutdown
    }

    enum ConnectTurn {
        case go
        case notYet(PostgresError)
        case shutdown
    }

    /// Longest a call waits for its thread's turn to connect.
    static let turnWait = Duration.seconds(1)

    private static func text(_ duration: Duration) -> String {
        String(format: "%.1f s", seconds(duration))
    }

    /// Records a connect attempt's outcome (nil: it succeeded) or a session dropped after a call, and wakes the
    /// threads waiting for their turn.
    private func connectOutcome(_ error: (any Error)?, droppedSession: Bool = false) {
        condition.lock()
        defer { condition.unlock() }
        if droppedSession {
            // Every session of a restarted server breaks at once: the first break starts the pacing, the
            // others add nothing (they are one event, not many failures).
            guard reconnectBackoff.failures == 0 else { return }
        }
        probing = false
        if let error {
            if !droppedSession { lastConnectError = error as? PostgresError }
            let delay = reconnectBackoff.failed(PostgresReconnectBackoff.cause(of: error), jitter: Double.random(in: 0...1))
            nextConnectAttempt = ContinuousClock.now + delay
        } else {
            reconnectBackoff.succeeded()
            lastConnectError = nil
        }
        condition.broadcast()
    }

    /// Puts a claimed job back at the head of the queue for a thread that holds a connection, when there is one:
    /// a thread that may not connect now (or was just refused for want of slots) then ends, so a pool the
    /// server cannot grow works on with the connections it has instead of failing calls or retrying.
    private func handOverIfOthersConnected(_ job: any PostgresPoolJobProtocol) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard connectedThreads > 0 && !isShuttingDown else { return false }
        job.release()
        if jobsHead > 0 {
            jobsHead -= 1
            jobs[jobsHead] = job
        } else {
            jobs.insert(job, at: 0)
        }
        condition.signal()
        return true
    }

    private func connected(_ delta: Int) {
        condition.lock()
        connectedThreads += delta
        condition.unlock()
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        duration / .seconds(1)
    }

    private func threadMain() {
        var connection: PostgresConnection?
        jobs: while let job = nextJob() {
            guard job.claim() else { continue }
            if connection == nil {
                switch connectTurn() {
                case .go: break
                case .notYet(let error):
                    if handOverIfOthersConnected(job) { break jobs }
                    job.fail(error)
                    continue
                case .shutdown:
                    job.fail(PostgresError(code: .shutdown, message: "the PostgreSQL client is shut down"))
                    continue
                }
                do {
                    connection = try PostgresConnection(
                        connectionString: connectionString, applicationName: applicationName, poolerMode: poolerMode)
                    connected(1)
                    connectOutcome(nil)
                } catch {
                    connectOutcome(error)
                    if PostgresReconnectBackoff.cause(of: error) == .crowded, handOverIfOthersConnected(job) { break jobs }
                    job.fail(error)
                    continue
                }
            }
            guard let current = connection else { continue }
            // Known again from its next call on, should ``forgetSessions()`` have dropped it (a connection found
            // bad after a call is removed below).
            sessionInUse(current)
            job.run(on: current)
            if !current.isConnectionBad && current.isInTransaction {
                try? current.execute("ROLLBACK")
            }
            if current.isConnectionBad {
                sessionClosing(current)
                current.close()
                connection = nil
                connected(-1)
                connectOutcome(
                    PostgresError(code: .connectionLost, message: "the session was dropped"), droppedSession: true)
            }
        }
        if let connection {
            sessionClosing(connection)
            connection.close()
            connected(-1)
        }
        condition.lock()
        liveThreads -= 1
        let callbacks = liveThreads == 0 ? stoppedCallbacks : []
        if liveThreads == 0 { stoppedCallbacks.removeAll() }
        condition.unlock()
        callbacks.forEach { $0() }
    }

}
