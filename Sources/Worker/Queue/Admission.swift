import Foundation

/// What the claim loop may take in, as a value without I/O (in the shape of postgres-nio's state machines:
/// events in, actions out): the worker's delivery slots (`PUSHIZO_CONCURRENCY`), the row text its batches in
/// flight hold, each app's share of the slots (``AppSlotShares``), the claim's limit, the wait after a claim and
/// the backoff after failed ones.
///
/// A delivery holds its slot from its claim until its completion is written, not merely until its send ends:
/// completions not yet written (`pendingCompletions`, the ``Completer``'s count, passed in with the events that
/// need it) hold their slots too, so claiming stops while they back up.
///
/// The claim loop keeps one behind a lock (the sends report into it from any task) and follows its actions;
/// instants and durations come in as values, so tests drive it without sockets or clocks.
struct Admission: Sendable {
    /// The worker's slots (`PUSHIZO_CONCURRENCY`).
    let concurrency: Int
    /// The most rows one claim asks for: `PUSHIZO_CLAIM_BATCH`, at most ``concurrency``.
    let batch: Int
    /// The fewest free slots worth a claim: half a batch, rather than claiming one row at a time.
    let minimumClaim: Int
    /// Most row text (bytes, ``Swift/Array/heldTextBytes``) held by batches in flight before claiming waits.
    let heldTextBudget: Int
    /// The longest wait between two claims (`PUSHIZO_POLL_INTERVAL`).
    let pollInterval: Duration

    /// Deliveries claimed whose sends have not ended.
    private(set) var sending = 0
    /// Row text held by claimed parts still being sent, in bytes.
    private(set) var heldTextBytes = 0
    /// Slots held for rows an expansion chunk may lease as it inserts them (``reserve(app:upTo:pendingCompletions:)``),
    /// until it says how many it leased.
    private(set) var reserved = 0
    /// Deliveries claimed since start (after those already answered were set aside).
    private(set) var claimedTotal = 0
    /// Claims failed in a row.
    private(set) var failures = 0
    /// Apps whose expansion waits for room in this worker to lease its rows (``awaitRoom(apps:pendingCompletions:)``);
    /// nil: none waits. Empty: room for any app is waited for.
    private(set) var roomWaits: Set<UUID>?
    /// The slots each app holds, and the room each may claim.
    private(set) var shares: AppSlotShares

    /// Most row text held by batches in flight before the claim loop waits: 32 MiB. The slots bound deliveries
    /// by count; rows of hostile size (64 KiB of user tags each) would make 2048 slots 130 MiB and more while a
    /// slow provider keeps them. One claim may still pass the bound (200 such rows: about 15 MiB).
    static let defaultHeldTextBudget = 32 << 20

    /// The most deliveries an app may have in a claimed batch for them to be sent at high priority: a few
    /// one-device notifications, not a share of a broadcast.
    static let smallShare = 8

    /// - Parameters:
    ///   - concurrency: `PUSHIZO_CONCURRENCY` (at least 1).
    ///   - claimBatch: `PUSHIZO_CLAIM_BATCH`.
    ///   - pollInterval: `PUSHIZO_POLL_INTERVAL`.
    init(concurrency: Int, claimBatch: Int, pollInterval: Duration, heldTextBudget: Int = Admission.defaultHeldTextBudget) {
        self.concurrency = concurrency
        batch = min(claimBatch, concurrency)
        minimumClaim = max(1, batch / 2)
        self.heldTextBudget = heldTextBudget
        self.pollInterval = pollInterval
        shares = AppSlotShares(concurrency: concurrency, minimumClaim: minimumClaim)
    }

    /// What the claim loop does next.
    enum ClaimStep: Equatable {
        /// Claim at most `limit` rows, each app within its room.
        case claim(limit: Int, room: ClaimRoom)
        /// Too few slots free, or the row text budget held: wait for a capacity wake-up, at most this long.
        case waitForCapacity(Duration)
    }

    /// What the claim loop does after a claim.
    enum AfterClaim: Equatable {
        /// The claim came back full: claim again at once.
        case claimAgain
        /// Wait this long (or for a wake-up) before the next claim.
        case wait(Duration)
    }

    /// The answer of the next-turn check asked after a short claim (``ClaimStore/nextTurn(on:)``).
    enum NextTurn: Equatable {
        /// Not asked (the claim was full).
        case notAsked
        /// An app's claim turn comes in this long (a delivery falls due, a limited app's bucket holds its next
        /// permit); nil: no turn known.
        case answered(Duration?)
        /// The check failed: the next claim reports the database's error.
        case failed
    }

    /// Which waits the loop wakes after a send event.
    struct Wakes: OptionSet, Equatable {
        let rawValue: Int
        /// The claim loop's turn wait (an app short of room for the last claim has some again).
        static let claim = Wakes(rawValue: 1)
        /// The claim loop's wait for capacity (slots, row text).
        static let capacity = Wakes(rawValue: 2)
        /// The expand loops' wait for room to lease an app's rows (``awaitRoom(apps:pendingCompletions:)``).
        static let expansion = Wakes(rawValue: 4)
    }

    /// Slots free for claiming: neither sending nor waiting for their completion's write.
    func freeSlots(pendingCompletions: Int) -> Int {
        concurrency - sending - reserved - pendingCompletions
    }

    /// Whether the row text budget is held (no claim until a part's rows are released).
    var holdsTextBudget: Bool { heldTextBytes >= heldTextBudget }

    /// The next step of the claim loop: a claim of a limit (``ClaimStore/claimLimit(free:batch:)``) when at least
    /// ``minimumClaim`` slots are free and the row text budget is not held, else a wait for capacity.
    func nextStep(pendingCompletions: Int) -> ClaimStep {
        let free = freeSlots(pendingCompletions: pendingCompletions)
        guard free >= minimumClaim, !holdsTextBudget else { return .waitForCapacity(pollInterval) }
        return .claim(limit: ClaimStore.claimLimit(free: free, batch: batch), room: shares.room)
    }

    /// Holds slots for up to `upTo` deliveries of `app` that an expansion chunk or a small notifications' pass may lease as it inserts them: no
    /// more than the free slots and what `app` may hold (``AppSlotShares/roomToHold(_:)``), as claims would take;
    /// none while the row text budget is held, and none while less than a chunk's worth is free for an app that
    /// holds that much already (``hasRoomWorthAChunk(_:pendingCompletions:)``). The held slots count as `app`'s
    /// until ``admitReserved(_:app:kept:textBytes:pendingCompletions:)``.
    /// - Returns: how many are held (0: lease none).
    mutating func reserve(app: UUID, upTo: Int, pendingCompletions: Int) -> Int {
        guard hasRoomWorthAChunk(app, pendingCompletions: pendingCompletions) else { return 0 }
        let count = max(0, min(upTo, roomToLease(app, pendingCompletions: pendingCompletions)))
        guard count > 0 else { return 0 }
        reserved += count
        shares.claimed(app, count: count)
        return count
    }

    /// Whether no app has room to lease rows at insert: no slot free, or the row text budget held
    /// (``reserve(app:upTo:pendingCompletions:)`` holds none for any app).
    func hasNoRoom(pendingCompletions: Int) -> Bool {
        holdsTextBudget || freeSlots(pendingCompletions: pendingCompletions) <= 0
    }

    /// The room worth a chunk of `app` that holds that many already: a quarter of what it may hold
    /// (``AppSlotShares/roomToHold(_:)`` and what it holds; 448 of 2,048 for a lone broadcast, 224 for each of
    /// two), so a paced broadcast goes on in chunks that pay for their fixed cost (the pick, the notification's
    /// update, the read of the leased rows, a few milliseconds of the database's time each) rather than a chunk per
    /// few sends, while its sends keep three quarters of its share busy at least.
    func roomWorthAChunk(_ app: UUID) -> Int {
        max(1, (shares.roomToHold(app) + shares.held[app, default: 0]) / 4)
    }

    /// The free slots `app` may hold now: what ``reserve(app:upTo:pendingCompletions:)`` holds at most.
    func roomToLease(_ app: UUID, pendingCompletions: Int) -> Int {
        guard !holdsTextBudget else { return 0 }
        return max(0, min(freeSlots(pendingCompletions: pendingCompletions), shares.roomToHold(app)))
    }

    /// Whether a chunk of `app` may lease now: it has room, and at least ``roomWorthAChunk(_:)`` of it when it
    /// holds that many already (a broadcast under way, whose own sends free its room as they end). An app holding
    /// fewer takes whatever room there is: a notification to a few devices does not wait for a broadcast's room.
    func hasRoomWorthAChunk(_ app: UUID, pendingCompletions: Int) -> Bool {
        let room = roomToLease(app, pendingCompletions: pendingCompletions)
        let worth = roomWorthAChunk(app)
        return room > 0 && (room >= worth || shares.held[app, default: 0] < worth)
    }

    /// An expansion found no room for `apps` (empty: for any app) and waits for it: a later release of slots
    /// (``completed(app:pendingCompletions:)``, ``admitReserved(_:app:kept:textBytes:pendingCompletions:)``, or
    /// ``roomChecked(pendingCompletions:)`` after row text is released or completions are written) that leaves one
    /// of them room for a chunk (``hasRoomWorthAChunk(_:pendingCompletions:)``; for any app, ``AppSlotShares/small``
    /// free slots) returns ``Wakes/expansion``, once.
    /// - Returns: whether that room is there already (pick again now rather than wait).
    mutating func awaitRoom(apps: [UUID], pendingCompletions: Int) -> Bool {
        if apps.isEmpty {
            roomWaits = []
        } else {
            roomWaits = (roomWaits ?? []).union(apps)
        }
        return roomChecked(pendingCompletions: pendingCompletions).contains(.expansion)
    }

    /// ``Wakes/expansion`` (and the end of the wait) when an app waited for has room worth a chunk
    /// (``awaitRoom(apps:pendingCompletions:)``): called after anything that frees slots or row text, and when
    /// completions are written.
    mutating func roomChecked(pendingCompletions: Int) -> Wakes {
        guard let waits = roomWaits else { return [] }
        let roomFound: Bool
        if waits.isEmpty {
            roomFound = !holdsTextBudget && freeSlots(pendingCompletions: pendingCompletions) >= shares.small
        } else {
            roomFound = waits.contains { hasRoomWorthAChunk($0, pendingCompletions: pendingCompletions) }
        }
        guard roomFound else { return [] }
        roomWaits = nil
        return .expansion
    }

    /// Ends a hold of `count` slots of `app` (``reserve(app:upTo:pendingCompletions:)``): `kept` of them were
    /// leased and are sent (counted in as ``admit(apps:textBytes:)`` counts a claim, `textBytes` their row
    /// text), the others are free again. `kept` may exceed `count`: a small notifications' pass sizes an
    /// external-id notification by the devices it counted, and a device registered between that count and the
    /// insert is leased too. Those rows are sent like the others, so each is counted in here: each completion
    /// gives back one slot (``completed(app:pendingCompletions:)``), and a row counted in for fewer would leave
    /// the worker believing it had that many more slots than it has, for the rest of its life.
    /// - Returns: the wake-ups the freed slots call for.
    mutating func admitReserved(_ count: Int, app: UUID, kept: Int, textBytes: Int, pendingCompletions: Int) -> Wakes {
        let kept = max(kept, 0)
        reserved -= count
        var wakes: Wakes = []
        if kept > count { shares.claimed(app, count: kept - count) }
        for _ in 0..<max(0, count - kept) {
            if shares.released(app, worthAClaim: minimumClaim) { wakes.insert(.claim) }
        }
        claimedTotal += kept
        sending += kept
        heldTextBytes += textBytes
        if count > kept && freeSlots(pendingCompletions: pendingCompletions) >= minimumClaim { wakes.insert(.capacity) }
        if count > kept { wakes.formUnion(roomChecked(pendingCompletions: pendingCompletions)) }
        return wakes
    }

    /// A claim of `limit` came back with `kept` rows to send (those already answered set aside). Ends a run of
    /// failures.
    /// - Returns: claim again at once after a full claim; otherwise wait the poll interval, or less when an
    ///   app's turn comes sooner (at least 20 ms, so the fleet's claims for a limited app stay a few per tenth of
    ///   a second).
    mutating func claimSucceeded(kept: Int, limit: Int, nextTurn: NextTurn) -> AfterClaim {
        failures = 0
        if kept > 0 && kept == limit { return .claimAgain }
        switch nextTurn {
        case .answered(let wait?):
            return .wait(min(pollInterval, max(.milliseconds(20), wait)))
        case .answered(nil), .failed, .notAsked:
            return .wait(pollInterval)
        }
    }

    /// A claim failed.
    /// - Returns: how long to wait before the next (``FailureBackoff``).
    mutating func claimFailed() -> Duration {
        failures += 1
        return FailureBackoff.after(failures: failures)
    }

    /// Counts claimed deliveries in: their slots (per app and in all) and their row text.
    /// - Parameters:
    ///   - apps: each claimed delivery's app, one entry per delivery.
    ///   - textBytes: the batch's row text (``Swift/Array/heldTextBytes``).
    mutating func admit(apps: [UUID], textBytes: Int) {
        for app in apps { shares.claimed(app) }
        claimedTotal += apps.count
        sending += apps.count
        heldTextBytes += textBytes
    }

    /// One delivery of `app` has its completion (handed to the completer, now counted in
    /// `pendingCompletions`): its send slot is released.
    /// - Returns: ``Wakes/claim`` when the release gave an app short of room for the last claim some again;
    ///   ``Wakes/capacity`` only when the claim loop would claim now (a wake-up per answer would be a hop to the
    ///   pool and a fresh wait for nothing while the slot waits for its write).
    mutating func completed(app: UUID, pendingCompletions: Int) -> Wakes {
        var wakes: Wakes = []
        if shares.released(app, worthAClaim: minimumClaim) { wakes.insert(.claim) }
        sending -= 1
        if freeSlots(pendingCompletions: pendingCompletions) >= minimumClaim { wakes.insert(.capacity) }
        return wakes.union(roomChecked(pendingCompletions: pendingCompletions))
    }

    /// A sent part's rows are released (`textBytes` of row text).
    /// - Returns: ``Wakes/capacity`` when the budget was held before.
    mutating func released(textBytes: Int) -> Wakes {
        let wasHeld = holdsTextBudget
        heldTextBytes -= textBytes
        return wasHeld ? .capacity : []
    }

    /// A claimed batch in the parts its sends run as, each with its task priority: the deliveries of apps with at
    /// most ``smallShare`` in the batch first, at high priority, then the rest at the default one (one part when
    /// the batch is all of one kind). Each app's deliveries stay together, in claim order.
    static func splitByShare<Element>(_ claimed: [Element], app: (Element) -> UUID) -> [(deliveries: [Element], priority: TaskPriority?)] {
        var counts: [UUID: Int] = [:]
        for delivery in claimed { counts[app(delivery), default: 0] += 1 }
        guard counts.count > 1 else { return [(claimed, nil)] }
        var small: [Element] = []
        var large: [Element] = []
        for delivery in claimed {
            if counts[app(delivery), default: 0] <= smallShare { small.append(delivery) } else { large.append(delivery) }
        }
        return [(small, TaskPriority.high), (large, nil)].filter { !$0.0.isEmpty }
    }
}

/// How long a worker loop waits after failures in a row: 0.2 s doubling to at most 5 s.
enum FailureBackoff {
    /// - Parameter failures: failures in a row (at least 1).
    static func after(failures: Int) -> Duration {
        .milliseconds(min(5000, 100 << min(max(failures, 0), 6)))
    }
}
