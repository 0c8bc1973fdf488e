import Foundation
import Synchronization

/// Chunks of notifications that are not small (broadcasts, filters, long lists): one chunk, then the least
/// recently served notification's next one, so two broadcasts take turns; chunks of unsliced notifications and
/// slices of sliced broadcasts take turns too (either goes when the other finds nothing). Woken by the
/// transactional lane when it passed a notification on, by NOTIFY, by the sends when a broadcast paced by them
/// has room again (``ClaimService/awaitRoom(_:)``), and polls as a floor. Returns after a stop request.
struct ChunkService: Service {
    let context: WorkerLoopContext
    let outcomes: ExpansionOutcomes
    /// The claim service of a worker that sends (nil: expand only): a chunk leases what it has room for of the
    /// deliveries it creates and hands them to its send tasks (``ClaimService/expandLeasing(_:on:_:)``).
    let claims: ClaimService?
    /// The loop's progress stamp, for the systemd watchdog.
    let heartbeat: LoopHeartbeat

    /// The least time between two looks that find nothing.
    static let idleChunkInterval = Duration.milliseconds(100)

    func run() async {
        // Its data-error suspects are its own, as the slice loops' are: shared with the transactional lane, a
        // chunk in progress would hold that lane's passes on the lock.
        let suspects = Mutex(ExpansionSuspects())
        let pollInterval = context.configuration.pollInterval
        var failures = 0
        var slicesFirst = false
        defer {
            heartbeat.finished()
            claims?.finishHandOffs()
        }
        while !context.isStopping {
            heartbeat.working()
            do {
                let picks: [ExpansionPick] = slicesFirst ? [.slice, .skippingSmall] : [.skippingSmall, .slice]
                slicesFirst.toggle()
                let claims = self.claims
                let result = try await context.database.withConnection { connection -> ExpansionStore.ExpansionResult? in
                    try suspects.withLock { suspects -> ExpansionStore.ExpansionResult? in
                        // A pick that finds only notifications waiting for room goes on to the other kind.
                        var waiting: ExpansionStore.ExpansionResult?
                        for pick in picks {
                            let result = try ClaimService.expandLeasing(claims, on: connection) { lease, leased in
                                try ExpansionStore.expandNext(
                                    on: connection, suspects: &suspects, pick: pick, lease: lease, leased: &leased)
                            }
                            switch (result, waiting) {
                            case (nil, _):
                                continue
                            case (.waitingForRoom(let apps)?, .waitingForRoom(let earlier)?):
                                // Empty is every app.
                                waiting = .waitingForRoom(appIDs: apps.isEmpty || earlier.isEmpty ? [] : earlier + apps)
                            case (.waitingForRoom?, _):
                                waiting = result
                            default:
                                return result
                            }
                        }
                        return waiting
                    }
                }
                context.databaseReached()
                if case .expanding = result {
                    // Maybe just cut into slices: the slice tasks take the others.
                    for wake in context.sliceWakes { wake.signal() }
                }
                // A wait for room is ended by the sends that free it, or by a new notification.
                if await outcomes.followUp(result, failures: &failures).wait(
                    on: context.chunkWake, claims: claims, heartbeat: heartbeat, pollInterval: pollInterval,
                    yieldingOnNext: false)
                {
                    continue
                }
            } catch {
                failures += 1
                context.databaseFailed()
                context.logger.error("expanding notifications failed", ["error": "\(error)"])
                let pause = FailureBackoff.after(failures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            // Nothing to chunk: the next look no sooner than this, whatever wakes it. Every new notification sends
            // the same hint, a one-device one too, so under a steady stream of those each wake-up would cost two
            // picks that find nothing; a large notification waits at most this long for its first chunk.
            heartbeat.waiting(for: pollInterval)
            try? await Task.sleep(for: Self.idleChunkInterval)
            await context.chunkWake.wait(timeout: max(.zero, pollInterval - Self.idleChunkInterval))
        }
    }
}
