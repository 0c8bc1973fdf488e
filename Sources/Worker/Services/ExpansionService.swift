import Foundation

/// The transactional lane of expansion: cancellations, scheduled notifications whose time has come, and small
/// notifications (id lists) in bulk passes, many per transaction and statement. It never runs a chunk of a large
/// notification, so a one-device notification is expanded within a pass's time whatever broadcasts are expanding
/// meanwhile (``ChunkService`` and the ``SliceService``s take those, on connections of their own). In a worker
/// that sends, a pass leases what it has room for as it inserts it and hands those rows to the send tasks, with no
/// claim (``ClaimService/expandLeasing(_:on:_:)``). Returns after a stop request.
struct ExpansionService: Service {
    let context: WorkerLoopContext
    let outcomes: ExpansionOutcomes
    /// The claim service of a worker that sends (nil: expand only).
    let claims: ClaimService?
    /// The lane's progress stamp, for the systemd watchdog: a pass that never returns (a statement waiting on a
    /// lock forever, a hung connection) stops the pings as a stuck claim does.
    let heartbeat: LoopHeartbeat

    /// The least time from one pass over small notifications to the next while they keep coming (a pass that
    /// found none, or a full batch, is followed at once): under a steady stream each pass then takes what
    /// arrived meanwhile instead of one or two notifications, and every pass costs the same round trips and
    /// thread wake-ups whatever it carries. The first notification after a quiet spell is not delayed. As the
    /// completer's wait for companions, about 5 ms: a fraction of the latency a provider adds.
    static let smallPassSpacing = Duration.milliseconds(5)

    func run() async {
        let logger = context.logger
        let metrics = context.metrics
        let database = context.database
        var failures = 0
        // Under a steady stream of small notifications every hint wakes this loop: the checks that usually
        // find nothing (cancellations, scheduled notifications) run at most this often while they find nothing,
        // so a wake-up costs one bulk pass, not three transactions.
        let idleSweepInterval = Duration.seconds(1)
        // Notifications scheduled for later are out of the picks' indexes until released: looked for at most
        // this often while none falls due, so one is taken within about this long after its send_after.
        let idleReleaseInterval = Duration.milliseconds(100)
        var nextSweep = ContinuousClock.now
        var nextRelease = ContinuousClock.now
        // Set after a pass that found small notifications but not a full batch: the next pass starts no earlier.
        var spacedUntil: ContinuousClock.Instant?
        defer {
            heartbeat.finished()
            // Nothing more is handed to the send tasks: they end once what was handed is sent.
            claims?.finishHandOffs()
        }
        // Every wait of the loop says how long it may last before it does, for the watchdog.
        func wait(_ timeout: Duration) async {
            heartbeat.waiting(for: timeout)
            await context.expansionWake.wait(timeout: timeout)
        }
        while !context.isStopping {
            if let until = spacedUntil {
                spacedUntil = nil
                let now = ContinuousClock.now
                if now < until {
                    heartbeat.waiting(for: until - now)
                    try? await Task.sleep(until: until, clock: .continuous)
                }
            }
            heartbeat.working()
            #if DEBUG
                await context.stallWhileFaultFileExists(loop: "expansion loop", variable: "PUSHIZO_TEST_STALL_EXPANSION_LOOP")
            #endif
            do {
                // Cancellations first: they are cheap and stop work that would otherwise be claimed.
                if ContinuousClock.now >= nextSweep {
                    let swept = try await database.withConnection({ try ExpansionStore.sweepCanceled(on: $0) })
                    context.databaseReached()
                    if let swept {
                        failures = 0
                        logger.debug(
                            "canceled notification's pending deliveries skipped",
                            ["notification_id": swept.notificationID.uuidString.lowercased(), "deliveries": "\(swept.skipped)"])
                        await Task.yield()
                        continue
                    }
                    nextSweep = .now + idleSweepInterval
                }
                if ContinuousClock.now >= nextRelease {
                    let released = try await database.withConnection { try ExpansionStore.releaseScheduled(on: $0) }
                    nextRelease = released > 0 ? .now : .now + idleReleaseInterval
                    // A released notification may be large: the chunk loop takes those.
                    if released > 0 { context.chunkWake.signal() }
                }
                // Small notifications (id lists) in bulk: many per transaction and statement.
                let passStarted = ContinuousClock.now
                let claims = self.claims
                let outcomes = self.outcomes
                // In a worker that sends, the pass leases what it has room for as it inserts it, and those rows go
                // to the send tasks without a claim; the rest is the claim loop's.
                let small = try await database.withConnection { connection in
                    try ClaimService.expandLeasing(claims, on: connection) { lease, leased in
                        try outcomes.laneSuspects.withLock {
                            try SmallNotificationStore.expandSmallNotifications(
                                on: connection, suspects: &$0, lease: lease, leased: &leased)
                        }
                    }
                }
                context.databaseReached()
                if small.picked > 0 {
                    metrics.expandedInBulk(expanded: small.expanded, created: small.created, failed: small.failed.count)
                    if small.created > small.leased { context.claimWake.signal() }
                    if !small.chunked.isEmpty { context.chunkWake.signal() }
                    logger.debug(
                        "small notifications expanded",
                        [
                            "notifications": "\(small.picked)", "expanded": "\(small.expanded)", "deliveries": "\(small.created)",
                            "transactions": "\(small.transactions)", "one_at_a_time": "\(small.fellBack)",
                            "chunked": "\(small.chunked.count)", "deferred": "\(small.deferred)",
                        ])
                    for failed in small.failed {
                        logger.warning(
                            "notification failed", ["notification_id": failed.notificationID.uuidString.lowercased(), "reason": failed.reason])
                    }
                    if let sqlState = small.stalledSQLState {
                        failures += 1
                        outcomes.logStall(sqlState)
                        await wait(FailureBackoff.after(failures: failures))
                        continue
                    }
                    failures = 0
                    // A full pass, or one that left notifications for the next: more are waiting. Otherwise the
                    // wake flag is sticky: a hint that came during the pass ends the wait below at once.
                    if small.picked >= SmallNotificationStore.smallNotificationBatch || small.deferred > 0 {
                        await Task.yield()
                        continue
                    }
                    spacedUntil = passStarted + Self.smallPassSpacing
                }
                failures = 0
            } catch {
                failures += 1
                context.databaseFailed()
                logger.error("expanding notifications failed", ["error": "\(error)"])
                let pause = FailureBackoff.after(failures: failures)
                heartbeat.waiting(for: pause)
                try? await Task.sleep(for: pause)
            }
            // The sweep and the release are due again within these intervals even when no hint comes.
            await wait(min(context.configuration.pollInterval, idleSweepInterval, max(.milliseconds(1), nextRelease - .now)))
        }
    }
}
