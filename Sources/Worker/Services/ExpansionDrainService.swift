/// An expand-only worker's lead service (it claims nothing): waits for a stop request, or with
/// `PUSHIZO_EXIT_WHEN_DRAINED` for no due notification left to expand, then stops the worker.
struct ExpansionDrainService: Service {
    let context: WorkerLoopContext
    /// Stamped as the claim loop's, for the systemd watchdog.
    let heartbeat: LoopHeartbeat

    func run() async {
        let configuration = context.configuration
        defer { heartbeat.finished() }
        while !context.isStopping {
            heartbeat.waiting(for: configuration.pollInterval)
            await context.claimWake.wait(timeout: configuration.pollInterval)
            heartbeat.working()
            if configuration.exitWhenDrained,
                (try? await context.database.withConnection({ try ExpansionStore.isExpansionDrained(on: $0) })) == true
            {
                context.logger.notice("no notification left to expand; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                context.stopWorker()
            }
        }
    }
}
