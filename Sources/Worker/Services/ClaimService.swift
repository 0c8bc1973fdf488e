import Foundation
import Postgres
import Synchronization

/// The claim loop and the sends it starts: claims due deliveries in batches as ``Admission`` allows, sends them
/// through a ``DeliveryProcessing`` (each part a task of its own, at its priority), and hands each completion to
/// the ``Completer``, which holds its slot until it is written. What a batch shares is loaded on the claim's
/// connection before the batch is handed on (``ClaimedBatchPrefetch``). It also sends what the expand loops leased as
/// they inserted it (``expandLeasing(_:on:_:)``, ``handOff(_:)``).
///
/// ``run()`` returns after a stop request once claiming has stopped and every send has finished, or
/// `shutdownTimeout` after the stop request: the sends still in flight are then cancelled (their leases expire
/// and another worker sends them again, with the same apns-id).
final class ClaimService: Service {
    private let context: WorkerLoopContext
    private let processor: any DeliveryProcessing
    /// What a batch needs loaded on the claim's connection before it is handed to ``processor``.
    private let prefetch: ClaimedBatchPrefetch
    private let completer: Completer
    /// Slots, row text and app shares of the deliveries in flight: the loop asks it what to claim, the sends
    /// report their completions into it from any task.
    private let admission: Mutex<Admission>
    /// Parts the expand loops leased as they inserted them, admitted, on their way to the send tasks (the loops
    /// finish the stream when the last ends, ``finishHandOffs()``).
    private let handedOff = AsyncStream.makeStream(of: [(deliveries: [ClaimedDelivery], priority: TaskPriority?)].self)
    /// The loop's progress stamp, for the systemd watchdog.
    let heartbeat: LoopHeartbeat
    /// Loops that may still hand parts off (the expand loops of a worker that expands); the stream of
    /// ``handedOff`` ends when the last one ends (``finishHandOffs()``).
    private let handOffLanes: Mutex<Int>

    /// A send part: deliveries sent together, and the task priority they are sent at.
    typealias Part = (deliveries: [ClaimedDelivery], priority: TaskPriority?)

    init(
        context: WorkerLoopContext, processor: any DeliveryProcessing, prefetch: ClaimedBatchPrefetch, completer: Completer,
        heartbeat: LoopHeartbeat
    ) {
        self.context = context
        self.processor = processor
        self.prefetch = prefetch
        self.completer = completer
        self.heartbeat = heartbeat
        let configuration = context.configuration
        // The transactional lane, the chunk loop and the slice loops hand parts off; a worker that does not expand
        // ends the stream at once.
        handOffLanes = Mutex(configuration.roles.contains(.expand) ? 2 + context.sliceWakes.count : 1)
        admission = Mutex(
            Admission(
                concurrency: configuration.concurrency, claimBatch: configuration.claimBatch,
                pollInterval: configuration.pollInterval))
        context.onCompletionsWritten { [weak self] in self?.completionsWritten() }
    }

    /// Deliveries claimed whose sends have not ended.
    var sending: Int { admission.withLock { $0.sending } }
    /// Deliveries claimed since start.
    var claimedTotal: Int { admission.withLock { $0.claimedTotal } }

    /// One loop that hands parts off ended (an expand loop, or, in a worker that does not expand, the worker's
    /// start): once the last has, no part will be handed off any more and the send tasks end once what was handed
    /// is sent.
    func finishHandOffs() {
        let left = handOffLanes.withLock { lanes in
            lanes -= 1
            return lanes
        }
        if left <= 0 { handedOff.continuation.finish() }
    }

    /// Parts leased by an expansion chunk or a small notifications' pass as it inserted them
    /// (``expandLeasing(_:on:_:)``), to be sent beside the claim loop's batches.
    func handOff(_ parts: [Part]) {
        guard !parts.isEmpty else { return }
        handedOff.continuation.yield(parts)
    }

    func run() async {
        let sendTask = Task { await claimAndSend() }
        // After a stop request, give in-flight sends `shutdownTimeout`; then cancel them. Their leases
        // expire and another worker sends them again (with the same apns-id).
        let timeout = context.configuration.shutdownTimeout
        let watchdog = Task { [context] in
            while !context.isStopping { try await Task.sleep(for: .milliseconds(200)) }
            let stoppedAt = context.stoppedAt ?? .now
            try await Task.sleep(until: stoppedAt + timeout, clock: .continuous)
            context.logger.error("shutdown timeout: cancelling in-flight sends", ["in_flight": "\(self.sending)"])
            sendTask.cancel()
        }
        await sendTask.value
        watchdog.cancel()
    }

    private func claimAndSend() async {
        let configuration = context.configuration
        let logger = context.logger
        let metrics = context.metrics
        await withDiscardingTaskGroup { sends in
            // What the expand loops leased as they inserted it, sent beside the claim loop's batches.
            sends.addTask {
                await withDiscardingTaskGroup { handed in
                    for await parts in self.handedOff.stream {
                        for (part, priority) in parts {
                            handed.addTask(priority: priority) { [part] in await self.send(part) }
                        }
                    }
                }
            }
            defer { heartbeat.finished() }
            // After a claim that came back short the next one is asked whether any app's turn has come first, and
            // skipped when none has (``ClaimStore/turns(on:noRoom:)``): most wake-ups of a worker whose sends were
            // leased at insert (each chunk, each written completion, each poll) find nothing to claim. A worker's
            // first claim is run unasked, as is one after a full claim.
            var probeFirst = false
            // Claim rounds so far: on a Citus-distributed queue each round starts one lane further on.
            var laneRound = 0
            while !context.isStopping {
                heartbeat.working()
                #if DEBUG
                    await context.stallWhileFaultFileExists(loop: "claim loop", variable: "PUSHIZO_TEST_STALL_CLAIM_LOOP")
                #endif
                let pending = completer.pending
                let (limit, room): (Int, ClaimRoom)
                switch admission.withLock({ $0.nextStep(pendingCompletions: pending) }) {
                case .claim(let claimLimit, let claimRoom):
                    (limit, room) = (claimLimit, claimRoom)
                case .waitForCapacity(let wait):
                    heartbeat.waiting(for: wait)
                    await context.capacityWake.wait(timeout: wait)
                    continue
                }
                var claimed: [ClaimedDelivery]
                // How long to wait after a short claim, asked on the claim's connection in the same hand-off to
                // the pool (a second hand-off cost two more thread wake-ups per claim); nil after a full one.
                var nextTurn: Result<(wait: Double?, clock: DatabaseClockReading), any Error>?
                let claimStarted = ContinuousClock.now
                do {
                    // Before the statement: the lease (from the database's now()) ends no earlier.
                    let leaseExpiry = ContinuousClock.now + configuration.lease
                    let prefetch = self.prefetch
                    let claimEnded: ContinuousClock.Instant?
                    let probe = probeFirst
                    let round = laneRound
                    laneRound &+= 1
                    (claimed, claimEnded, nextTurn) = try await context.database.withConnection { [context] connection in
                        if case .lanes(let lanes) = try context.topology(on: connection) {
                            return try Self.claimRound(
                                on: connection, lanes: lanes, round: round, limit: limit, room: room,
                                configuration: configuration, prefetch: prefetch, logger: logger)
                        }
                        // A page whose lease ran out (its worker died) first, in its own transaction: its rows are
                        // leased to this worker once it commits. A failure after it leaves them to the next rescue.
                        let rescued = try Self.rescuePage(
                            on: connection, limit: limit, configuration: configuration, logger: logger)
                        if probe && rescued.isEmpty {
                            let turns = try ClaimStore.turns(on: connection, noRoom: room.full)
                            if !turns.due { return ([], nil, .success((turns.wait, turns.clock))) }
                        }
                        let rest = limit - rescued.count
                        let claimed = try rescued + (rest <= 0 ? [] : ClaimStore.claim(
                            on: connection, limit: rest, lease: configuration.lease,
                            workerID: configuration.workerID, room: room))
                        let claimEnded = ContinuousClock.now
                        // Nothing is thrown from here on: the claimed rows are leased and must be sent.
                        prefetch.load(claimed, on: connection)
                        let nextTurn = claimed.count < limit ? Result { try ClaimStore.nextTurn(on: connection) } : nil
                        return (claimed, claimEnded, nextTurn)
                    }
                    context.databaseReached()
                    // A skipped claim is no claim: no duration observed.
                    if let claimEnded {
                        metrics.claimFinished(startedAt: claimStarted, endedAt: claimEnded, claimed: claimed.count)
                    }
                    // The claim's reading of PostgreSQL's clock, else (nothing claimed) the turn check's.
                    if let clock = claimed.first?.databaseClock ?? (try? nextTurn?.get())?.clock {
                        context.clockWatch.record(clock)
                    }
                    completer.pagesHandedOut(claimed)
                    claimed = withoutAdopted(claimed, leaseExpiry: leaseExpiry)
                } catch {
                    metrics.claimFinished(startedAt: claimStarted, claimed: 0)
                    context.databaseFailed()
                    logger.error("claiming deliveries failed", ["error": "\(error)"])
                    let backoff = admission.withLock { $0.claimFailed() }
                    heartbeat.waiting(for: backoff)
                    try? await Task.sleep(for: backoff)
                    continue
                }
                for (part, priority) in admit(claimed) {
                    sends.addTask(priority: priority) { [part] in await self.send(part) }
                }
                let afterClaim = admission.withLock {
                    $0.claimSucceeded(kept: claimed.count, limit: limit, nextTurn: nextTurnAnswer(nextTurn))
                }
                probeFirst = afterClaim != .claimAgain
                if afterClaim == .claimAgain { continue }
                if claimed.isEmpty, configuration.exitWhenDrained, await isDrained() {
                    logger.notice("queue drained; exiting (PUSHIZO_EXIT_WHEN_DRAINED)")
                    context.stopWorker()
                    break
                }
                guard case .wait(let wait) = afterClaim else { continue }
                heartbeat.waiting(for: wait)
                await context.claimWake.wait(timeout: wait)
            }
        }
    }

    /// One claim round on a Citus-distributed queue (docs/scale-out.md, "The hot statements"): the lanes whose turn
    /// has come (``ClaimStore/laneTurns(on:noRoom:)``), visited from a lane derived from this worker's id and the
    /// round (``ClaimStore/laneRotationStart(workerID:round:lanes:)``), one router claim each with the batch's room
    /// shared among them (``ClaimStore/claimLanes(on:lanes:limit:lease:workerID:room:failed:)``). No lane due: no
    /// claim, and the next turn's wait as the probe read it. Returns what the single-node claim's closure returns:
    /// the rows, when the claim ended (nil when none ran) and, after a short round, the next turn ahead.
    static func claimRound(
        on connection: PostgresConnection, lanes: [Int32], round: Int, limit: Int, room: ClaimRoom,
        configuration: WorkerConfiguration, prefetch: ClaimedBatchPrefetch, logger: Logger
    ) throws -> ([ClaimedDelivery], ContinuousClock.Instant?, Result<(wait: Double?, clock: DatabaseClockReading), any Error>?) {
        let turns = try ClaimStore.laneTurns(on: connection, noRoom: room.full)
        let order = ClaimStore.laneOrder(
            lanes: lanes, due: turns.due,
            start: ClaimStore.laneRotationStart(workerID: configuration.workerID, round: round, lanes: lanes.count))
        if order.isEmpty { return ([], nil, .success((turns.wait, turns.clock))) }
        let claimed = try ClaimStore.claimLanes(
            on: connection, lanes: order, limit: limit, lease: configuration.lease, workerID: configuration.workerID,
            room: room,
            failed: { lane, error in
                logger.error("claiming in a lane failed; the lanes claimed before it are sent", [
                    "lane": "\(lane)", "error": "\(error)",
                ])
            })
        let claimEnded = ContinuousClock.now
        // Nothing is thrown from here on: the claimed rows are leased and must be sent.
        prefetch.load(claimed, on: connection)
        let nextTurn = claimed.count < limit
            ? Result { () -> (wait: Double?, clock: DatabaseClockReading) in
                let after = try ClaimStore.laneTurns(on: connection, noRoom: room.full)
                // A lane still due (its share was smaller than its due rows): claim again at once.
                return (after.due.isEmpty ? after.wait : 0, after.clock)
            } : nil
        return (claimed, claimEnded, nextTurn)
    }

    /// Takes one leased page whose lease ran out, if any (``DeliveryPageStore/rescue(on:workerID:lease:limit:)``),
    /// and reads up to `limit` of its deliveries left to send (the claim's limit: the rest of a larger page is cut
    /// off for the next rescue). One index probe when none is due.
    static func rescuePage(
        on connection: PostgresConnection, limit: Int, configuration: WorkerConfiguration, logger: Logger
    ) throws
        -> [ClaimedDelivery]
    {
        do {
            let (rows, page) = try DeliveryPageStore.rescue(
                on: connection, workerID: configuration.workerID, lease: configuration.lease, limit: limit)
            guard page != nil else { return [] }
            return try ClaimStore.leasedRows(rows, on: connection)
        } catch let unreadable as DeliveryPageStore.RescueUnreadable {
            // The page stays leased here until its lease runs out and is tried again then; the claim goes on.
            logger.warning("a page whose lease ran out could not be read; tried again when this lease runs out", [
                "page": "\(unreadable.pageID)", "error": "\(unreadable.error)",
            ])
            return []
        }
    }

    /// What one expansion call (a chunk, retried on the next notification after a data error) may lease as it
    /// inserts: the slots it holds per app until ``takeLeased(_:holds:on:leaseExpiry:)`` settles them.
    final class LeaseHolds: Sendable {
        let held = Mutex<[UUID: Int]>([:])
    }

    /// Runs one expansion call (`expand`, handed the lease terms and where to put the rows it leased) on
    /// `connection`, leasing to this worker what its free slots and each app's room allow of the chunk's new
    /// deliveries, as a claim would give it (``Admission/reserve(app:upTo:pendingCompletions:)``); then reads the
    /// leased rows, which the chunk's insert returned in the claim's row shape, and hands them to the send tasks,
    /// admitted as a claimed batch is
    /// (docs/performance.md, "Deliveries leased at insert"). The chunk inserts no more of such rows than it leases:
    /// a broadcast is expanded as fast as this worker sends it, and waits (``awaitRoom(_:)``) while it has no
    /// room. Without `claims` (a worker that does not send) nothing is leased and everything is expanded ahead;
    /// while stopping, nothing is leased and nothing that would be is expanded.
    static func expandLeasing<Result>(
        _ claims: ClaimService?, on connection: PostgresConnection,
        _ expand: (_ lease: ExpansionStore.InsertLease?, _ leased: inout LeasedRows) throws -> Result
    ) throws -> Result {
        var leased = LeasedRows.none
        guard let claims else { return try expand(nil, &leased) }
        let configuration = claims.context.configuration
        // A worker that stops leases nothing more and expands nothing it would lease: that remainder is left to
        // the workers that go on sending.
        guard !claims.context.isStopping else {
            let none = ExpansionStore.InsertLease(workerID: configuration.workerID, lease: configuration.lease, noRoom: true) {
                _, _ in 0
            }
            return try expand(none, &leased)
        }
        let holds = LeaseHolds()
        let leaseExpiry = ContinuousClock.now + configuration.lease
        let pending = claims.completer.pending
        let lease = ExpansionStore.InsertLease(
            workerID: configuration.workerID, lease: configuration.lease,
            noRoom: claims.admission.withLock { $0.hasNoRoom(pendingCompletions: pending) }
        ) { [weak claims] app, upTo in
            guard let claims, !claims.context.isStopping else { return 0 }
            let pending = claims.completer.pending
            let count = claims.admission.withLock { $0.reserve(app: app, upTo: upTo, pendingCompletions: pending) }
            holds.held.withLock { $0[app, default: 0] += count }
            return count
        }
        let result: Result
        do {
            result = try expand(lease, &leased)
        } catch {
            claims.handOff(claims.takeLeased(.none, holds: holds, on: connection, leaseExpiry: leaseExpiry))
            throw error
        }
        claims.handOff(claims.takeLeased(leased, holds: holds, on: connection, leaseExpiry: leaseExpiry))
        return result
    }

    /// An expansion found no room in this worker for `apps` (empty: for any app; ``ExpansionStore/ExpansionResult/waitingForRoom(appIDs:)``):
    /// the expand loops are woken (``WorkerLoopContext/chunkWake``, ``WorkerLoopContext/sliceWakes``) once sends
    /// or written completions leave one of them room worth a chunk (``Admission/awaitRoom(apps:pendingCompletions:)``).
    /// - Returns: whether that room is there already: pick again now rather than wait.
    func awaitRoom(_ apps: [UUID]) -> Bool {
        let pending = completer.pending
        return admission.withLock { $0.awaitRoom(apps: apps, pendingCompletions: pending) }
    }

    /// Completions were written (their slots are free): wakes an expansion waiting for room if it has some now.
    func completionsWritten() {
        let pending = completer.pending
        wake(admission.withLock { $0.roomChecked(pendingCompletions: pending) })
    }

    /// Reads the rows leased at insert (`rows`, as the chunk's insert returned them), loads what they need on the
    /// chunk's connection (``ClaimedBatchPrefetch``) and settles `holds`: the rows read are counted in as a claimed
    /// batch, the other held slots are freed. A read that fails (setting an unreadable row aside) leaves the rows
    /// leased: they fall due at the lease's end and any worker claims them.
    /// - Returns: the parts to send, claim batches' worth each.
    private func takeLeased(
        _ rows: LeasedRows, holds: LeaseHolds, on connection: PostgresConnection, leaseExpiry: ContinuousClock.Instant
    ) -> [Part] {
        let configuration = context.configuration
        var leased: [ClaimedDelivery] = []
        if rows.count > 0 {
            do {
                leased = try ClaimStore.leasedRows(rows, on: connection)
                if let clock = leased.first?.databaseClock { context.clockWatch.record(clock) }
                prefetch.load(leased, on: connection)
                completer.pagesHandedOut(leased)
                leased = withoutAdopted(leased, leaseExpiry: leaseExpiry)
            } catch {
                context.logger.warning(
                    "reading deliveries leased at insert failed; they are claimed once their lease runs out",
                    ["error": "\(error)", "count": "\(rows.count)"])
            }
        }
        var byApp: [UUID: [ClaimedDelivery]] = [:]
        for delivery in leased { byApp[delivery.appID, default: []].append(delivery) }
        let held = holds.held.withLock { $0 }
        let pending = completer.pending
        var wakes: Admission.Wakes = []
        for (app, count) in held {
            let kept = byApp[app] ?? []
            wakes.formUnion(
                admission.withLock {
                    $0.admitReserved(
                        count, app: app, kept: kept.count, textBytes: kept.heldTextBytes, pendingCompletions: pending)
                })
        }
        wake(wakes)
        guard !leased.isEmpty else { return [] }
        context.metrics.leasedAtInsert(leased.count)
        let batch = max(1, configuration.claimBatch)
        return stride(from: 0, to: leased.count, by: batch).flatMap {
            Admission.splitByShare(Array(leased[$0..<min($0 + batch, leased.count)]), app: \.appID)
        }
    }

    /// `claimed` with its lease expiry set, less the deliveries this worker already answered: one claimed again
    /// because its lease ran out while the completion waited gives the waiting completion the new claim, and is
    /// not sent again. Deliveries rescued from an expired lease are counted and logged here, once per batch.
    private func withoutAdopted(_ claimed: [ClaimedDelivery], leaseExpiry: ContinuousClock.Instant) -> [ClaimedDelivery] {
        if let rescued = RescuedLeases(claimed) {
            context.metrics.rescued(byProvider: rescued.byProvider)
            context.logger.warning(
                "claimed deliveries whose leases ran out without a completion; rescuing them", rescued.logFields)
        }
        var claimed = claimed
        for index in claimed.indices { claimed[index].leaseExpiry = leaseExpiry }
        let fetched = claimed.count
        claimed.removeAll { completer.adopt($0) }
        if claimed.count < fetched {
            context.logger.warning(
                "claimed deliveries whose completions still wait; not sending them again",
                ["count": "\(fetched - claimed.count)"])
        }
        return claimed
    }

    /// Counts claimed deliveries in (``Admission/admit(apps:textBytes:)``). Returns the parts their sends run as
    /// (``Admission/splitByShare(_:app:)``), each to be passed to ``send(_:)``.
    private func admit(_ claimed: [ClaimedDelivery]) -> [Part] {
        guard !claimed.isEmpty else { return [] }
        let textBytes = claimed.heldTextBytes
        admission.withLock { $0.admit(apps: claimed.map(\.appID), textBytes: textBytes) }
        return Admission.splitByShare(claimed, app: \.appID)
    }

    /// Sends one admitted part and hands each completion to the completer, releasing its send slot.
    private func send(_ part: [ClaimedDelivery]) async {
        await processor.process(batch: part) { delivery, completion in
            self.completer.add(completion, leaseExpiry: delivery.leaseExpiry)
            let pending = self.completer.pending
            self.wake(self.admission.withLock { $0.completed(app: delivery.appID, pendingCompletions: pending) })
        }
        // The part's rows are released with this task.
        let held = part.heldTextBytes
        let pending = completer.pending
        wake(admission.withLock { $0.released(textBytes: held).union($0.roomChecked(pendingCompletions: pending)) })
    }

    private func wake(_ wakes: Admission.Wakes) {
        if wakes.contains(.claim) { context.claimWake.signal() }
        if wakes.contains(.capacity) { context.capacityWake.signal() }
        if wakes.contains(.expansion) {
            context.chunkWake.signal()
            for wake in context.sliceWakes { wake.signal() }
        }
    }

    /// The next-turn check's answer as ``Admission`` takes it; a failed check is logged (the next claim reports
    /// the database's error).
    private func nextTurnAnswer(_ nextTurn: Result<(wait: Double?, clock: DatabaseClockReading), any Error>?) -> Admission.NextTurn {
        switch nextTurn {
        case .success(let answer)?:
            return .answered(answer.wait.map { .seconds($0) })
        case .failure(let error)?:
            context.logger.debug("next claim turn check failed", ["error": "\(error)"])
            return .failed
        case nil:
            return .notAsked
        }
    }

    /// Whether nothing is in flight here and the queue holds no delivery (`PUSHIZO_EXIT_WHEN_DRAINED`).
    private func isDrained() async -> Bool {
        guard sending == 0, completer.pending == 0 else { return false }
        do {
            return try await context.database.withConnection { try QueueDepthStore.isDrained(on: $0) }
        } catch {
            context.logger.warning("drain check failed", ["error": "\(error)"])
            return false
        }
    }
}
