import Foundation
import Synchronization

/// One of the `PUSHIZO_EXPANSION_TASKS - 1` slice-only expand tasks: chunks of sliced broadcasts
/// (``ExpansionPick/slice``) while there are any, so one broadcast is expanded by several backends at once;
/// otherwise it waits for the chunk loop's signal, the sends' when a slice paced by them has room again
/// (``ClaimService/awaitRoom(_:)``), or the poll interval. Its data-error suspects are its own, as
/// another worker's would be. Returns after a stop request.
struct SliceService: Service {
    let context: WorkerLoopContext
    let outcomes: ExpansionOutcomes
    /// The claim service of a worker that sends (nil: expand only), as ``ChunkService/claims``.
    let claims: ClaimService?
    /// Signalled by the chunk loop when it may have cut a broadcast into slices.
    let wake: WakeSignal
    /// The task's progress stamp, for the systemd watchdog.
    let heartbeat: LoopHeartbeat

    func run() async {
        let suspects = Mutex(ExpansionSuspects())
        let pollInterval = context.configuration.pollInterval
        var failures = 0
        defer {
            heartbeat.finished()
            claims?.finishHandOffs()
        }
        while !context.isStopping {
            heartbeat.working()
            do {
                let claims = self.claims
                let result = try await context.database.withConnection { connection in
                    try suspects.withLock { suspects in
                        try ClaimService.expandLeasing(claims, on: connection) { lease, leased in
                            try ExpansionStore.expandNext(
                                on: connection, suspects: &suspects, pick: .slice, lease: lease, leased: &leased)
                        }
                    }
                }
                // Several slice tasks take turns: each lets the others run between its chunks.
                if await outcomes.followUp(result, failures: &failures).wait(
                    on: wake, claims: claims, heartbeat: heartbeat, pollInterval: pollInterval, yieldingOnNext: true)
                {
                    continue
                }
            } catch {
                failures += 1
                context.databaseFailed()
                context.logger.error("expanding slices failed", ["error": "\(error)"])
                let pause = FailureBackoff.after(failures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            heartbeat.waiting(for: pollInterval)
            await wake.wait(timeout: pollInterval)
        }
    }
}
