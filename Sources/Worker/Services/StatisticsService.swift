import Foundation
import Postgres
import Synchronization

/// Refreshes the planner statistics of the queue's tables when they have grown (``PlannerStatistics``): checks
/// about once a second, less often after failures or a grown table held by another session. Failures (the
/// database unreachable: the other loops say so too) are logged once a minute. Also refreshes the tz database's
/// zone names (``TimeZoneNames``) soon after start and every hour, and brings forward claim turns that other
/// writers left late (``ClaimStore/repairClaimTurns(on:)``) every few seconds. Returns after a stop request,
/// which also cancels an ANALYZE under way (``cancelRefresh()``).
final class StatisticsService: Service {
    private let context: WorkerLoopContext
    private let failureLog = LogRateLimiter(interval: .seconds(60))
    /// Cancels the planner statistics refresh in progress, if any (``refreshStatistics()``).
    private let canceller = Mutex<PostgresCanceller?>(nil)

    init(context: WorkerLoopContext) {
        self.context = context
    }

    func run() async {
        let logger = context.logger
        let database = context.database
        var setbacks = 0
        var nextZoneRefresh = ContinuousClock.now + TimeZoneNames.firstRefreshDelay
        var nextTurnRepair = ContinuousClock.now + ClaimStore.turnRepairInterval
        while !context.isStopping {
            if ContinuousClock.now >= nextTurnRepair {
                nextTurnRepair = .now + ClaimStore.turnRepairInterval
                do {
                    let moved = try await database.withConnection { [context] connection in
                        if case .lanes(let lanes) = try context.topology(on: connection) {
                            return try ClaimStore.repairClaimTurns(on: connection, lanes: lanes)
                        }
                        return try ClaimStore.repairClaimTurns(on: connection)
                    }
                    if moved > 0 {
                        context.claimWake.signal()
                        logger.info("claim turns brought forward: deliveries made due outside the worker", ["apps": "\(moved)"])
                    }
                } catch {
                    if !context.isStopping && failureLog.allow("turns") {
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
                    if !context.isStopping && failureLog.allow("time zones") {
                        logger.warning("time zone names refresh failed; retried", ["error": "\(error)"])
                    }
                }
            }
            do {
                let grown = try await database.withConnection { try PlannerStatistics.grownTables(on: $0) }
                var refresh = PlannerStatistics.Refresh()
                if !grown.isEmpty { refresh = try await refreshStatistics() }
                context.metrics.plannerStatistics(analyzed: refresh.analyzed, skipped: refresh.skipped)
                if !refresh.analyzed.isEmpty {
                    logger.info("planner statistics refreshed: tables grown", ["tables": refresh.analyzed.joined(separator: ",")])
                }
                setbacks = refresh.skipped.isEmpty ? 0 : setbacks + 1
            } catch {
                setbacks += 1
                if !context.isStopping {
                    context.metrics.plannerStatisticsFailed()
                    if failureLog.allow("statistics") {
                        logger.warning("planner statistics check failed; retried", ["error": "\(error)"])
                    }
                }
            }
            await context.statisticsWake.wait(timeout: PlannerStatistics.pause(afterSetbacks: setbacks))
        }
    }

    /// Cancels the refresh under way, if any (called on a stop request, after ``WorkerLoopContext/requestStop()``).
    func cancelRefresh() {
        if let canceller = canceller.withLock({ $0 }) {
            // PQcancel opens a connection to the server and blocks: not on the caller's (possibly cooperative)
            // thread.
            Thread { canceller.cancel() }.start()
        }
    }

    /// ``PlannerStatistics/refresh(on:)`` on a connection of its own, opened for it and closed after: an ANALYZE
    /// of a large table can take seconds, which should neither hold one of the pool's connections from claims
    /// nor hold up a stop. ``cancelRefresh()`` cancels it; a cancel request can land on whatever statement its
    /// connection runs next, which on this connection is none.
    private func refreshStatistics() async throws -> PlannerStatistics.Refresh {
        let configuration = context.configuration
        let client = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: 1,
            applicationName: "pushizo-worker-statistics", poolerMode: PostgresPoolerMode(configuration.databaseRoute.poolerMode))
        let result: Result<PlannerStatistics.Refresh, any Error>
        do {
            result = .success(try await client.withConnection { connection in
                self.canceller.withLock { $0 = connection.makeCanceller() }
                defer { self.canceller.withLock { $0 = nil } }
                // A stop requested before the canceller was registered found nothing to cancel.
                guard !self.context.isStopping else { return PlannerStatistics.Refresh() }
                return try PlannerStatistics.refresh(on: connection)
            })
        } catch {
            result = .failure(error)
        }
        await client.shutdown()
        return try result.get()
    }
}
