/// The data-lifecycle maintenance (``DataLifecycle``) at start and then every `interval`
/// (`PUSHIZO_MAINTENANCE_INTERVAL`): this worker does it when no other worker of the fleet is (advisory lock),
/// and skips the round otherwise. Returns after a stop request (a round under way stops between its steps).
struct MaintenanceService: Service {
    let context: WorkerLoopContext
    let interval: Duration

    func run() async {
        let settings = context.configuration.maintenance
        let logger = context.logger
        while !context.isStopping {
            do {
                let report = try await context.database.withConnection { [context] connection in
                    try DataLifecycle.maintain(
                        on: connection, settings: settings, waitForLock: false,
                        shouldContinue: { !context.isStopping })
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
            await context.maintenanceWake.wait(timeout: interval)
        }
    }
}
