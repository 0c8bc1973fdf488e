import DeliveryCore
import Foundation
import Postgres

/// Expansion: due notifications turned into `deliveries` rows in resumable chunks, large broadcasts cut into
/// slices, scheduled notifications released once due and canceled ones swept (docs/targets.md). Each call one
/// short transaction on a connection the caller owns.
public enum ExpansionStore {
    /// Subscriptions one expansion chunk looks at (and so at most the deliveries it creates): small enough
    /// that a chunk's transaction stays short, large enough that a million subscriptions take 200 chunks.
    public static let expansionChunkSize = 5_000

    /// How large broadcasts are cut into slices that several expand tasks and workers expand at the same time
    /// (docs/targets.md, "Slices"): one backend inserts about 15 µs a row, so two cores need two backends.
    public struct Slicing: Sendable, Equatable {
        /// Active subscriptions per slice (0: never cut). Once a filter-form notification's first chunk finds
        /// more than this many after it, the rest of the app's id range is cut.
        public var size: Int
        /// Most slices one cut makes (at least 2): the cut reads at most this many slices' worth of the app's
        /// index. The last slice has no upper bound; its chunks cut what lies after them again, so an audience of
        /// any size ends up in slices while no cut reads more than this many slices' worth.
        public var maximumSlices: Int

        public init(size: Int, maximumSlices: Int = 256) {
            self.size = size
            self.maximumSlices = max(maximumSlices, 2)
        }

        /// Slices of 50,000: ten chunks each, so the last slice running alone at the end costs at most ten
        /// chunks' time. 32 per cut: a cut walks at most 1.6 million index entries (about a second; the first
        /// one holds the notification row and its task meanwhile), and a million-subscription broadcast is cut
        /// once.
        public static let `default` = Slicing(size: 50_000, maximumSlices: 32)
    }

    /// Deliveries an expansion chunk leases to its own worker as it inserts them, for that worker's delivery stage,
    /// instead of leaving them to a claim (docs/performance.md, "Deliveries leased at insert"). The leased rows
    /// are written as a first claim leaves them: `leased_by` the worker, `run_at` `now()` + `lease`, attempt and
    /// fence 1.
    ///
    /// With a lease, a chunk of a notification whose rows can be leased inserts only the rows it leases: its
    /// expansion is paced by the worker's sends. Its page is no longer than the room (the cursor stays after
    /// it), and a notification whose app has no room in this worker is not expanded at all (it is not
    /// picked, or picked and left as it was): the call goes on with the others and returns
    /// ``ExpansionResult/waitingForRoom(appIDs:)`` when only such ones are left. Never leased, and so expanded
    /// ahead as without a lease: a notification delivered at each subscriber's local time, and one of an app with
    /// a send limit (`apps.max_sends_per_second`, whose claims charge its token bucket).
    public struct InsertLease: Sendable {
        /// `PUSHIZO_WORKER_ID`.
        public var workerID: String
        /// How long the lease lasts (`PUSHIZO_LEASE_SECONDS`).
        public var lease: Duration
        /// No app has room in this worker as the call starts (no slot free, or the row text budget held): the
        /// notifications whose rows would be leased are not picked at all.
        public var noRoom: Bool
        /// Asked once per chunk (and once per app of a small notifications' pass), inside its transaction, with the
        /// app and how many deliveries the chunk may create: how many of them it may lease at most (the worker's free slots and the app's room in them,
        /// held for the chunk by the answer; 0: none, and the chunk waits). The caller gives back what the chunk
        /// did not lease.
        public var reserve: @Sendable (_ app: UUID, _ upTo: Int) -> Int
        /// A chunk leases its page whole (one `delivery_pages` row, docs/performance.md, "Pages leased at
        /// expansion") rather than inserting a leased `deliveries` row per delivery. A small notifications' pass
        /// always inserts rows.
        public var leasesPages: Bool

        public init(
            workerID: String, lease: Duration, noRoom: Bool = false, leasesPages: Bool = true,
            reserve: @escaping @Sendable (_ app: UUID, _ upTo: Int) -> Int
        ) {
            self.leasesPages = leasesPages
            self.workerID = workerID
            self.lease = lease
            self.noRoom = noRoom
            self.reserve = reserve
        }
    }

    /// Apps whose notifications one leasing call (``InsertLease``) finds waiting for room at most before it
    /// returns ``ExpansionResult/waitingForRoom(appIDs:)``: each costs a pick more.
    public static let roomWaitsPerCall = 16

    /// The most bytes of `notifications.target` (as PostgreSQL prints the jsonb) the worker reads: 20,000 ids
    /// of 200 bytes each fit; a larger target fails the notification (`invalid_target`) unread.
    public static let maximumTargetBytes = 4 << 20

    /// Data-error suspects one call of ``expandNext(on:chunkSize:suspects:pick:)`` sets aside at most before it
    /// returns (so a call, and the connection it holds, stays short).
    public static let expansionSetAsidePerCall = 16

    /// The outcome of one call to ``expandNext(on:chunkSize:suspects:pick:)``.
    public enum ExpansionResult: Sendable, Equatable {
        /// The last chunk committed: the notification is `expanded`. `created` counts this chunk's new rows.
        case expanded(notificationID: UUID, created: Int)
        /// A chunk committed and more subscriptions remain (status `expanding`, cursor saved).
        case expanding(notificationID: UUID, created: Int)
        /// The notification is `failed` with `reason`: a refused target (`invalid_target: ...`), a refused
        /// `ttl` / `priority` (`invalid_message: ...`), its `ttl` ran out before expansion finished
        /// (`expired: ...`), or a statement failed on its data (`data_exception: SQLSTATE 22...: ...`,
        /// `integrity_constraint_violation: SQLSTATE 23...: ...`) again after another notification's chunk
        /// committed. No further chunk is expanded.
        case failed(notificationID: UUID, reason: String)
        /// Only notifications whose rows this worker would lease are left to expand, and it has no room for their
        /// apps (these; empty: no room for any app): nothing was changed (``InsertLease``). Call again once room
        /// frees.
        case waitingForRoom(appIDs: [UUID])
        /// The chunks of these notifications failed on data (SQLSTATE class 22/23) with no evidence yet that
        /// the fault is theirs: each was rolled back and pushed behind the other due notifications, and stays
        /// `pending` / `expanding`. Call again.
        case setAside(notificationIDs: [UUID])
        /// Every due notification's chunk failed on data since this worker's last successful chunk, the last
        /// one (`notificationID`) with `sqlState`: a fault every chunk meets (a trigger or constraint on
        /// `deliveries`). Nothing was failed; back off before calling again.
        case stalled(notificationID: UUID, sqlState: String)
    }

    /// ``expandNext(on:chunkSize:suspects:pick:)`` with no memory of earlier calls: a data error is then never
    /// blamed on one notification (for one-off calls; a loop keeps its ``ExpansionSuspects``).
    static func expandNext(
        on connection: PostgresConnection, chunkSize: Int = expansionChunkSize, slicing: Slicing = .default,
        pick: ExpansionPick = .any
    ) throws -> ExpansionResult? {
        var suspects = ExpansionSuspects()
        return try expandNext(on: connection, chunkSize: chunkSize, slicing: slicing, suspects: &suspects, pick: pick)
    }

    /// Expands one chunk of the next due notification (docs/targets.md), in one short transaction.
    ///
    /// Picks a `pending` or `expanding` notification whose `send_after` has passed, least recently served
    /// first (never-served ones before the next chunk of a broadcast), locked `FOR UPDATE SKIP LOCKED` so
    /// several workers expand different notifications at once. Then: validates its target and its message's
    /// `ttl` and `priority` in Swift before any statement uses them (a refused one marks it `failed` with
    /// `invalid_target: ...` / `invalid_message: ...` and creates nothing); stops it as `failed`/`expired` when
    /// its `ttl` (> 0) has run out since `coalesce(send_after, created_at)`; otherwise inserts deliveries for
    /// the next `chunkSize` subscriptions after `expansion_cursor` (keyset pagination by `subscriptions.id`)
    /// and saves the new cursor, the running `targeted_count` and the status in the same transaction, so a
    /// crash between chunks resumes after the last committed one; `ON CONFLICT DO NOTHING` is the last guard
    /// against duplicates. Canceled notifications are never picked (their status is no longer
    /// pending/expanding).
    ///
    /// One notification's data never stops the others, and a fault every chunk meets fails nothing. If a
    /// statement of its chunk still fails with a PostgreSQL data error (SQLSTATE class 22, data exception, or
    /// 23, integrity constraint violation), the chunk is rolled back and `suspects` decides
    /// (``ExpansionSuspects/chunkFailed(_:lastTouched:at:)``): with evidence that the fault is the
    /// notification's own, it alone is marked `failed` in a second short transaction with a reason naming the
    /// SQLSTATE (``PostgresError/dataErrorReason``) and the call returns `.failed`; otherwise its `expansion_touched_at`
    /// is bumped in a short transaction (so picks reach the others first) and the call goes on with the next
    /// notification, returning `.setAside` after ``expansionSetAsidePerCall`` of them (or when none is left),
    /// or `.stalled` when every due notification failed since the last success. The one class-23 error a
    /// healthy chunk can meet, a foreign-key violation because a subscription was deleted while its page was
    /// read, is retried first.
    ///
    /// A filter-form notification whose first chunk leaves more than `slicing.size` subscriptions is cut into
    /// slices (``Slicing``; docs/targets.md, "Slices") in that chunk's transaction; its later chunks
    /// are slice chunks (`pick: .slice`), which lock a slice row instead of the notification row, so several
    /// tasks and workers expand one broadcast at once. `.skippingSmall` never picks a sliced notification;
    /// `.any` and `.only` run its slices one at a time under the notification's lock.
    ///
    /// Delivery priority (claimed highest first): 10 for `priority: "high"`, else 5, plus 1 for the id-list
    /// forms, so a message to a few listed users overtakes a broadcast's backlog of the same urgency.
    /// - Parameter suspects: this worker's memory of data-error suspects, kept by the caller across calls.
    /// - Parameter slicing: how a large broadcast is cut into slices.
    /// - Returns: `nil` when no notification is due.
    /// - Throws: ``PostgresError`` from the database other than a data error of a picked notification's chunk
    ///   (the transaction is rolled back; nothing is lost).
    /// - Parameter pick: which due notifications are candidates (``ExpansionPick``); `.any` by default. With
    ///   `.only`, a set-aside or stalled notification ends the call at once (there is no other to go on with).
    public static func expandNext(
        on connection: PostgresConnection, chunkSize: Int = expansionChunkSize,
        slicing: Slicing = .default, suspects: inout ExpansionSuspects, pick: ExpansionPick = .any
    ) throws -> ExpansionResult? {
        var leased = LeasedRows.none
        return try expandNext(
            on: connection, chunkSize: chunkSize, slicing: slicing, suspects: &suspects, pick: pick, lease: nil,
            leased: &leased)
    }

    /// ``expandNext(on:chunkSize:slicing:suspects:pick:)`` in a worker that sends: a notification whose rows can be
    /// leased gets only as many new deliveries as `lease` gives room for, each leased to this worker as it is
    /// inserted, and none without room (``InsertLease``; then ``ExpansionResult/waitingForRoom(appIDs:)`` when
    /// nothing else is due).
    /// - Parameter leased: set to the deliveries the committed chunk inserted leased, in the claim's row shape as
    ///   its insert returned them (``LeasedRows/none`` when none, or when the call throws); read them with
    ///   ``ClaimStore/leasedRows(_:on:)``.
    public static func expandNext(
        on connection: PostgresConnection, chunkSize: Int = expansionChunkSize,
        slicing: Slicing = .default, suspects: inout ExpansionSuspects, pick: ExpansionPick = .any,
        lease: InsertLease?, leased: inout LeasedRows
    ) throws -> ExpansionResult? {
        var setAside: [UUID] = []
        var foreignKeyRetries = 0
        leased = .none
        while true {
            var picked: PickedNotification?
            do {
                var committed = LeasedRows.none
                let result = try expandChunk(
                    on: connection, chunkSize: chunkSize, slicing: slicing, pick: pick, lease: lease,
                    leased: &committed, picked: &picked)
                leased = committed
                switch result {
                case .expanded(let id, let created)?, .expanding(let id, let created)?:
                    if let picked { suspects.chunkCommitted(id, created: created, at: picked.now) }
                case .failed(let id, _)?:
                    suspects.forget(id)
                case nil:
                    return setAside.isEmpty ? nil : .setAside(notificationIDs: setAside)
                case .waitingForRoom?:
                    if !setAside.isEmpty { return .setAside(notificationIDs: setAside) }
                case .setAside?, .stalled?:
                    break
                }
                return result
            } catch let error as PostgresError where error.isDataError {
                guard let picked else { throw error }
                // A subscription deleted between reading the page and inserting its delivery: the next
                // attempt no longer sees it.
                if error.sqlState == "23503" && foreignKeyRetries < 2 {
                    foreignKeyRetries += 1
                    continue
                }
                foreignKeyRetries = 0
                switch suspects.chunkFailed(picked.id, lastTouched: picked.touchedAt, at: picked.now) {
                case .fail:
                    let reason = error.dataErrorReason
                    try connection.transaction { connection in
                        _ = try connection.query(
                            """
                            UPDATE notifications
                            SET status = 'failed', status_reason = $2, expansion_touched_at = clock_timestamp()
                            WHERE id = $1 AND status IN ('pending', 'expanding')
                            """, [picked.id, reason])
                    }
                    return .failed(notificationID: picked.id, reason: reason)
                case .setAside:
                    try pushBehind([picked.id], on: connection)
                    setAside.append(picked.id)
                    if setAside.count >= expansionSetAsidePerCall { return .setAside(notificationIDs: setAside) }
                    // One named notification: there is no next one to go on with.
                    if case .only = pick { return .setAside(notificationIDs: setAside) }
                case .stalled:
                    try pushBehind([picked.id], on: connection)
                    return .stalled(notificationID: picked.id, sqlState: error.sqlState ?? "?????")
                }
            }
        }
    }

    /// What the pick statement read about the notification a chunk works on.
    struct PickedNotification {
        let id: UUID
        /// Its `expansion_touched_at` before this chunk.
        let touchedAt: Date?
        /// The transaction's `now()`.
        let now: Date
    }

    /// Moves notifications behind the other due ones (the pick takes the least recently touched first); a
    /// touched notification is no longer small, so the chunk step expands it.
    static func pushBehind(_ notificationIDs: [UUID], on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            UPDATE notifications SET expansion_touched_at = clock_timestamp()
            WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'expanding')
            """, [notificationIDs])
    }

    /// Longest JSON text of `message.ttl` / `message.priority` read for validation; valid ones are far shorter.
    static let schedulingMemberBytes = 64

    /// The columns a pick reads (`$1` = ``schedulingMemberBytes``). Nothing here casts producer data: jsonb
    /// members come out as text (bounded in length), timestamps as they are (`infinity` included), so a pick
    /// cannot fail on one notification's data.
    static let pickColumns = """
        id, app_id,
        -- The target written out as text once (OFFSET 0 keeps the subquery, so its bound and its value are the same
        -- text): written twice, a list of 1,000 ids cost the pick two reads of its TOAST chunks and two conversions,
        -- most of the pick's CPU.
        (SELECT CASE WHEN octet_length(t) <= \(maximumTargetBytes) THEN t END
         FROM (SELECT target::text AS t OFFSET 0) written) AS target,
        expansion_cursor, expansion_touched_at, expansion_sliced, status,
        CASE WHEN octet_length((message->'ttl')::text) > $1 THEN '"(too long)"'
             ELSE (message->'ttl')::text END AS ttl,
        CASE WHEN octet_length((message->'priority')::text) > $1 THEN '"(too long)"'
             ELSE (message->'priority')::text END AS priority,
        CASE WHEN octet_length((message->'delivery_time_of_day')::text) > $1 THEN '"(too long)"'
             ELSE (message->'delivery_time_of_day')::text END AS delivery_time_of_day,
        coalesce(send_after, created_at) AS start_at, now() AS now,
        CASE WHEN octet_length((message->'apns_push_type')::text) > $1 THEN '"(too long)"'
             ELSE (message->'apns_push_type')::text END AS apns_push_type
        """

    /// The pick of one chunk: the next due notification `pick` allows, least recently served first, locked
    /// (`$1` = ``schedulingMemberBytes``, `$2` the id for `.only`). `.skippingSmall` reads the partial index
    /// `notifications_to_expand_large` (migration 0017), whose predicate is this statement's clauses, so it
    /// reaches the next large notification without walking past the pending small ones or those scheduled for
    /// later (which wait for ``releaseScheduled(on:limit:)``). `.any` and `.only` take a scheduled notification
    /// as soon as its `send_after` has passed, released or not.
    ///
    /// With `roomless` (a leasing call, ``InsertLease``), the pick skips the notifications whose rows would be
    /// leased of the apps without room (`$2` or, with `.only`, `$3`: no app has room; the next: the apps found
    /// without), as ``roomNarrowing(_:)`` says, and reads whether its app's rows may be leased (``leasableColumn``)
    /// in the same statement.
    static func chunkPickSQL(_ pick: ExpansionPick, roomless: Bool = false) -> String {
        let columns = roomless ? ", \(leasableColumn)" : ""
        return switch pick {
        case .any: pickSQL(narrowing: roomless ? roomNarrowing(2) : "", limit: 1, columns: columns)
        case .skippingSmall:
            candidatePickSQL(
                narrowing: "AND NOT scheduled AND NOT expansion_sliced AND NOT (\(SmallNotificationStore.smallNotificationPredicate))"
                    + (roomless ? " " + roomNarrowing(2) : ""),
                columns: columns)
        case .only: pickSQL(narrowing: "AND id = $2" + (roomless ? " " + roomNarrowing(3) : ""), limit: 1, columns: columns)
        case .slice: roomless ? slicePickSQL(narrowing: roomNarrowing(2), columns: columns) : slicePickSQL
        }
    }

    /// `leasable`: whether the picked notification's app (of `notifications`) may have its deliveries leased at
    /// insert: not while it has a send limit (`apps.max_sends_per_second`: its claims charge its token bucket,
    /// docs/throttle.md), nor while an operator pauses it or the fleet (``ClaimPauses``: its rows are expanded ahead
    /// and wait, as the claim leaves them). A lookup by key in the pick, so a leasing chunk asks it without a
    /// round trip of its own.
    static let leasableColumn = """
        (SELECT a.max_sends_per_second IS NULL AND \(ClaimPauses.leaseCondition)
         FROM apps a WHERE a.id = notifications.app_id) AS leasable
        """

    /// `AND ...`: a notification (named `notifications`) a leasing call may pick: one whose rows would not be
    /// leased (delivered at local time, or of an app with a send limit: expanded ahead whatever the room), one
    /// of an app with room (`$first`: no app has room; `$first + 1`: the apps without), or one no longer expanding
    /// (its open slices are closed, whatever the room).
    static func roomNarrowing(_ first: Int) -> String {
        """
        AND (NOT ($\(first)::boolean OR notifications.app_id = ANY($\(first + 1)::uuid[]))
             OR notifications.status NOT IN ('pending', 'expanding')
             OR coalesce(jsonb_typeof(notifications.message -> 'delivery_time_of_day'), 'null') <> 'null'
             OR EXISTS (SELECT 1 FROM apps a WHERE a.id = notifications.app_id AND a.max_sends_per_second IS NOT NULL))
        """
    }

    /// Which slices the slice pick takes, by their notification (named `notifications`): due, or no longer
    /// expanding (canceled or failed: the pick closes their slices). ``isExpansionDrained(on:)`` asks the same.
    static let slicePickable = """
        (notifications.send_after IS NULL OR notifications.send_after <= now()
         OR notifications.status NOT IN ('pending', 'expanding'))
        """

    /// The slice pick: a slice left to do, of the notification least recently served (so two sliced
    /// broadcasts take turns however many slices each has), locked `FOR UPDATE OF` the slice `SKIP LOCKED`.
    /// The notification row is locked only `FOR KEY SHARE`, which other chunks of it share, so other tasks take
    /// its other slices at the same time; and it is locked here, with the slice, as the deliveries' insert
    /// trigger would lock it later anyway: a producer deleting the notification then either holds it first (the
    /// pick skips it) or waits for the chunk, never holding the notification while waiting for the slice row
    /// its cascade deletes (each waiting for the other: a deadlock). Slices of a notification that is no longer
    /// `expanding` (canceled, failed) are picked too, and closed; a notification whose `send_after` a producer
    /// moved into the future waits. `$1` = ``schedulingMemberBytes``.
    ///
    /// Each open slice's notification is looked up by primary key (a `LATERAL` subquery the locking clause names):
    /// as a join, the planner could merge the slices with a walk of `notifications_pkey` from its start up to the
    /// sliced notification's id, half the table on average, on every turn of every expand task. The lock then
    /// applies inside the subquery, to the notification of every open slice the pick considers, not only the
    /// picked one: `FOR KEY SHARE`, which other chunks share and producers' cancels (status updates) do not
    /// conflict with; a producer deleting another sliced broadcast waits for this chunk's transaction.
    static let slicePickSQL = slicePickSQL(narrowing: "")

    /// ``slicePickSQL`` with `narrowing` (`AND ...`, naming the slice's notification `notifications`).
    static func slicePickSQL(narrowing: String, columns: String = "") -> String {
        """
        SELECT \(pickColumns), s.slice, s.slice_after, s.slice_upto\(columns)
        FROM expansion_slices s
        CROSS JOIN LATERAL (SELECT * FROM notifications WHERE id = s.notification_id OFFSET 0) notifications
        WHERE \(slicePickable) \(narrowing)
        ORDER BY expansion_touched_at NULLS FIRST, s.notification_id, s.slice
        LIMIT 1
        FOR UPDATE OF s SKIP LOCKED
        FOR KEY SHARE OF notifications SKIP LOCKED
        """
    }

    /// The chunk step's pick (`.skippingSmall`) in two steps: the due notifications that meet `narrowing` (`AND ...`,
    /// naming the table `notifications`) in the order of ``pickSQL(narrowing:limit:columns:)``, walked unlocked, then
    /// each looked up by primary key and locked `FOR UPDATE SKIP LOCKED` (the first one not locked is the pick);
    /// `columns` as there. A walk under the lock keeps `notifications_to_expand_large`'s predicate as a filter
    /// (PostgreSQL keeps a locked table's implied quals for its rechecks), which reads and writes out the `target`
    /// of every pending notification it passes twice: a pick that skipped the notifications of an app without room
    /// walked all 100 of a drain's pending ones, 1,400-1,800 shared buffers and 75-80 ms. Unlocked, the walk tests
    /// only the clauses the index does not imply. The lookup tests the state again (on the version it locks, after
    /// a concurrent update), all but the small test: a touched notification is never small again, and one a
    /// producer's new target made small meanwhile is expanded in chunks, which is as correct.
    static func candidatePickSQL(narrowing: String, columns: String) -> String {
        """
        SELECT notifications.*
        FROM (SELECT id AS candidate, expansion_touched_at AS candidate_touched_at, created_at AS candidate_created_at
              FROM notifications
              WHERE status IN ('pending', 'expanding') AND (send_after IS NULL OR send_after <= now())
                \(narrowing)
              ORDER BY expansion_touched_at NULLS FIRST, created_at
              OFFSET 0) candidates
        CROSS JOIN LATERAL (
            SELECT \(pickColumns)\(columns)
            FROM notifications
            WHERE id = candidates.candidate AND status IN ('pending', 'expanding')
              AND (send_after IS NULL OR send_after <= now()) AND NOT scheduled AND NOT expansion_sliced
            OFFSET 0) notifications
        ORDER BY candidate_touched_at NULLS FIRST, candidate_created_at
        LIMIT 1
        FOR UPDATE OF notifications SKIP LOCKED
        """
    }

    /// A pick of up to `limit` due notifications that also meet `narrowing` (`AND ...`), least recently served
    /// first, locked `FOR UPDATE SKIP LOCKED`: the chunk step's and the bulk pass's. `columns`: more to read
    /// (`, ...`).
    static func pickSQL(narrowing: String, limit: Int, columns: String = "") -> String {
        """
        SELECT \(pickColumns)\(columns)
        FROM notifications
        WHERE status IN ('pending', 'expanding') AND (send_after IS NULL OR send_after <= now())
          \(narrowing)
        ORDER BY expansion_touched_at NULLS FIRST, created_at
        LIMIT \(limit)
        FOR UPDATE SKIP LOCKED
        """
    }

    /// Clears `notifications.scheduled` (migration 0017) of up to `limit` notifications whose `send_after` has
    /// passed, so the expand loop's picks see them; rows another worker is releasing are skipped. The expand
    /// loop calls it before its bulk pass, at most every 100 ms while it releases nothing.
    /// - Returns: how many were released.
    /// - Throws: ``PostgresError``.
    public static func releaseScheduled(on connection: PostgresConnection, limit: Int = 10_000) throws -> Int {
        try connection.preparedQuery(
            """
            UPDATE notifications SET scheduled = false
            WHERE id = ANY (ARRAY(
                SELECT id FROM notifications WHERE scheduled AND send_after <= now()
                ORDER BY send_after LIMIT \(max(limit, 1)) FOR UPDATE SKIP LOCKED))
            """
        ).affectedRows
    }

    /// A slice a chunk works on: which, and the ids left in it (after `after`, up to `upTo` inclusive).
    struct PickedSlice {
        let index: Int
        let after: UUID
        let upTo: UUID?

        /// From a row with the columns `slice`, `slice_after`, `slice_upto`.
        init(_ row: PostgresRow) throws {
            index = try row.decode(Int.self, "slice")
            after = try row.decode(UUID.self, "slice_after")
            upTo = try row.decodeIfPresent(UUID.self, "slice_upto")
        }
    }

    /// One chunk in one transaction; `leased`: the deliveries it inserted leased, set only when it commits.
    private static func expandChunk(
        on connection: PostgresConnection, chunkSize: Int, slicing: Slicing, pick: ExpansionPick,
        lease: InsertLease?, leased: inout LeasedRows, picked: inout PickedNotification?
    ) throws
        -> ExpansionResult?
    {
        var inserted = LeasedRows.none
        let result = try expandChunkTransaction(
            on: connection, chunkSize: chunkSize, slicing: slicing, pick: pick, lease: lease, leased: &inserted,
            picked: &picked)
        leased = inserted
        return result
    }

    private static func expandChunkTransaction(
        on connection: PostgresConnection, chunkSize: Int, slicing: Slicing, pick: ExpansionPick,
        lease: InsertLease?, leased: inout LeasedRows, picked: inout PickedNotification?
    ) throws
        -> ExpansionResult?
    {
        // Sequential and bitmap scans off: every statement of a chunk is a lookup by key or a walk of an index in
        // order. On a notifications table whose statistics still say empty (new, or not analyzed since it
        // filled), the pick was planned as a scan of every pending notification and a sort of them, each one's
        // target turned into text on the way: 52 ms and 3.9 MB sorted for 100 notifications of 1,000 listed ids,
        // 72 ms and 7.8 MB sorted on disk for 200 of 300, at every pick; 0.7 ms walking its partial index.
        // JIT off with them: a table with no index to use (expansion_slices) is still scanned, at a cost raised
        // by 10^10, which set off JIT compilation of the slice pick (about 160 ms a chunk).
        try connection.transaction(localSettings: ["enable_seqscan": "off", "enable_bitmapscan": "off", "jit": "off"]) { connection in
            var fixedParameters: [any PostgresEncodable] = [schedulingMemberBytes]
            if case .only(let id) = pick { fixedParameters.append(id) }
            // Apps this call found without room in this worker: their notifications that would be leased are not
            // picked again in it (``InsertLease``).
            var waiting: [UUID] = []
            var row: PostgresRow
            var slice: PickedSlice?
            var appID: UUID
            var checked: (selection: AudienceSelection, priority: Int, localTime: LocalTimeSchedule?)
            var quota = 0
            picking: while true {
                slice = nil
                let parameters = fixedParameters + (lease.map { [$0.noRoom, waiting] } ?? [])
                while true {
                    // Prepared: most picks of a drain find nothing (the loop asks again as it waits for room or
                    // work), and planning was nearly all of such a pick's 0.4-0.5 ms.
                    guard let first = try connection.preparedQuery(chunkPickSQL(pick, roomless: lease != nil), parameters).first
                    else {
                        guard let lease, lease.noRoom || !waiting.isEmpty else { return nil }
                        return .waitingForRoom(appIDs: lease.noRoom ? [] : waiting)
                    }
                    row = first
                    let notificationID = try row.decode(UUID.self, "id")
                    if case .slice = pick {
                        let current = try PickedSlice(row)
                        // Canceled or failed since it was cut (or expanded by a worker that ran its slices itself):
                        // the slice is closed and the next one picked.
                        guard try row.decode(String.self, "status") == "expanding" else {
                            try closeSlice(current, of: notificationID, on: connection)
                            continue
                        }
                        slice = current
                    } else if try row.decode(Bool.self, "expansion_sliced") {
                        // `.any` / `.only` reached a sliced notification: one of its slices, under the notification's
                        // lock (so nothing in parallel, but the same work).
                        guard
                            let next = try connection.query(
                                """
                                SELECT slice, slice_after, slice_upto FROM expansion_slices
                                WHERE notification_id = $1 ORDER BY slice LIMIT 1
                                FOR UPDATE SKIP LOCKED
                                """, [notificationID]
                            ).first
                        else {
                            return try finishSliced(notificationID, created: 0, on: connection)
                        }
                        slice = try PickedSlice(next)
                    }
                    break
                }
                let notificationID = try row.decode(UUID.self, "id")
                picked = PickedNotification(
                    id: notificationID, touchedAt: try row.decodeIfPresent(Date.self, "expansion_touched_at"),
                    now: try row.decode(Date.self, "now"))
                appID = try row.decode(UUID.self, "app_id")
                switch try checkPicked(row) {
                case .refused(let reason):
                    if let slice { try closeSlice(slice, of: notificationID, on: connection) }
                    try markFailed(connection, notificationID, reason: reason)
                    return .failed(notificationID: notificationID, reason: reason)
                case .channelSend(let channel):
                    // One broadcast on the channel, no per-device rows (docs/live-activity-channels.md).
                    if let slice { try closeSlice(slice, of: notificationID, on: connection) }
                    try LiveActivityChannelStore.enqueueSend(notificationID, appID: appID, channel: channel, on: connection)
                    return .expanded(notificationID: notificationID, created: 1)
                case .accepted(let selection, let priority, let localTime):
                    checked = (selection, priority, localTime)
                }
                // Rows due later (local time) and a send-limited app's are never leased: expanded ahead, and the
                // worker's room is not asked. Rows that would be leased are inserted only as far as the room goes,
                // and none without room: the notification is left as it was (its lock ends with this transaction,
                // for a worker with room) and the next one picked.
                guard let lease, checked.localTime == nil, try row.decodeIfPresent(Bool.self, "leasable") ?? false
                else { break }
                quota = lease.reserve(appID, chunkSize)
                if quota > 0 { break }
                waiting.append(appID)
                if waiting.count >= roomWaitsPerCall { return .waitingForRoom(appIDs: waiting) }
            }
            let notificationID = try row.decode(UUID.self, "id")
            let cursor = try slice?.after ?? row.decodeIfPresent(UUID.self, "expansion_cursor")
            let selection = checked.selection
            let priority = checked.priority
            let query = AudienceQuery(
                selection: selection, first: cursor == nil, localTime: checked.localTime, upTo: slice?.upTo,
                lease: lease.flatMap { quota > 0 ? ($0.workerID, $0.lease.inSeconds) : nil },
                leasePage: lease?.leasesPages ?? false)
            // A leasing chunk's page is no longer than its room: it inserts what it leases and no more, and reads no
            // more of the app's subscriptions than that (a page of 5,000 for a room of 400 read twelve times the
            // rows it inserted). A filter that matches few of them leases fewer, and the next chunk goes on.
            let pageSize = quota > 0 ? min(chunkSize, quota) : chunkSize
            let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            let chunkParameters: [any PostgresEncodable] =
                [notificationID, appID, cursor ?? nilUUID, pageSize, priority, selection.platforms]
                + query.parameters
            let sent = DatabaseClockReading.StatementTiming()
            let rows = try query.prepared
                ? connection.preparedQuery(query.sql, chunkParameters) : connection.query(query.sql, chunkParameters)
            let chunk = rows[0]
            let scanned = try chunk.decode(Int.self, "scanned")
            let created = try chunk.decode(Int.self, "created")
            let lastID = try chunk.decodeIfPresent(UUID.self, "last_id")
            // The leased rows, once the notification's update below gives their version.
            func leasedRows(version: String) -> LeasedRows {
                quota > 0 && created > 0
                    ? LeasedRows(
                        rows: rows, sent: sent, messageVersions: [notificationID: version],
                        pages: lease?.leasesPages ?? false)
                    : .none
            }
            // A slice is also done when its page reached its upper bound (an active id when it was cut), which
            // spares the empty chunk that would otherwise find that out.
            let done = scanned < pageSize || (slice?.upTo != nil && lastID == slice?.upTo)
            // Each cut reads up to a slice's worth of the app's index after the page: worth it after a full page, not
            // after each of a paced broadcast's small ones (51 reads of up to 20,000 entries for a 20,000-device
            // broadcast, a quarter of the database's time), where its first chunk cuts.
            let mayCut = pageSize == chunkSize || cursor == nil
            if let slice {
                // The last, open-ended slice cuts what lies after its page again (nothing when less than a
                // slice is left), so no audience stays in one slice however large.
                var recut = false
                if !done, mayCut, slice.upTo == nil, let lastID, slicing.size > 0 {
                    recut = try cutIntoSlices(
                        notificationID, appID: appID, after: lastID, slicing: slicing, openEnded: slice,
                        on: connection)
                }
                let (result, version) = try finishSliceChunk(
                    slice, of: notificationID, lastID: recut ? nil : lastID, done: done, created: created,
                    on: connection)
                leased = leasedRows(version: version)
                return result
            }
            // A filter form with more than a slice left is cut into slices now (id lists never are: their
            // page is the list itself, never the app's index).
            var sliced = false
            if !done, mayCut, !selection.target.isListed, let lastID, slicing.size > 0 {
                sliced = try cutIntoSlices(notificationID, appID: appID, after: lastID, slicing: slicing, on: connection)
            }
            let version = try connection.query(
                """
                UPDATE notifications
                SET status = CASE WHEN $2::boolean THEN 'expanded' ELSE 'expanding' END,
                    expanded_at = CASE WHEN $2::boolean THEN now() END,
                    expansion_cursor = coalesce($3::uuid, expansion_cursor),
                    targeted_count = coalesce(targeted_count, 0) + $4::integer,
                    expansion_touched_at = clock_timestamp(),
                    expansion_sliced = expansion_sliced OR $5::boolean
                WHERE id = $1
                RETURNING xmin::text AS version
                """, [notificationID, done, lastID, created, sliced])[0].decode(String.self, "version")
            leased = leasedRows(version: version)
            return done
                ? .expanded(notificationID: notificationID, created: created)
                : .expanding(notificationID: notificationID, created: created)
        }
    }

    /// Cuts the app's active subscriptions after `after` into slices of `slicing.size` (at most
    /// `slicing.maximumSlices`, the last one open-ended) in `expansion_slices`, reading the app's
    /// `subscriptions_app_active` index once up to the last cut. Nothing is cut when fewer than a slice remain.
    /// With `openEnded` (the last slice, whose cursor `after` is), that slice is the first range: it now ends at
    /// the first cut, and the new slices are numbered after it.
    /// - Returns: whether anything was cut.
    static func cutIntoSlices(
        _ notificationID: UUID, appID: UUID, after: UUID, slicing: Slicing, openEnded: PickedSlice? = nil,
        on connection: PostgresConnection
    ) throws -> Bool {
        // Every size-th id after the cursor: the window streams in index order, so the LIMIT ends the scan.
        let bounds = try connection.query(
            """
            SELECT id FROM (
                SELECT id, row_number() OVER (ORDER BY id) AS n
                FROM subscriptions WHERE app_id = $1 AND status = 'active' AND id > $2
            ) x
            WHERE n % $3 = 0
            ORDER BY id
            LIMIT $4
            """, [appID, after, slicing.size, slicing.maximumSlices - 1]
        ).map { try $0.decode(UUID.self, "id") }
        guard let firstCut = bounds.first else { return false }
        var lowers = [after] + bounds
        var first = 0
        if let openEnded {
            _ = try connection.query(
                """
                UPDATE expansion_slices SET slice_after = $3, slice_upto = $4
                WHERE notification_id = $1 AND slice = $2
                """, [notificationID, openEnded.index, after, firstCut])
            lowers.removeFirst()
            first = openEnded.index + 1
        }
        // unnest pads the shorter array with NULL: the last slice has no upper bound.
        _ = try connection.query(
            """
            INSERT INTO expansion_slices (notification_id, slice, slice_after, slice_upto)
            SELECT $1, ($4 + b.i - 1)::integer, b.after, b.upto
            FROM unnest($2::uuid[], $3::uuid[]) WITH ORDINALITY AS b(after, upto, i)
            """, [notificationID, lowers, openEnded == nil ? bounds : Array(bounds.dropFirst()), first])
        return true
    }

    /// Saves a slice chunk: the slice's cursor (`lastID`; nil when already saved) or, once `done`, the slice's
    /// end (its row deleted); then the notification's count, and once no slice is left the notification is
    /// `expanded`. The notification row is updated last, so two chunks of one notification wait for each other
    /// only there, for the other's commit; the "any slice left?" question is a statement
    /// of its own after that wait, so under READ COMMITTED it sees the other chunk's committed slice: of two
    /// chunks closing the last two slices at once, the second to commit finishes the notification.
    /// - Returns: the chunk's result, and the notification's row version (`xmin`) as the chunk leaves it.
    private static func finishSliceChunk(
        _ slice: PickedSlice, of notificationID: UUID, lastID: UUID?, done: Bool, created: Int,
        on connection: PostgresConnection
    ) throws -> (ExpansionResult, version: String) {
        if done {
            try closeSlice(slice, of: notificationID, on: connection)
        } else if let lastID {
            _ = try connection.query(
                """
                UPDATE expansion_slices SET slice_after = $3 WHERE notification_id = $1 AND slice = $2
                """, [notificationID, slice.index, lastID])
        }
        let version = try connection.query(
            """
            UPDATE notifications
            SET targeted_count = coalesce(targeted_count, 0) + $2::integer, expansion_touched_at = clock_timestamp()
            WHERE id = $1
            RETURNING xmin::text AS version
            """, [notificationID, created])[0].decode(String.self, "version")
        if done { return (try finishSliced(notificationID, created: created, on: connection), version) }
        return (.expanding(notificationID: notificationID, created: created), version)
    }

    /// Marks a sliced notification `expanded` if none of its slices is left (in a statement of its own: see
    /// ``finishSliceChunk(_:of:lastID:done:created:on:)``). The notification's version is the chunk's already:
    /// its transaction updated the row before.
    private static func finishSliced(_ notificationID: UUID, created: Int, on connection: PostgresConnection) throws
        -> ExpansionResult
    {
        let finished = try connection.query(
            """
            UPDATE notifications SET status = 'expanded', expanded_at = now(), expansion_touched_at = clock_timestamp()
            WHERE id = $1 AND status = 'expanding'
              AND NOT EXISTS (SELECT 1 FROM expansion_slices WHERE notification_id = $1)
            """, [notificationID]
        ).affectedRows
        return finished > 0
            ? .expanded(notificationID: notificationID, created: created)
            : .expanding(notificationID: notificationID, created: created)
    }

    /// Closes a slice: deletes its row (finished, or its notification is no longer expanding).
    private static func closeSlice(_ slice: PickedSlice, of notificationID: UUID, on connection: PostgresConnection)
        throws
    {
        _ = try connection.query(
            "DELETE FROM expansion_slices WHERE notification_id = $1 AND slice = $2", [notificationID, slice.index])
    }

    /// Turns the pending deliveries of one `canceled` notification into `skipped`/`canceled` events, up to
    /// `limit` per call, in one statement (delete from the queue + append the events) and one short
    /// transaction. Pending = not under a live lease (`leased_by IS NULL`, or its lease has run out); a
    /// delivery in flight finishes, and if it is retried its next claim sees the canceled status and skips it.
    /// When fewer than `limit` were left, the notification is marked swept (`cancel_swept_at`).
    /// - Returns: the notification and how many deliveries were skipped, or `nil` when none waits.
    /// - Throws: ``PostgresError``.
    public static func sweepCanceled(on connection: PostgresConnection, limit: Int = expansionChunkSize) throws
        -> (notificationID: UUID, skipped: Int)?
    {
        try connection.transaction { connection in
            guard
                let row = try connection.query(
                    """
                    SELECT id FROM notifications
                    WHERE status = 'canceled' AND cancel_swept_at IS NULL
                    ORDER BY created_at LIMIT 1
                    FOR UPDATE SKIP LOCKED
                    """
                ).first
            else { return nil }
            let notificationID = try row.decode(UUID.self, "id")
            let skipped = try connection.query(
                """
                WITH doomed AS (
                    SELECT id FROM deliveries
                    WHERE notification_id = $1 AND (leased_by IS NULL OR run_at <= now())
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                ), gone AS (
                    DELETE FROM deliveries d USING doomed WHERE d.id = doomed.id
                    RETURNING d.app_id, d.notification_id, d.subscription_id, d.attempt
                ), events AS (
                    INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt)
                    SELECT app_id, notification_id, subscription_id, 'skipped', 'canceled', attempt FROM gone
                    RETURNING 1
                )
                SELECT count(*) AS n FROM events
                """, [notificationID, limit])[0].decode(Int.self, "n")
            if skipped < limit {
                _ = try connection.query(
                    "UPDATE notifications SET cancel_swept_at = now() WHERE id = $1", [notificationID])
            }
            return (notificationID, skipped)
        }
    }

    static func markFailed(_ connection: PostgresConnection, _ id: UUID, reason: String) throws {
        _ = try connection.query(
            "UPDATE notifications SET status = 'failed', status_reason = $2 WHERE id = $1", [id, reason])
    }

    /// A target as read: an audience of subscriptions, or a Live Activity broadcast channel.
    enum ReadTarget {
        case audience(AudienceSelection)
        case channel(LiveActivityChannelTarget)
    }

    /// What a picked row's target and scheduling members say, checked in Swift before any statement uses them.
    enum PickedCheck {
        /// The notification fails with this reason (`invalid_target: ...`, `invalid_message: ...`, `expired: ...`).
        case refused(String)
        /// The target is a Live Activity broadcast channel (``LiveActivityChannelTarget``): one send on it.
        case channelSend(LiveActivityChannelTarget)
        /// Its audience and delivery priority, and its local-time schedule when the message has a
        /// `delivery_time_of_day`.
        case accepted(AudienceSelection, priority: Int, localTime: LocalTimeSchedule?)
    }

    /// What the expansion statements need to schedule a notification's deliveries by local time
    /// (docs/local-time-delivery.md).
    struct LocalTimeSchedule: Equatable {
        /// `delivery_time_of_day` as PostgreSQL `time` text, `HH:MM:00`.
        var timeOfDay: String
        /// The message's `ttl`, or the default of 28 days: a delivery whose local time comes after
        /// `start + ttl` is made due at once and then skipped as `expired`.
        var ttl: Int
    }

    /// The audience of a row read with ``pickColumns`` (its target and `apns_push_type`, read as
    /// ``checkPicked(_:)`` reads them), or nil when it is refused: what a rescued page is read again with.
    static func audience(of row: PostgresRow) throws -> AudienceSelection? {
        guard case .success(.audience(var selection)) = try readTarget(row) else { return nil }
        let pushType = try row.decodeIfPresent(String.self, "apns_push_type").map {
            (try? JSONValue(parsing: $0)) ?? .string("(unreadable)")
        }
        guard let kind = try? APNsPushType.subscriptionKind(of: pushType) else { return nil }
        selection.subscriptionKind = kind
        return selection
    }

    /// The target of a row read with ``pickColumns`` (read only up to ``maximumTargetBytes``).
    private static func readTarget(_ row: PostgresRow) throws -> Result<ReadTarget, AudienceTargetError> {
        do {
            guard let text = try row.decodeIfPresent(String.self, "target") else {
                // Never read into memory: a producer's 200 MB target would otherwise cost the worker a gigabyte.
                throw AudienceTargetError("target is larger than \(maximumTargetBytes) bytes of JSON")
            }
            let json: JSONValue
            do {
                json = try JSONValue(parsing: text)
            } catch {
                // jsonb's text is always JSON (numbers of any size included: JSONValue keeps their text), but a
                // failure here must fail this notification, never this transaction forever.
                throw AudienceTargetError("target is JSON this worker cannot read")
            }
            if let channel = try LiveActivityChannelTarget(parsing: json) { return .success(.channel(channel)) }
            return .success(.audience(try AudienceSelection(parsing: json)))
        } catch let error as AudienceTargetError {
            return .failure(error)
        }
    }

    /// Validates a row read with ``pickColumns``: the target (read only up to ``maximumTargetBytes``), `ttl`,
    /// `priority` and `delivery_time_of_day` by the send pipeline's own rules, and the `ttl` not yet run out (computed in Swift: `start
    /// + ttl` must not overflow timestamptz). Delivery priority: 10 for `priority: "high"`, else 5, plus 1 for
    /// the id-list forms. The message's `apns_push_type` sets the selection's `subscriptions.kind`
    /// (``APNsPushType/subscriptionKind(of:)``; an unknown one is refused as `invalid_message`).
    /// - Throws: ``PostgresError`` when a column cannot be decoded.
    static func checkPicked(_ row: PostgresRow) throws -> PickedCheck {
        func member(_ column: String) throws -> JSONValue? {
            guard let text = try row.decodeIfPresent(String.self, column) else { return nil }
            return (try? JSONValue(parsing: text)) ?? .string("(unreadable)")
        }
        var selection: AudienceSelection
        switch try readTarget(row) {
        case .failure(let error): return .refused("invalid_target: \(error.message)")
        case .success(.channel(let channel)):
            // A broadcast carries a Live Activity push and nothing that is decided per device.
            let kind: String
            do {
                kind = try APNsPushType.subscriptionKind(of: member("apns_push_type"))
            } catch let error as MessageError {
                return .refused("invalid_message: \(error.field) \(error.message)")
            }
            guard kind == APNsPushType.liveActivity.rawValue else {
                return .refused("invalid_message: apns_push_type must be liveactivity for a live_activity_channel target")
            }
            if try member("delivery_time_of_day") != nil {
                return .refused("invalid_message: delivery_time_of_day does not apply to a live_activity_channel target")
            }
            return .channelSend(channel)
        case .success(.audience(let read)): selection = read
        }
        let scheduling: (ttl: Int?, priority: NotificationMessage.Priority?)
        let timeOfDay: LocalTime?
        do {
            scheduling = try NotificationMessage.scheduling(ttl: member("ttl"), priority: member("priority"))
            timeOfDay = try NotificationMessage.deliveryTimeOfDay(member("delivery_time_of_day"))
        } catch let error as MessageError {
            return .refused("invalid_message: \(error.field) \(error.message)")
        }
        // A push with an APNs push type reaches only the subscriptions holding its own kind of token.
        do {
            selection.subscriptionKind = try APNsPushType.subscriptionKind(of: member("apns_push_type"))
        } catch let error as MessageError {
            return .refused("invalid_message: \(error.field) \(error.message)")
        }
        if let ttl = scheduling.ttl, ttl > 0,
            try row.decode(Date.self, "start_at").addingTimeInterval(Double(ttl)) <= row.decode(Date.self, "now")
        {
            return .refused("expired: the message's ttl ran out before expansion finished")
        }
        let localTime = timeOfDay.map {
            LocalTimeSchedule(timeOfDay: $0.description, ttl: scheduling.ttl ?? Int(DeliveryDecision.defaultTTL))
        }
        return .accepted(
            selection, priority: (scheduling.priority == .high ? 10 : 5) + (selection.target.isListed ? 1 : 0),
            localTime: localTime)
    }

    /// `true` when no due notification waits for expansion, no slice is left that the slice pick would take
    /// (one of a due expanding notification, or one left by a notification canceled or failed while sliced,
    /// which the pick closes), and no canceled notification waits for its sweep: what an expand-only worker
    /// waits for.
    public static func isExpansionDrained(on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query(
            """
            SELECT NOT EXISTS (SELECT 1 FROM notifications
                               WHERE status IN ('pending', 'expanding')
                                 AND (send_after IS NULL OR send_after <= now()))
               AND NOT EXISTS (SELECT 1 FROM expansion_slices s
                               JOIN notifications ON notifications.id = s.notification_id
                               WHERE \(slicePickable))
               AND NOT EXISTS (SELECT 1 FROM notifications WHERE status = 'canceled' AND cancel_swept_at IS NULL)
                   AS drained
            """)
        return try rows.first?.decode(Bool.self, "drained") ?? false
    }
}
