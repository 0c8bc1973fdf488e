import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// The claim: due deliveries taken in short transactions (`FOR UPDATE SKIP LOCKED`) on a connection the caller owns,
/// rows that cannot be claimed or read set aside, the leases of claimed rows renewed, and the apps' claim turns
/// (`app_claim_turns`) read and repaired. No row lock is held once a function returns, so nothing is locked while a
/// provider request is in flight (README, "How it works").
///
/// The per-app send rate (docs/throttle.md) has no statements of its own: the claim statement takes each limited
/// app's permits from its token bucket (`app_send_buckets`) in the same statement that picks its rows.
public enum ClaimStore {
    /// Claims up to `limit` due deliveries, highest priority first, skipping rows other workers hold
    /// (`FOR UPDATE SKIP LOCKED`). The claim moves `run_at` to the lease's expiry (so a worker that dies loses
    /// its claims after `lease`), counts an attempt and bumps the fence, all in one statement.
    ///
    /// One row never stalls claiming. A claimed row that cannot be read into a ``ClaimedDelivery`` is set
    /// aside (deleted under its fence, with a `failed` event) and the others are returned. If the statement
    /// itself fails with a data error (SQLSTATE class 22 / 23; nothing was claimed, the statement is atomic),
    /// the due candidates are claimed again by id in halves until the rows that fail are single. Those are set
    /// aside only on evidence that the fault is theirs, not the statement's: another due row was claimed in
    /// the same call (from the candidates, or by a claim that excludes the failing rows). An error every row
    /// meets (say a broken trigger) is thrown to the caller and fails nothing; failing rows with no other due row
    /// stay until one is. `k` bad rows among `limit` cost at most about `2k·log2(limit) + 2` statements.
    /// - Throws: ``PostgresError`` other than a data error of some rows (connection problems, an error every
    ///   due row meets, or setting a row aside failed for another reason than a data error).
    /// - Parameter room: how many deliveries each app may take in this worker (``ClaimRoom``).
    /// - Parameter notifications: only the deliveries of these notifications, visiting only their apps; nil: every
    ///   due delivery.
    /// - Parameter lane: on a Citus-distributed queue, the lane claimed in (one router statement on its shard;
    ///   ``claimSQL(picking:limit:lane:)``): the rows come back with the lane set and their notification's and
    ///   user's columns still to be read (``fillLaneClaimedRows(_:on:)``, which ``claimLanes(on:lanes:limit:lease:workerID:room:)`` runs). Nil on a single node.
    public static func claim(
        on connection: PostgresConnection, limit: Int, lease: Duration, workerID: String,
        room: ClaimRoom = .unbounded, notifications: [UUID]? = nil, lane: Int32? = nil
    ) throws -> [ClaimedDelivery] {
        let parameters: [any PostgresEncodable] = [
            lease.inSeconds, workerID, room.full, room.limitedApps, room.limitedRooms,
        ]
        let laneParameter: [any PostgresEncodable] = lane.map { [$0] } ?? []
        if let notifications {
            // Not prepared per limit: the lists are short and their lengths vary.
            let sent = DatabaseClockReading.StatementTiming()
            return try decodeClaimed(
                try withoutJIT(on: connection) {
                    try $0.query(
                        claimSQL(picking: .ofNotifications, lane: lane != nil),
                        [limit] + parameters + [notifications] + laneParameter)
                },
                sent: sent, lane: lane, on: connection)
        }
        do {
            let sent = DatabaseClockReading.StatementTiming()
            return try decodeClaimed(
                // Prepared with the limit written into its text: planning took longer than running it, and after
                // five executions PostgreSQL may keep a prepared statement's generic plan, which with `LIMIT $1`
                // unknown ran ten times slower than the custom one on a queue of 2,000,000 rows (89-103 ms
                // against 8-11 ms). With the limit known the generic plan is the custom one.
                try withoutJIT(on: connection) {
                    try $0.preparedQuery(claimText(limit: limit, lane: lane != nil), parameters + laneParameter)
                },
                sent: sent, lane: lane, on: connection)
        } catch let error as PostgresError where error.isDataError {
            return try claimIsolatingBadRows(
                on: connection, limit: limit, parameters: parameters, lane: lane, error: error)
        }
    }

    /// The fallback of ``claim(on:limit:lease:workerID:room:)`` after a data error: the candidates (the
    /// due deliveries of the apps whose turn has come, read without locks, in claim order) are claimed by id, a
    /// failing set split in two until single rows remain. `parameters`: the claim's own (lease ... room).
    private static func claimIsolatingBadRows(
        on connection: PostgresConnection, limit: Int, parameters: [any PostgresEncodable], lane: Int32?,
        error: PostgresError
    ) throws -> [ClaimedDelivery] {
        let laneParameter: [any PostgresEncodable] = lane.map { [$0] } ?? []
        let inLane = lane == nil ? "" : " AND lane = $2::integer"
        let candidates = try connection.query(
            """
            SELECT d.id FROM app_claim_turns t
            CROSS JOIN LATERAL (
                SELECT id, priority, run_at FROM deliveries
                WHERE app_id = t.app_id\(inLane) AND run_at <= now()
                ORDER BY priority DESC, run_at LIMIT $1
            ) d
            WHERE t.turn_at <= now()\(inLane)
            ORDER BY d.priority DESC, d.run_at LIMIT $1
            """, [limit] + laneParameter
        ).map { try $0.decode(Int64.self, "id") }
        var claimed: [ClaimedDelivery] = []
        var failing: [(id: Int64, error: PostgresError)] = []
        func claimSet(_ ids: ArraySlice<Int64>) throws {
            guard !ids.isEmpty else { return }
            do {
                let sent = DatabaseClockReading.StatementTiming()
                claimed += try decodeClaimed(
                    try withoutJIT(on: connection) {
                        try $0.query(
                            claimSQL(picking: .listed, lane: lane != nil),
                            [ids.count] + parameters + [Array(ids)] + laneParameter)
                    },
                    sent: sent, lane: lane, on: connection)
            } catch let error as PostgresError where error.isDataError {
                guard ids.count > 1 else {
                    failing.append((ids[ids.startIndex], error))
                    return
                }
                let middle = ids.startIndex + ids.count / 2
                try claimSet(ids[..<middle])
                try claimSet(ids[middle...])
            }
        }
        try claimSet(candidates[...])
        guard !failing.isEmpty else { return claimed }
        if claimed.isEmpty {
            // Every candidate failed: is it these rows, or the statement? Claim around them to find out (an
            // error here too means every row meets it: nothing is set aside).
            let sent = DatabaseClockReading.StatementTiming()
            claimed = try decodeClaimed(
                try withoutJIT(on: connection) {
                    try $0.query(
                        claimSQL(picking: .unlisted, lane: lane != nil),
                        [limit] + parameters + [failing.map(\.id)] + laneParameter)
                },
                sent: sent, lane: lane, on: connection)
            // No other row is due: no evidence either way; they are tried again with the next claim.
            if claimed.isEmpty { return [] }
        }
        for row in failing {
            try setAsideIfPossible(on: connection, deliveryID: row.id, fence: nil, lane: lane, error: row.error)
        }
        return claimed
    }

    /// Runs one claim statement in a transaction of its own with `jit` off (`SET LOCAL`; a savepoint inside the
    /// caller's transaction, if any). The planner's cost of the claim grows with the queue, its per-app picks'
    /// `LIMIT` unknown at planning (estimated as a tenth of the app's due rows): on a queue of 10,000,000 it passed
    /// `jit_above_cost`, and compiling the statement's expressions took 0.7-0.9 s of every claim of 200 rows that
    /// ran in 20-40 ms without it (EXPLAIN ANALYZE, `JIT: ... Emission`). Nothing in a claim runs long enough to
    /// repay a compilation. A data error rolls the transaction back and is thrown as the statement's own.
    static func withoutJIT(
        on connection: PostgresConnection, _ statement: (PostgresConnection) throws -> PostgresQueryResult
    ) throws -> PostgresQueryResult {
        try connection.transaction(localSettings: ["jit": "off"], statement)
    }

    /// Reads claimed rows; a row that cannot be read is set aside under the fence it was just claimed with.
    /// Each row carries the claim's reading of PostgreSQL's clock (``ClaimedDelivery/databaseClock``): the
    /// statement's `now()` (the same on every row) with `sent`, read just before the statement was sent.
    /// With `pages`, the rows are a leased page's (``DeliverySource/page(_:)``), and one that cannot be read is
    /// set aside under the page's fence (``DeliveryPageStore/setAside(on:page:fence:subscriptionID:error:)``).
    /// With `lane` (a lane's claim on Citus) each row carries that lane.
    static func decodeClaimed(
        _ rows: PostgresQueryResult, sent: DatabaseClockReading.StatementTiming, pages: Bool = false, lane: Int32? = nil,
        on connection: PostgresConnection
    ) throws -> [ClaimedDelivery] {
        let received = ContinuousClock.now
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(rows.count)
        let columns = ClaimedColumns(rows)
        var repeats = ClaimedColumns.Repeats()
        let clock = try rows.first(where: { try columns.id.decodeIfPresent(Int64.self, $0) != nil }).map {
            DatabaseClockReading(databaseNow: try $0.decode(Date.self, "claimed_at"), sent: sent, receivedAt: received)
        }
        for row in rows {
            // A row of an insert's own figures, with no delivery (``LeasedRows``).
            if try columns.id.decodeIfPresent(Int64.self, row) == nil { continue }
            do {
                var delivery = try ClaimedDelivery(claimedRow: row, columns: columns, repeats: &repeats, pages: pages)
                delivery.databaseClock = clock
                if let lane { delivery.lane = lane }
                claimed.append(delivery)
            } catch let error as PostgresError {
                let id = try row.decode(Int64.self, "id")
                if pages {
                    try DeliveryPageStore.setAsideIfPossible(
                        on: connection, page: id, fence: try row.decode(Int64.self, "fence"),
                        subscriptionID: try row.decode(UUID.self, "subscription_id"), error: error)
                    continue
                }
                try setAsideIfPossible(
                    on: connection, deliveryID: id, fence: try row.decode(Int64.self, "fence"), lane: lane, error: error)
            }
        }
        return claimed
    }

    /// ``setAside(on:deliveryID:fence:lane:error:)``, tolerating a data error of its own (say a trigger refuses the
    /// delete): the row then stays, costing the next claims their bisection (or its lease), never a stall.
    private static func setAsideIfPossible(
        on connection: PostgresConnection, deliveryID: Int64, fence: Int64?, lane: Int32? = nil, error: PostgresError
    ) throws {
        do {
            try setAside(on: connection, deliveryID: deliveryID, fence: fence, lane: lane, error: error)
        } catch let failure as PostgresError where failure.isDataError {
            return
        }
    }

    /// Deletes one delivery that cannot be claimed or read and appends its `failed` event, in one statement:
    /// reason `data_exception` / `integrity_constraint_violation` (the SQLSTATE's class) or `unreadable_row`
    /// (a column Swift could not decode), `detail.error` naming the SQLSTATE and PostgreSQL's message. With a
    /// `fence` (the row was claimed) only under that fence; without one only while no lease is live. With `lane`
    /// (Citus) one router statement on the lane's shard, the event in the same lane.
    static func setAside(
        on connection: PostgresConnection, deliveryID: Int64, fence: Int64?, lane: Int32? = nil, error: PostgresError
    ) throws {
        let (reason, detail) = setAsideReason(error)
        let (inLane, laneColumn, laneValue) = lane == nil ? ("", "", "") : (" AND lane = $5::integer", ", lane", ", lane")
        _ = try connection.query(
            """
            WITH gone AS (
                DELETE FROM deliveries
                WHERE id = $1\(inLane) AND (CASE WHEN $2::bigint IS NULL THEN run_at <= now() ELSE fence = $2::bigint END)
                RETURNING app_id, notification_id, subscription_id, attempt\(laneValue)
            )
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail\(laneColumn))
            SELECT app_id, notification_id, subscription_id, 'failed', $3, attempt, $4::jsonb\(laneValue) FROM gone
            """, [deliveryID, fence, reason, detail.jsonText] + (lane.map { [$0] } ?? []))
    }

    /// The `failed` event's reason and detail of a delivery set aside for `error`: `data_exception` /
    /// `integrity_constraint_violation` (the SQLSTATE's class) or `unreadable_row` (a column Swift could not
    /// decode), `detail.error` naming the SQLSTATE and PostgreSQL's message (never the column's text).
    static func setAsideReason(_ error: PostgresError) -> (reason: String, detail: JSONValue) {
        if error.isDataError {
            let text = error.dataErrorReason
            return (String(text.prefix { $0 != ":" }), ["error": .string(text), "sqlstate": .string(error.sqlState ?? "")])
        }
        // Not the message: it quotes the column's text.
        return (
            DeliveryReason.unreadableRow.rawValue,
            ["error": .string("a column of the claimed row could not be read (\(error.code))")]
        )
    }

    /// How many rows a claim asks for when `free` of a worker's slots are open and it claims `batch` at a time:
    /// `batch` itself, or the largest multiple of an eighth of it that fits (`free` itself below an eighth).
    /// A worker claims once at least half a batch is free, so its claims use at most five statement texts
    /// (``claim(on:limit:lease:workerID:)`` prepares one per limit).
    public static func claimLimit(free: Int, batch: Int) -> Int {
        if free >= batch { return batch }
        let step = max(1, batch / 8)
        return free >= step ? free / step * step : max(free, 0)
    }

    /// The claim statement for `limit` rows (``claimSQL(picking:limit:lane:)``), built once per limit and form.
    private static func claimText(limit: Int, lane: Bool) -> String {
        // A lane's claim under the negative keys.
        let key = lane ? -limit - 1 : limit
        if let text = claimTexts.withLock({ $0[key] }) { return text }
        let text = claimSQL(picking: .due, limit: limit, lane: lane)
        // A handful of limits in practice (``claimLimit(free:batch:)``); bounded anyway.
        claimTexts.withLock { texts in
            if texts.count >= 64 { texts.removeAll() }
            texts[key] = text
        }
        return text
    }

    private static let claimTexts = Mutex<[Int: String]>([:])

    /// Which rows the claim statement picks.
    enum ClaimPicking {
        /// The due rows in claim order.
        case due
        /// Those of the due rows whose id is in the ids parameter (`bigint[]`); only their apps are visited.
        case listed
        /// The due rows whose id is not in the ids parameter (`bigint[]`).
        case unlisted
        /// The due rows of the notifications in the ids parameter (`uuid[]`); only their apps are visited.
        case ofNotifications
    }

    /// `expression AS name`, or NULL (`''` with `orEmpty`, for columns read as non-optional) when its text is
    /// longer than the column's bound in ``ClaimedColumnBounds``: an oversized value is never shipped to the
    /// worker (the claim's `oversized_columns` names it, and the delivery fails `oversized_column`).
    static func bounded(_ expression: String, as name: String, orEmpty: Bool = false) -> String {
        guard let bound = ClaimedColumnBounds.all.first(where: { $0.expression == expression }) else {
            preconditionFailure("no bound declared for \(expression)")
        }
        return "CASE WHEN octet_length(\(expression)) <= \(bound.maximumBytes) THEN \(expression)"
            + (orEmpty ? " ELSE ''" : "") + " END AS \(name)"
    }

    /// The claim statement: apps take turns (migration 0026, docs/fairness.md). It visits the apps whose turn
    /// has come (`app_claim_turns.turn_at <= now()`), oldest turn first, at most as many as the limit, and gives
    /// each a share of the limit in proportion to `apps.claim_weight`, no more than its room in this worker
    /// (``ClaimRoom``) and, for an app with `apps.max_sends_per_second`, the permits taken from its token bucket
    /// (`app_send_buckets`, refilled from `clock_timestamp()`; a bucket another claim holds is skipped, `SKIP
    /// LOCKED`, and that app waits for the next claim). Each app's share is picked in the app's own claim order
    /// (`priority DESC, run_at`) through `deliveries_claim_app`, `FOR UPDATE SKIP LOCKED`. What apps with fewer
    /// due deliveries than their share left is shared again among the apps that filled theirs. Then each visited
    /// app's turn moves: to the claim's `now()` (the back of the line) when it filled its share, to the next
    /// `run_at` of its deliveries (or the lease's end of those just claimed) when its due deliveries ran out, and
    /// no earlier than its bucket's next permit. A turn row another transaction holds is left as it is (it stays
    /// due; that transaction is adding or rescheduling deliveries of the app), and one changed since this
    /// statement's snapshot keeps the earlier of the two times. docs/throttle.md for the buckets. An app or the
    /// fleet paused by an operator (``ClaimPauses``) is not visited: its turn stays as it is, its rows wait.
    ///
    /// Parameters: without `limit`, `$1` the limit, `$2` lease seconds, `$3` the worker id, `$4` the apps with no
    /// room (`uuid[]`), `$5`/`$6` apps with less room than the limit and their room (`uuid[]`, `integer[]`)
    /// and, for the pickings other than `.due`, `$7` the ids; with `limit` (written into the text) each of those
    /// one lower (`$1` lease seconds ... `$6` the ids).
    ///
    /// With `lane` (a Citus-distributed queue, ``QueueTopology/lanes(_:)``; docs/scale-out.md, "The hot
    /// statements") the claim of one lane, one more parameter after the others (`integer`): `lane = $n` on every
    /// distributed table it reads or writes, so that Citus runs it whole as one router task on the lane's shard.
    /// Three parts differ: `pushizo_next_run_at`, which reads `deliveries` and so fails inside a router query, is
    /// written into the statement; the apps with a send rate are left out (their token buckets are distributed by
    /// app, on another shard: docs/scale-out.md, Limits); and the notifications and users, distributed by id, are
    /// not read (placeholders in their columns: ``laneClaimedRowsLookup``).
    static func claimSQL(picking: ClaimPicking, limit: Int? = nil, lane: Bool = false) -> String {
        let notPaused = ClaimPauses.turnsCondition
        let shift = limit == nil ? 0 : 1
        let limitText = limit.map { "\(max($0, 0))" } ?? "$1"
        func parameter(_ number: Int) -> String { "$\(number - shift)" }
        let lease = parameter(2)
        let worker = parameter(3)
        let noRoom = parameter(4)
        let roomApps = parameter(5)
        let rooms = parameter(6)
        let ids = parameter(7)
        let laneParameter = picking == .due ? parameter(7) : parameter(8)
        // `lane = $n` for every distributed table the lane's claim names (nothing on a single node).
        let inLane = lane ? " AND lane = \(laneParameter)::integer" : ""
        func laneOf(_ alias: String) -> String { lane ? " AND \(alias).lane = \(laneParameter)::integer" : "" }
        let listed: String
        let visited: String
        switch picking {
        case .due:
            (listed, visited) = ("", "")
        case .listed:
            listed = " AND id = ANY(\(ids)::bigint[])"
            visited = " AND app_id IN (SELECT app_id FROM deliveries WHERE id = ANY(\(ids)::bigint[])\(inLane))"
        case .unlisted:
            (listed, visited) = (" AND id <> ALL(\(ids)::bigint[])", "")
        case .ofNotifications:
            listed = " AND notification_id = ANY(\(ids)::uuid[])"
            // On Citus the notifications are on other shards: their apps are read from the lane's deliveries.
            visited = lane
                ? " AND app_id IN (SELECT app_id FROM deliveries WHERE notification_id = ANY(\(ids)::uuid[])\(inLane))"
                : " AND app_id IN (SELECT app_id FROM notifications WHERE id = ANY(\(ids)::uuid[]))"
        }
        // Apps with a send rate, whose buckets a lane's router statement cannot lock: not visited on Citus.
        let unlimited = lane ? "\n                    AND app_id NOT IN (SELECT id FROM apps WHERE max_sends_per_second IS NOT NULL)" : ""
        let buckets = lane
            ? "SELECT v.app_id, now() AS at, now() AS refilled_at, 0::float8 AS available FROM visit v WHERE false"
            : """
            SELECT b.app_id, c.at, b.refilled_at,
                       pushizo_bucket_permits(v.rate, b.tokens, b.refilled_at, c.at) AS available
                FROM visit v
                JOIN app_send_buckets b ON b.app_id = v.app_id
                CROSS JOIN (SELECT clock_timestamp() AS at) c
                WHERE v.rate IS NOT NULL
                FOR UPDATE OF b SKIP LOCKED
            """
        let taken = lane
            ? ""
            : """
            , taken AS (
                -- Permits of rows not taken (fewer due than permits) stay in the bucket.
                UPDATE app_send_buckets s
                SET tokens = b.available - u.used, refilled_at = b.at
                FROM buckets b
                JOIN (SELECT app_id, count(*) AS used FROM picked GROUP BY app_id) u ON u.app_id = b.app_id
                WHERE s.app_id = b.app_id
            )
            """
        let nextRun = lane
            ? laneNextRunAt(app: "c.app_id", except: "coalesce(m.taken, f.taken, '{}')", lane: laneParameter)
            : "SELECT pushizo_next_run_at(c.app_id, coalesce(m.taken, f.taken, '{}')) AS next_run_at"
        return """
        WITH visit AS MATERIALIZED (
            -- The apps whose turn has come, oldest turn first (app_claim_turns_due), those without room left out.
            SELECT t.app_id, t.xmin::text AS seen, a.max_sends_per_second AS rate, a.claim_weight AS weight,
                   least(\(limitText), coalesce(r.room, \(limitText))) AS room,
                   row_number() OVER (ORDER BY t.turn_at, t.app_id) AS turn
            FROM (SELECT app_id, turn_at, xmin FROM app_claim_turns
                  WHERE turn_at <= now()\(inLane) AND app_id <> ALL(\(noRoom)::uuid[])\(visited)
                    \(notPaused)\(unlimited)
                  ORDER BY turn_at LIMIT \(limitText)) t
            JOIN apps a ON a.id = t.app_id
            LEFT JOIN unnest(\(roomApps)::uuid[], \(rooms)::integer[]) AS r(app_id, room) ON r.app_id = t.app_id
        ), buckets AS MATERIALIZED (
            \(buckets)
        ), caps AS MATERIALIZED (
            -- What each app may take at most: its room, and a limited app's whole permits (none while another
            -- claim holds its bucket).
            SELECT v.app_id, v.turn, v.weight, v.seen, v.rate,
                   CASE WHEN v.rate IS NULL THEN v.room
                        ELSE least(v.room, coalesce(floor(b.available), 0))::integer END AS cap
            FROM visit v LEFT JOIN buckets b ON b.app_id = v.app_id
        ), first_shares AS MATERIALIZED (
            -- The limit in proportion to weight: each app's whole part, then one more to each of the first apps in
            -- turn order until the limit is reached; no more than its cap.
            SELECT app_id, turn, weight, cap,
                   least(cap, base + CASE WHEN row_number() OVER (ORDER BY turn) <= \(limitText) - sum(base) OVER ()
                                          THEN 1 ELSE 0 END)::integer AS share
            FROM (SELECT *, floor(\(limitText)::numeric * weight / sum(weight) OVER ())::integer AS base
                  FROM caps WHERE cap > 0) c
        ), first_pick AS MATERIALIZED (
            SELECT d.id, d.app_id, d.leased_by
            FROM first_shares s
            CROSS JOIN LATERAL (
                SELECT id, app_id, leased_by FROM deliveries
                WHERE app_id = s.app_id\(inLane) AND run_at <= now()\(listed)
                ORDER BY priority DESC, run_at
                LIMIT s.share
                FOR UPDATE SKIP LOCKED
            ) d
            WHERE s.share > 0
        ), first_counts AS MATERIALIZED (
            SELECT s.app_id, s.turn, s.weight, s.cap, s.share, count(p.id)::integer AS got,
                   coalesce(array_agg(p.id) FILTER (WHERE p.id IS NOT NULL), '{}') AS taken
            FROM first_shares s LEFT JOIN first_pick p ON p.app_id = s.app_id
            GROUP BY s.app_id, s.turn, s.weight, s.cap, s.share
        ), second_shares AS MATERIALIZED (
            -- What the first pick left of the limit, shared the same way among the apps that filled their share
            -- and may take more.
            SELECT app_id, taken,
                   least(cap - got, base + CASE WHEN row_number() OVER (ORDER BY turn) <= room - sum(base) OVER ()
                                                THEN 1 ELSE 0 END)::integer AS more
            FROM (SELECT *, floor(room::numeric * weight / sum(weight) OVER ())::integer AS base
                  FROM first_counts
                  CROSS JOIN (SELECT \(limitText) - count(*) AS room FROM first_pick) r
                  WHERE got = share AND cap > got AND r.room > 0) c
        ), second_pick AS MATERIALIZED (
            SELECT d.id, d.app_id, d.leased_by
            FROM second_shares s
            CROSS JOIN LATERAL (
                SELECT id, app_id, leased_by FROM deliveries
                WHERE app_id = s.app_id\(inLane) AND run_at <= now() AND id <> ALL(s.taken)\(listed)
                ORDER BY priority DESC, run_at
                LIMIT s.more
                FOR UPDATE SKIP LOCKED
            ) d
            WHERE s.more > 0
        ), picked AS MATERIALIZED (
            -- leased_by as the row lock found it: set on a due row only when its lease ran out (a completion that
            -- reschedules clears it), so the claim rescues that worker's delivery.
            SELECT id, app_id, leased_by FROM first_pick UNION ALL SELECT id, app_id, leased_by FROM second_pick
        )\(taken), claimed AS (
            -- The picked rows by primary key (an array, so no join plan can read the whole queue instead).
            UPDATE deliveries d
            SET run_at = now() + make_interval(secs => \(lease)::float8),
                attempt = d.attempt + 1,
                fence = d.fence + 1,
                leased_by = \(worker)
            FROM picked p
            WHERE d.id = ANY (ARRAY(SELECT id FROM picked)) AND p.id = d.id\(laneOf("d"))
            RETURNING d.id, d.fence, d.attempt, d.notification_id, d.subscription_id, d.app_id, d.apns_id,
                      d.uncounted_retries,
                      d.local_due_at, p.leased_by AS rescued_from
        ), settled AS MATERIALIZED (
            -- Each visited app's next turn (apps whose bucket another claim held are left as they are).
            SELECT c.app_id, c.seen,
                   greatest(
                       CASE WHEN c.cap = 0 THEN now()
                            WHEN f.got + coalesce(m.got, 0) >= f.share + coalesce(m.more, 0) THEN now()
                            ELSE coalesce(least(nx.next_run_at,
                                                CASE WHEN f.got + coalesce(m.got, 0) > 0
                                                     THEN now() + make_interval(secs => \(lease)::float8) END),
                                          'infinity')
                       END,
                       -- A limited app whose bucket holds less than a permit after this claim: not before the next.
                       CASE WHEN b.app_id IS NOT NULL
                                 AND b.available - (coalesce(f.got, 0) + coalesce(m.got, 0)) < 1 THEN
                            greatest(b.at, b.refilled_at) + make_interval(secs => least(86400,
                                (1 - (b.available::numeric - (coalesce(f.got, 0) + coalesce(m.got, 0)))) / c.rate::numeric)::float8)
                       END) AS next_at
            FROM caps c
            LEFT JOIN buckets b ON b.app_id = c.app_id
            LEFT JOIN first_counts f ON f.app_id = c.app_id
            LEFT JOIN (SELECT s.app_id, s.more, count(p.id)::integer AS got,
                              s.taken || coalesce(array_agg(p.id) FILTER (WHERE p.id IS NOT NULL), '{}') AS taken
                       FROM second_shares s LEFT JOIN second_pick p ON p.app_id = s.app_id
                       GROUP BY s.app_id, s.more, s.taken) m ON m.app_id = c.app_id
            -- The next run of an app whose due deliveries ran out (those just claimed left out): one probe per
            -- distinct priority, however many deliveries wait for later (migration 0026).
            LEFT JOIN LATERAL (
                \(nextRun)
            ) nx ON f.app_id IS NOT NULL AND f.got + coalesce(m.got, 0) < f.share + coalesce(m.more, 0)
            -- Not an app whose bucket another claim held, nor one whose share of this claim was nothing (more
            -- apps were visited than the limit has deliveries for their weights): neither was served.
            WHERE (c.rate IS NULL OR b.app_id IS NOT NULL) AND (c.cap = 0 OR f.share > 0)
        ), turned AS (
            UPDATE app_claim_turns t
            SET turn_at = CASE WHEN l.xmin::text = s.seen THEN s.next_at ELSE least(t.turn_at, s.next_at) END
            FROM (SELECT app_id, xmin FROM app_claim_turns
                  WHERE app_id = ANY (ARRAY(SELECT app_id FROM settled))\(inLane)
                  ORDER BY app_id FOR UPDATE SKIP LOCKED) l
            JOIN settled s ON s.app_id = l.app_id
            WHERE t.app_id = l.app_id\(laneOf("t"))
        ),
        \(lane ? laneClaimedRowsTail(lane: laneParameter) : claimedRowsTail)
        """
    }

    /// `pushizo_next_run_at(app, except)` written into a statement on one lane (Citus: the function reads
    /// `deliveries`, which fails inside a router query): the earliest `run_at` of `app`'s deliveries in the lane
    /// whose id is not in `except` (`bigint[]`), by one probe per distinct priority (a loose index scan, as
    /// migration 0026's function does), as a `SELECT` of one column `next_run_at`; `app`, `except` and `lane` are
    /// SQL expressions (`lane` a parameter).
    static func laneNextRunAt(app: String, except: String, lane: String) -> String {
        let inLane = " AND lane = \(lane)::integer"
        return """
            SELECT min(n.run_at) AS next_run_at FROM (
                    WITH RECURSIVE p AS (
                        SELECT (SELECT max(priority) FROM deliveries WHERE app_id = \(app)\(inLane)) AS priority
                        UNION ALL
                        SELECT (SELECT max(priority) FROM deliveries
                                WHERE app_id = \(app)\(inLane) AND priority < p.priority)
                        FROM p WHERE p.priority IS NOT NULL
                    )
                    SELECT priority FROM p WHERE priority IS NOT NULL
                ) p
                CROSS JOIN LATERAL (
                    SELECT run_at FROM deliveries
                    WHERE app_id = \(app)\(inLane) AND priority = p.priority AND id <> ALL(\(except))
                    ORDER BY run_at LIMIT 1) n
            """
    }

    /// The end of every statement that hands leased rows to the worker, after its `claimed` CTE (the leased rows'
    /// `id, fence, attempt, notification_id, subscription_id, app_id, apns_id, uncounted_retries, local_due_at,
    /// rescued_from`):
    /// their apps' settings and channels, notifications, subscriptions and users joined in, in the row shape
    /// ``ClaimedColumns`` reads, with the statement's `now()` as `claimed_at`. The claim's
    /// (``claimSQL(picking:limit:lane:)``) and an expansion chunk's insert of rows leased to its worker (``AudienceQuery``).
    static let claimedRowsTail = """
        \(claimedRowsSources)
        \(claimedRowsSelect)
        """

    /// The CTEs of ``claimedRowsTail`` (after the `claimed` CTE, before its `SELECT`): the claimed rows' apps,
    /// channels and notifications, each read once per statement.
    static let claimedRowsSources = """
        \(claimedAppsAndChannels),
        -- Each claimed notification looked up once by primary key (OFFSET 0 keeps the lookup from becoming a
        -- join planned from stale statistics), not once per claimed row: a broadcast's claim of 1,000 rows
        -- reads its notification once instead of 1,000 times. The rows then join it by hash (as auto_explain
        -- shows for broadcasts and one-device claims alike); whatever the plan, both sides hold at most a batch.
        claimed_notifications AS MATERIALIZED (
            SELECT n.id, n.xmin::text AS message_version, n.campaign_id, n.status,
                   coalesce(n.send_after, n.created_at) AS start_at
            FROM (SELECT DISTINCT notification_id FROM claimed) k
            CROSS JOIN LATERAL (
                SELECT id, xmin, campaign_id, status, send_after, created_at FROM notifications
                WHERE id = k.notification_id OFFSET 0
            ) n
        )
        """

    /// The CTEs `claimed_apps` and `claimed_channels` of ``claimedRowsSources``: reference tables on Citus, read
    /// in a lane's router claim too (``laneClaimedRowsTail(lane:)``).
    private static let claimedAppsAndChannels = """
        -- The claimed apps' settings and channels, their jsonb written as text once per app and claim: read per
        -- row, each document was written out up to three times per claimed delivery (for its bound, its value
        -- and the oversized check), and jsonb output was a seventh of PostgreSQL's CPU in a broadcast drain.
        claimed_apps AS MATERIALIZED (
            SELECT a.id, a.default_language, a.default_timezone, a.signing_key,
                   a.quiet_hours_start::text AS quiet_hours_start, a.quiet_hours_end::text AS quiet_hours_end,
                   a.frequency_caps::text AS frequency_caps
            FROM apps a WHERE a.id IN (SELECT app_id FROM claimed)
        ), claimed_channels AS MATERIALIZED (
            SELECT ch.app_id, ch.provider, ch.settings::text AS settings, ch.endpoint, ch.paused_until
            FROM app_channels ch WHERE ch.app_id IN (SELECT app_id FROM claimed)
        )
        """

    /// ``claimedRowsTail`` in a lane's router claim on Citus (``claimSQL(picking:limit:lane:)``), `lane` its
    /// parameter: the subscription read in the lane (colocated with the queue), the apps and channels (reference
    /// tables) as on a single node; the notification's columns (`message_version`, `campaign_id`,
    /// `notification_status`, `notification_start`) and `user_tags` are placeholders, since `notifications` and
    /// `users` are distributed by id on other shards. ``fillLaneClaimedRows(_:on:)`` reads them for a round's rows.
    static func laneClaimedRowsTail(lane: String) -> String {
        """
        \(claimedAppsAndChannels)
        \(claimedRowsColumns)
        FROM claimed c
        CROSS JOIN (SELECT ''::text AS message_version, NULL::text AS campaign_id, ''::text AS status,
                           now() AS start_at) n
        LEFT JOIN LATERAL (SELECT * FROM subscriptions WHERE id = c.subscription_id AND lane = \(lane)::integer OFFSET 0) s
            ON true
        JOIN claimed_apps a ON a.id = c.app_id
        CROSS JOIN (SELECT NULL::text AS tags) u
        LEFT JOIN claimed_channels ch ON ch.app_id = c.app_id AND ch.provider = CASE s.platform
            WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' END
        """
    }

    /// The `SELECT` of ``claimedRowsTail``: one row per `claimed` row in the row shape ``ClaimedColumns`` reads.
    static let claimedRowsSelect = """
        \(claimedRowsColumns)
        FROM claimed c
        -- The subscription of each claimed row is looked up by primary key, one probe per row (OFFSET 0 keeps
        -- the planner from turning the lookup into a join): a claim reads at most a batch of rows, but a join
        -- planned from stale or small statistics hashed the whole subscriptions table on every claim (12 of a
        -- claim's 19 ms with 20,000 subscriptions, growing with the table).
        JOIN claimed_notifications n ON n.id = c.notification_id
        -- LEFT: a delivery inserted while its subscription was deleted (no foreign key since migration 0008)
        -- is claimed as status 'deleted' and skipped, rather than leased again forever.
        LEFT JOIN LATERAL (SELECT * FROM subscriptions WHERE id = c.subscription_id OFFSET 0) s ON true
        JOIN claimed_apps a ON a.id = c.app_id
        -- OFFSET 0 keeps the subquery from being pulled up, so the tags are written as text once per row.
        LEFT JOIN LATERAL (SELECT tags::text AS tags FROM users WHERE id = s.user_id OFFSET 0) u ON true
        LEFT JOIN claimed_channels ch ON ch.app_id = c.app_id AND ch.provider = CASE s.platform
            WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' WHEN 'huawei' THEN 'huawei' END
        """

    /// The select list of the claim's row shape, over `c` (the `claimed` row), `n` (its notification: `message_version`,
    /// `campaign_id`, `status`, `start_at`), `s` (its subscription), `u` (`tags` as text), `a` (its app) and `ch` (its
    /// channel for the subscription's platform).
    private static let claimedRowsColumns = """
        SELECT c.id, c.fence, c.attempt, c.notification_id, c.subscription_id, c.app_id, c.apns_id,
               n.message_version, \(bounded("n.campaign_id", as: "campaign_id")),
               n.status AS notification_status,
               n.start_at AS notification_start,
               \(bounded("s.platform", as: "platform", orEmpty: true)), \(bounded("s.token", as: "token", orEmpty: true)),
               s.apns_environment, \(bounded("s.language", as: "language")), \(bounded("s.timezone", as: "timezone")),
               \(bounded("s.country", as: "country")),
               coalesce(s.status, 'deleted') AS subscription_status,
               coalesce(s.token_updated_at, '-infinity') AS token_updated_at,
               CASE WHEN octet_length(u.tags) <= \(ClaimedColumnBounds.maximumUserTagsBytes) THEN u.tags END AS user_tags,
               s.user_id,
               \(bounded("s.web_p256dh", as: "web_p256dh")), \(bounded("s.web_auth", as: "web_auth")),
               \(bounded("a.default_language", as: "default_language")),
               \(bounded("a.default_timezone", as: "default_timezone")), a.signing_key,
               a.quiet_hours_start, a.quiet_hours_end,
               \(bounded("a.frequency_caps", as: "frequency_caps")),
               ch.provider AS channel_provider, \(bounded("ch.settings", as: "channel_settings")),
               \(bounded("ch.endpoint", as: "channel_endpoint")), ch.paused_until AS channel_paused_until,
               c.uncounted_retries,
               c.local_due_at, c.rescued_from,
               now() AS claimed_at,
               concat_ws(',', \(ClaimedColumnBounds.all.map { "CASE WHEN octet_length(\($0.expression)) > \($0.maximumBytes) THEN '\($0.column)' END" }.joined(separator: ", "))) AS oversized_columns
        """

    /// The columns of `subscriptions` a leased page's `claimed` rows carry from the page's own read
    /// (``pageRowsTail``), beside `subscription_id` and `app_id`.
    static let pageSubscriptionColumns = [
        "user_id", "platform", "token", "apns_environment", "web_p256dh", "web_auth", "language", "timezone", "country",
        "token_updated_at",
    ]

    /// The end of a leased page's statement (``AudienceQuery`` with `leasePage`), after its `claimed` CTE: the rows
    /// in the claim's row shape (``claimedRowsSelect``'s columns), named `leased`. Every row is of one notification
    /// (`$1`) and one app (`$2`), and each carries its subscription's ``pageSubscriptionColumns`` from the page's
    /// read (the page holds active subscriptions only). So the subscription is not looked up a second time, and
    /// the notification's, app's and channels' columns are read once for the statement and handed to each row as
    /// an InitPlan's value, not joined to each row (a join per row, a second lookup of each subscription and a
    /// `timestamptz` written out per row were a third of the page's CPU; docs/performance.md, "Pages leased at
    /// expansion").
    static let pageRowsTail = """
        page_notification AS MATERIALIZED (
            SELECT n.xmin::text AS message_version, n.campaign_id, n.status,
                   -- As text once, rather than a timestamptz written out on every row (the same ISO text).
                   coalesce(n.send_after, n.created_at)::text AS start_at
            FROM notifications n WHERE n.id = $1
        ), page_app AS MATERIALIZED (
            SELECT a.default_language, a.default_timezone, a.signing_key,
                   a.quiet_hours_start::text AS quiet_hours_start, a.quiet_hours_end::text AS quiet_hours_end,
                   a.frequency_caps::text AS frequency_caps
            FROM apps a WHERE a.id = $2
        ), page_channels AS MATERIALIZED (
            SELECT ch.provider, ch.settings::text AS settings, ch.endpoint, ch.paused_until
            FROM app_channels ch WHERE ch.app_id = $2
        ),
        leased AS (
        \(claimedRowsColumns)
        FROM claimed c
        CROSS JOIN LATERAL (SELECT \(pageSubscriptionColumns.map { "c.\($0)" }.joined(separator: ", ")), 'active'::text AS status) s
        -- Uncorrelated subqueries: each an InitPlan, run once for the statement.
        CROSS JOIN (SELECT \(["message_version", "campaign_id", "status", "start_at"].map { "(SELECT \($0) FROM page_notification) AS \($0)" }.joined(separator: ", "))) n
        CROSS JOIN (SELECT \(["default_language", "default_timezone", "signing_key", "quiet_hours_start", "quiet_hours_end", "frequency_caps"].map { "(SELECT \($0) FROM page_app) AS \($0)" }.joined(separator: ", "))) a
        -- The user's tags only for a subscription that has a user.
        CROSS JOIN LATERAL (SELECT CASE WHEN s.user_id IS NOT NULL THEN (SELECT tags::text FROM users WHERE id = s.user_id) END AS tags) u
        -- The channel of the row's platform: one InitPlan per provider, run when a row first needs it.
        CROSS JOIN LATERAL (SELECT \(["provider", "settings", "endpoint", "paused_until"].map { column in
            "CASE s.platform " + [("ios", "apns"), ("android", "fcm"), ("web", "webpush"), ("huawei", "huawei")].map {
                "WHEN '\($0.0)' THEN (SELECT \(column) FROM page_channels WHERE provider = '\($0.1)')"
            }.joined(separator: " ") + " END AS \(column)"
        }.joined(separator: ", "))) ch
        )
        """

    /// Reads the rows an expansion chunk leased to this worker as it inserted them (docs/performance.md,
    /// "Deliveries leased at insert"), in the claim's row shape as its insert returned them, once its transaction
    /// has committed: each carries the notification's version as the chunk left it and the insert's reading of
    /// PostgreSQL's clock. A row that cannot be read is set aside under its fence (1), as a claimed one is.
    /// - Throws: ``PostgresError`` when setting a row aside fails for another reason than a data error; the rows
    ///   then stay leased until their lease runs out, when any worker claims them.
    public static func leasedRows(_ leased: LeasedRows, on connection: PostgresConnection) throws -> [ClaimedDelivery] {
        guard let rows = leased.rows else { return [] }
        var deliveries = try decodeClaimed(rows, sent: leased.sent, pages: leased.pages, on: connection)
        for index in deliveries.indices {
            if let version = leased.messageVersions[deliveries[index].notificationID] {
                deliveries[index].messageVersion = version
            }
        }
        return deliveries
    }

    /// Extends this worker's claims whose completions wait to be written: `run_at` (the lease's end) moves to
    /// `now() + lease` for each delivery whose fence still matches, so no other worker claims (and
    /// sends again) a delivery whose push was already answered.
    /// - Returns: the ids whose lease was renewed (a missing id was claimed again by another worker, or its
    ///   row is gone).
    /// - Parameter lane: on a Citus-distributed queue, the lane of every one of `deliveryIDs` (one router
    ///   statement on its shard); nil on a single node.
    public static func renewLeases(
        on connection: PostgresConnection, deliveryIDs: [Int64], fences: [Int64], lease: Duration, lane: Int32? = nil
    ) throws -> Set<Int64> {
        guard !deliveryIDs.isEmpty else { return [] }
        let rows = try connection.query(
            """
            UPDATE deliveries d SET run_at = now() + make_interval(secs => $3::float8)
            FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
            WHERE d.id = i.id AND d.fence = i.fence\(lane == nil ? "" : " AND d.lane = $4::integer")
            RETURNING d.id
            """, [deliveryIDs, fences, lease.inSeconds] + (lane.map { [$0] } ?? []))
        return Set(try rows.map { try $0.decode(Int64.self, "id") })
    }

    /// Seconds until the next claim turn that lies ahead (`app_claim_turns.turn_at`, the earliest after `now()`
    /// that is not `'infinity'`): when a delivery of some app falls due, or a limited app's bucket holds its next
    /// permit (docs/fairness.md, docs/throttle.md). `nil` when no turn lies ahead. What a worker whose claim
    /// came back short waits at most before claiming again, so a retry, a deferred push or a limited app is
    /// served when it is due rather than a poll interval later; at most a day (86,400 s), to the microsecond.
    /// One index probe (`app_claim_turns_due`); no row is locked or written.
    public static func nextTurnWait(on connection: PostgresConnection) throws -> Double? {
        try nextTurn(on: connection).wait
    }

    /// ``nextTurnWait(on:)`` with the statement's reading of PostgreSQL's clock: a worker whose claims come
    /// back empty still measures its clock's offset (docs/clocks.md).
    public static func nextTurn(on connection: PostgresConnection) throws -> (wait: Double?, clock: DatabaseClockReading) {
        let turn = try turns(on: connection, noRoom: [])
        return (turn.wait, turn.clock)
    }

    /// What the claim loop asks before a claim it may skip, and after a claim that came back short: whether the
    /// claim would visit any app (`due`: a turn at or before `now()` of an app neither in `noRoom` nor paused, nor
    /// the fleet paused, exactly the claim's own visit; ``claimSQL(picking:limit:lane:)``), and when the next turn
    /// ahead comes (``nextTurnWait(on:)``), with the statement's reading of PostgreSQL's clock. A claim that would
    /// visit no app takes nothing and writes nothing, so it is skipped: an empty claim costs PostgreSQL 0.4-0.9 ms
    /// (a statement of twenty CTEs, planned afresh on each connection's first executions), this one index probe
    /// of `app_claim_turns_due` about 50 µs. No row is locked or written.
    /// - Parameter noRoom: apps that have no room in this worker (``ClaimRoom/full``), which the claim leaves out.
    static func turns(on connection: PostgresConnection, noRoom: [UUID]) throws
        -> (due: Bool, wait: Double?, clock: DatabaseClockReading)
    {
        let sent = DatabaseClockReading.StatementTiming()
        let rows = try connection.preparedQuery(
            """
            SELECT now() AS now,
                   EXISTS (SELECT FROM app_claim_turns
                           WHERE turn_at <= now() AND app_id <> ALL($1::uuid[])
                           \(ClaimPauses.turnsCondition)) AS due,
                   (SELECT round(least(extract(epoch FROM turn_at - now()), 86400), 6)::float8
                    FROM app_claim_turns
                    WHERE turn_at > now() AND turn_at < 'infinity' ORDER BY turn_at LIMIT 1) AS wait
            """, [noRoom])
        let received = ContinuousClock.now
        let row = rows[0]
        return (
            try row.decode(Bool.self, "due"), try row.decodeIfPresent(Double.self, "wait"),
            DatabaseClockReading(databaseNow: try row.decode(Date.self, "now"), sent: sent, receivedAt: received)
        )
    }

    /// Brings forward the claim turns that writers other than the worker left too late
    /// (`pushizo_claim_turns_repair()`, migration 0026): an operator's `UPDATE deliveries SET run_at = now()`
    /// makes deliveries due without moving their app's turn. Run by every worker every
    /// ``turnRepairInterval``; one probe per distinct priority of each app whose turn lies ahead.
    /// - Returns: how many turns moved.
    public static func repairClaimTurns(on connection: PostgresConnection) throws -> Int {
        try connection.query("SELECT pushizo_claim_turns_repair() AS moved")[0].decode(Int.self, "moved")
    }

    /// How often each worker runs ``repairClaimTurns(on:)``: the longest an operator's change of `run_at` waits
    /// for its turn.
    public static let turnRepairInterval = Duration.seconds(5)
}
