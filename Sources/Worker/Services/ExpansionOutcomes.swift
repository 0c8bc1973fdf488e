import DeliveryCore
import Foundation
import Synchronization

/// What the expand loops (``ExpansionService``, ``ChunkService``, ``SliceService``) share about their results:
/// the metrics, logs and wake-ups of a chunk's result, the stall log (once a minute per SQLSTATE across them),
/// and the transactional lane's data-error suspects.
final class ExpansionOutcomes: Sendable {
    private let context: WorkerLoopContext
    private let stallLog = LogRateLimiter(interval: .seconds(60))
    /// Data-error suspects of the transactional expand lane (its only user; see ``ExpansionSuspects``). The chunk
    /// and slice loops keep their own.
    let laneSuspects = Mutex(ExpansionSuspects())

    init(context: WorkerLoopContext) {
        self.context = context
    }

    /// What an expand loop does after a chunk.
    enum FollowUp {
        /// Pick again at once.
        case next
        /// Pick again after letting other tasks run.
        case yieldThenNext
        /// A fault every chunk meets: wait this long (or for a wake-up) before picking again.
        case backOff(Duration)
        /// Nothing was due but notifications waiting for room in this worker to lease their rows (these apps';
        /// empty: any app's): wait for that room (``ClaimService/awaitRoom(_:)``).
        case waitForRoom([UUID])
        /// Nothing was due.
        case idle

        /// Waits on `wake` as this follow-up asks before an expand loop's next pick (a back-off, or the room
        /// the sends free: ``ClaimService/awaitRoom(_:)``, the poll interval a floor), the wait stamped on
        /// `heartbeat`; with `yieldingOnNext`, ``next`` lets other tasks run first too.
        /// - Returns: whether the loop picks again now; false for ``idle``, where the loop waits its own way.
        func wait(
            on wake: WakeSignal, claims: ClaimService?, heartbeat: LoopHeartbeat, pollInterval: Duration,
            yieldingOnNext: Bool
        ) async -> Bool {
            switch self {
            case .next:
                if yieldingOnNext { await Task.yield() }
            case .yieldThenNext:
                await Task.yield()
            case .backOff(let pause):
                heartbeat.waiting(for: pause)
                await wake.wait(timeout: pause)
            case .waitForRoom(let apps):
                if claims?.awaitRoom(apps) ?? false { return true }
                heartbeat.waiting(for: pollInterval)
                await wake.wait(timeout: pollInterval)
            case .idle:
                return false
            }
            return true
        }
    }

    /// Metrics, logs and wake-ups of one expansion chunk's `result`, and what the loop does next; `failures`
    /// counts stalls in a row (reset by anything else).
    func followUp(_ result: ExpansionStore.ExpansionResult?, failures: inout Int) -> FollowUp {
        let metrics = context.metrics
        let logger = context.logger
        switch result {
        case .expanded(let id, let created)?:
            failures = 0
            metrics.expanded(created: created, outcome: "expanded")
            logger.debug("notification expanded", ["notification_id": id.uuidString.lowercased(), "deliveries": "\(created)"])
            context.claimWake.signal()
            return .next
        case .expanding(_, let created)?:
            failures = 0
            metrics.expanded(created: created, outcome: nil)
            if created > 0 { context.claimWake.signal() }
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
            return .backOff(FailureBackoff.after(failures: failures))
        case .waitingForRoom(let apps)?:
            failures = 0
            return .waitForRoom(apps)
        case nil:
            failures = 0
            return .idle
        }
    }

    /// Logs a stalled expansion once a minute per SQLSTATE. Only the SQLSTATE is logged; PostgreSQL's own log
    /// has the statement and message.
    func logStall(_ sqlState: String) {
        guard stallLog.allow(sqlState) else { return }
        context.logger.error(
            "expansion stalled: every due notification's chunk failed on data since the last one that "
                + "succeeded; none is failed until a chunk succeeds (check triggers and constraints on deliveries)",
            [
                "sqlstate": sqlState,
                "condition": (sqlState.hasPrefix("23") ? DeliveryReason.integrityConstraintViolation : .dataException).rawValue,
                "suspects": "\(laneSuspects.withLock { $0.suspects.count })",
            ])
    }
}
