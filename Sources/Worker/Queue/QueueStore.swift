import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// The queue's SQL, each operation one short transaction on a connection the caller owns. No row lock is held
/// once a function returns, so nothing is locked while a provider request is in flight (README, "How it works").
public enum QueueStore {
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
    /// meets (say a broken trigger) is thrown as before and fails nothing; failing rows with no other due row
    /// stay until one is. `k` bad rows among `limit` cost at most about `2k·log2(limit) + 2` statements.
    /// - Throws: ``PostgresError`` other than a data error of some rows (connection problems, an error every
    ///   due row meets, or setting a row aside failed for another reason than a data error).
    /// - Parameter room: how many deliveries each app may take in this worker (``ClaimRoom``).
    /// - Parameter notifications: only the deliveries of these notifications (those a small notifications' pass
    ///   just created), visiting only their apps; nil: every due delivery.
    public static func claim(
        on connection: PostgresConnection, limit: Int, lease: Duration, workerID: String,
        room: ClaimRoom = .unbounded, notifications: [UUID]? = nil
    ) throws -> [ClaimedDelivery] {
        let parameters: [any PostgresEncodable] = [
            lease.inSeconds, workerID, room.full, room.limitedApps, room.limitedRooms,
        ]
        if let notifications {
            // Not prepared per limit: the lists are short and their lengths vary.
            let sent = DatabaseClockReading.StatementTiming()
            return try decodeClaimed(
                try connection.query(claimSQL(picking: .ofNotifications), [limit] + parameters + [notifications]),
                sent: sent, on: connection)
        }
        do {
            let sent = DatabaseClockReading.StatementTiming()
            return try decodeClaimed(
                // Prepared with the limit written into its text: planning took longer than running it, and after
                // five executions PostgreSQL may keep a prepared statement's generic plan, which with `LIMIT $1`
                // unknown ran ten times slower than the custom one on a queue of 2,000,000 rows (89-103 ms
                // against 8-11 ms). With the limit known the generic plan is the custom one.
                try connection.preparedQuery(claimText(limit: limit), parameters), sent: sent, on: connection)
        } catch let error as PostgresError where error.isDataError {
            return try claimIsolatingBadRows(
                on: connection, limit: limit, parameters: parameters, error: error)
        }
    }

    /// The fallback of ``claim(on:limit:lease:workerID:room:)`` after a data error: the candidates (the
    /// due deliveries of the apps whose turn has come, read without locks, in claim order) are claimed by id, a
    /// failing set split in two until single rows remain. `parameters`: the claim's own (lease ... room).
    private static func claimIsolatingBadRows(
        on connection: PostgresConnection, limit: Int, parameters: [any PostgresEncodable], error: PostgresError
    ) throws -> [ClaimedDelivery] {
        let candidates = try connection.query(
            """
            SELECT d.id FROM app_claim_turns t
            CROSS JOIN LATERAL (
                SELECT id, priority, run_at FROM deliveries
                WHERE app_id = t.app_id AND run_at <= now()
                ORDER BY priority DESC, run_at LIMIT $1
            ) d
            WHERE t.turn_at <= now()
            ORDER BY d.priority DESC, d.run_at LIMIT $1
            """, [limit]
        ).map { try $0.decode(Int64.self, "id") }
        var claimed: [ClaimedDelivery] = []
        var failing: [(id: Int64, error: PostgresError)] = []
        func claimSet(_ ids: ArraySlice<Int64>) throws {
            guard !ids.isEmpty else { return }
            do {
                let sent = DatabaseClockReading.StatementTiming()
                claimed += try decodeClaimed(
                    try connection.query(claimSQL(picking: .listed), [ids.count] + parameters + [Array(ids)]),
                    sent: sent, on: connection)
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
                try connection.query(claimSQL(picking: .unlisted), [limit] + parameters + [failing.map(\.id)]),
                sent: sent, on: connection)
            // No other row is due: no evidence either way; they are tried again with the next claim.
            if claimed.isEmpty { return [] }
        }
        for row in failing {
            try setAsideIfPossible(on: connection, deliveryID: row.id, fence: nil, error: row.error)
        }
        return claimed
    }

    /// Reads claimed rows; a row that cannot be read is set aside under the fence it was just claimed with.
    /// Each row carries the claim's reading of PostgreSQL's clock (``ClaimedDelivery/databaseClock``): the
    /// statement's `now()` (the same on every row) with `sent`, read just before the statement was sent.
    private static func decodeClaimed(
        _ rows: PostgresQueryResult, sent: DatabaseClockReading.StatementTiming, on connection: PostgresConnection
    ) throws -> [ClaimedDelivery] {
        let received = ContinuousClock.now
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(rows.count)
        let columns = ClaimedColumns(rows)
        var repeats = ClaimedColumns.Repeats()
        let clock = try rows.first.map {
            DatabaseClockReading(databaseNow: try $0.decode(Date.self, "claimed_at"), sent: sent, receivedAt: received)
        }
        for row in rows {
            do {
                var delivery = try ClaimedDelivery(claimedRow: row, columns: columns, repeats: &repeats)
                delivery.databaseClock = clock
                claimed.append(delivery)
            } catch let error as PostgresError {
                let id = try row.decode(Int64.self, "id")
                try setAsideIfPossible(
                    on: connection, deliveryID: id, fence: try row.decode(Int64.self, "fence"), error: error)
            }
        }
        return claimed
    }

    /// ``setAside(on:deliveryID:fence:error:)``, tolerating a data error of its own (say a trigger refuses the
    /// delete): the row then stays, costing the next claims their bisection (or its lease), never a stall.
    private static func setAsideIfPossible(
        on connection: PostgresConnection, deliveryID: Int64, fence: Int64?, error: PostgresError
    ) throws {
        do {
            try setAside(on: connection, deliveryID: deliveryID, fence: fence, error: error)
        } catch let failure as PostgresError where failure.isDataError {
            return
        }
    }

    /// Deletes one delivery that cannot be claimed or read and appends its `failed` event, in one statement:
    /// reason `data_exception` / `integrity_constraint_violation` (the SQLSTATE's class) or `unreadable_row`
    /// (a column Swift could not decode), `detail.error` naming the SQLSTATE and PostgreSQL's message. With a
    /// `fence` (the row was claimed) only under that fence; without one only while no lease is live.
    static func setAside(on connection: PostgresConnection, deliveryID: Int64, fence: Int64?, error: PostgresError)
        throws
    {
        let reason: String
        let detail: JSONValue
        if error.isDataError {
            let text = dataErrorReason(error)
            reason = String(text.prefix { $0 != ":" })
            detail = ["error": .string(text), "sqlstate": .string(error.sqlState ?? "")]
        } else {
            reason = DeliveryReason.unreadableRow.rawValue
            // Not the message: it quotes the column's text.
            detail = ["error": .string("a column of the claimed row could not be read (\(error.code))")]
        }
        _ = try connection.query(
            """
            WITH gone AS (
                DELETE FROM deliveries
                WHERE id = $1 AND (CASE WHEN $2::bigint IS NULL THEN run_at <= now() ELSE fence = $2::bigint END)
                RETURNING app_id, notification_id, subscription_id, attempt
            )
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
            SELECT app_id, notification_id, subscription_id, 'failed', $3, attempt, $4::jsonb FROM gone
            """, [deliveryID, fence, reason, detail.jsonText])
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

    /// The claim statement for `limit` rows (``claimSQL(picking:limit:)``), built once per limit.
    private static func claimText(limit: Int) -> String {
        if let text = claimTexts.withLock({ $0[limit] }) { return text }
        let text = claimSQL(picking: .due, limit: limit)
        // A handful of limits in practice (``claimLimit(free:batch:)``); bounded anyway.
        claimTexts.withLock { texts in
            if texts.count >= 64 { texts.removeAll() }
            texts[limit] = text
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
    private static func bounded(_ expression: String, as name: String, orEmpty: Bool = false) -> String {
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
    /// statement's snapshot keeps the earlier of the two times. docs/throttle.md for the buckets.
    ///
    /// Parameters: without `limit`, `$1` the limit, `$2` lease seconds, `$3` the worker id, `$4` the apps with no
    /// room (`uuid[]`), `$5`/`$6` apps with less room than the limit and their room (`uuid[]`, `integer[]`)
    /// and, for the pickings other than `.due`, `$7` the ids; with `limit` (written into the text) each of those
    /// one lower (`$1` lease seconds ... `$6` the ids).
    static func claimSQL(picking: ClaimPicking, limit: Int? = nil) -> String {
        let shift = limit == nil ? 0 : 1
        let limitText = limit.map { "\(max($0, 0))" } ?? "$1"
        func parameter(_ number: Int) -> String { "$\(number - shift)" }
        let lease = parameter(2)
        let worker = parameter(3)
        let noRoom = parameter(4)
        let roomApps = parameter(5)
        let rooms = parameter(6)
        let ids = parameter(7)
        let listed: String
        let visited: String
        switch picking {
        case .due:
            (listed, visited) = ("", "")
        case .listed:
            listed = " AND id = ANY(\(ids)::bigint[])"
            visited = " AND app_id IN (SELECT app_id FROM deliveries WHERE id = ANY(\(ids)::bigint[]))"
        case .unlisted:
            (listed, visited) = (" AND id <> ALL(\(ids)::bigint[])", "")
        case .ofNotifications:
            listed = " AND notification_id = ANY(\(ids)::uuid[])"
            visited = " AND app_id IN (SELECT app_id FROM notifications WHERE id = ANY(\(ids)::uuid[]))"
        }
        return """
        WITH visit AS MATERIALIZED (
            -- The apps whose turn has come, oldest turn first (app_claim_turns_due), those without room left out.
            SELECT t.app_id, t.xmin::text AS seen, a.max_sends_per_second AS rate, a.claim_weight AS weight,
                   least(\(limitText), coalesce(r.room, \(limitText))) AS room,
                   row_number() OVER (ORDER BY t.turn_at, t.app_id) AS turn
            FROM (SELECT app_id, turn_at, xmin FROM app_claim_turns
                  WHERE turn_at <= now() AND app_id <> ALL(\(noRoom)::uuid[])\(visited)
                  ORDER BY turn_at LIMIT \(limitText)) t
            JOIN apps a ON a.id = t.app_id
            LEFT JOIN unnest(\(roomApps)::uuid[], \(rooms)::integer[]) AS r(app_id, room) ON r.app_id = t.app_id
        ), buckets AS MATERIALIZED (
            SELECT b.app_id, c.at, b.refilled_at,
                   pushizo_bucket_permits(v.rate, b.tokens, b.refilled_at, c.at) AS available
            FROM visit v
            JOIN app_send_buckets b ON b.app_id = v.app_id
            CROSS JOIN (SELECT clock_timestamp() AS at) c
            WHERE v.rate IS NOT NULL
            FOR UPDATE OF b SKIP LOCKED
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
            SELECT d.id, d.app_id
            FROM first_shares s
            CROSS JOIN LATERAL (
                SELECT id, app_id FROM deliveries
                WHERE app_id = s.app_id AND run_at <= now()\(listed)
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
            SELECT d.id, d.app_id
            FROM second_shares s
            CROSS JOIN LATERAL (
                SELECT id, app_id FROM deliveries
                WHERE app_id = s.app_id AND run_at <= now() AND id <> ALL(s.taken)\(listed)
                ORDER BY priority DESC, run_at
                LIMIT s.more
                FOR UPDATE SKIP LOCKED
            ) d
            WHERE s.more > 0
        ), picked AS MATERIALIZED (
            SELECT id, app_id FROM first_pick UNION ALL SELECT id, app_id FROM second_pick
        ), taken AS (
            -- Permits of rows not taken (fewer due than permits) stay in the bucket.
            UPDATE app_send_buckets s
            SET tokens = b.available - u.used, refilled_at = b.at
            FROM buckets b
            JOIN (SELECT app_id, count(*) AS used FROM picked GROUP BY app_id) u ON u.app_id = b.app_id
            WHERE s.app_id = b.app_id
        ), claimed AS (
            -- The picked rows by primary key (an array, so no join plan can read the whole queue instead).
            UPDATE deliveries d
            SET run_at = now() + make_interval(secs => \(lease)::float8),
                attempt = d.attempt + 1,
                fence = d.fence + 1,
                leased_by = \(worker)
            WHERE d.id = ANY (ARRAY(SELECT id FROM picked))
            RETURNING d.id, d.fence, d.attempt, d.notification_id, d.subscription_id, d.app_id, d.apns_id,
                      d.uncounted_retries,
                      d.local_due_at
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
                SELECT pushizo_next_run_at(c.app_id, coalesce(m.taken, f.taken, '{}')) AS next_run_at
            ) nx ON f.app_id IS NOT NULL AND f.got + coalesce(m.got, 0) < f.share + coalesce(m.more, 0)
            -- Not an app whose bucket another claim held, nor one whose share of this claim was nothing (more
            -- apps were visited than the limit has deliveries for their weights): neither was served.
            WHERE (c.rate IS NULL OR b.app_id IS NOT NULL) AND (c.cap = 0 OR f.share > 0)
        ), turned AS (
            UPDATE app_claim_turns t
            SET turn_at = CASE WHEN l.xmin::text = s.seen THEN s.next_at ELSE least(t.turn_at, s.next_at) END
            FROM (SELECT app_id, xmin FROM app_claim_turns
                  WHERE app_id = ANY (ARRAY(SELECT app_id FROM settled))
                  ORDER BY app_id FOR UPDATE SKIP LOCKED) l
            JOIN settled s ON s.app_id = l.app_id
            WHERE t.app_id = l.app_id
        ),
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
        ),
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
        SELECT c.id, c.fence, c.attempt, c.notification_id, c.subscription_id, c.app_id, c.apns_id,
               n.message_version, \(bounded("n.campaign_id", as: "campaign_id")),
               n.status AS notification_status,
               n.start_at AS notification_start,
               \(bounded("s.platform", as: "platform", orEmpty: true)), \(bounded("s.token", as: "token", orEmpty: true)),
               s.apns_environment, \(bounded("s.language", as: "language")), \(bounded("s.timezone", as: "timezone")),
               \(bounded("s.country", as: "country")),
               coalesce(s.status, 'deleted') AS subscription_status,
               coalesce(s.token_updated_at, '-infinity') AS token_updated_at,
               CASE WHEN octet_length(u.tags) <= \(DeliveryRendering.maximumUserTagsBytes) THEN u.tags END AS user_tags,
               s.user_id,
               \(bounded("s.web_p256dh", as: "web_p256dh")), \(bounded("s.web_auth", as: "web_auth")),
               \(bounded("a.default_language", as: "default_language")),
               \(bounded("a.default_timezone", as: "default_timezone")), a.signing_key,
               a.quiet_hours_start, a.quiet_hours_end,
               \(bounded("a.frequency_caps", as: "frequency_caps")),
               ch.provider AS channel_provider, \(bounded("ch.settings", as: "channel_settings")),
               \(bounded("ch.endpoint", as: "channel_endpoint")), ch.paused_until AS channel_paused_until,
               c.uncounted_retries,
               c.local_due_at,
               now() AS claimed_at,
               concat_ws(',', \(ClaimedColumnBounds.all.map { "CASE WHEN octet_length(\($0.expression)) > \($0.maximumBytes) THEN '\($0.column)' END" }.joined(separator: ", "))) AS oversized_columns
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
            WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' END
        """
    }

    /// Writes a batch of completions atomically: terminal rows are deleted from the queue, the others
    /// rescheduled, and one `delivery_events` row is appended for each delivery whose fence still matches and
    /// whose completion writes one (``DeliveryCompletion/writesEvent``: a retry that spent no attempt past the
    /// first few writes none). Retries that spent no attempt are counted
    /// (``DeliveryCompletion/countsUncountedRetry``), and each rescheduled delivery's app gets its claim turn no
    /// later than the delivery's next run. Completions whose fence no longer matches (the lease expired and
    /// another worker claimed the delivery) change nothing. Subscription invalidations and channel pauses are
    /// applied in the same transaction, and so are frequency-cap releases (``DeliveryCompletion/capRelease``) of
    /// completions that took effect. A batch that needs none of those is the one statement ``completeSQL``, run
    /// without a transaction block (a statement is atomic on its own; `BEGIN` and `COMMIT` would be two more
    /// round trips).
    /// - Returns: how many completions took effect (the rest lost their lease).
    @discardableResult
    public static func complete(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
        // A completion that neither ends its delivery nor writes an event changes nothing.
        let completions = completions.filter { $0.writesEvent || $0.nextRunAt != nil }
        guard !completions.isEmpty else { return 0 }
        if !needsFollowUpStatements(completions) { return try writeCompletions(on: connection, completions) }
        return try connection.transaction { try writeCompletions(on: $0, completions) }
    }

    /// Whether writing `completions` takes more than ``completeSQL``: an invalidation, a channel pause or a
    /// frequency-cap release.
    static func needsFollowUpStatements(_ completions: [DeliveryCompletion]) -> Bool {
        completions.contains { $0.invalidation != nil || $0.channelPause != nil || $0.capRelease != nil }
    }

    /// The statements of ``complete(on:_:)``, in the caller's transaction when they are more than one.
    static func writeCompletions(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
        guard !completions.isEmpty else { return 0 }
        let result = try connection.preparedQuery(
            completeSQL,
            // In binary format, each typed as `completeSQL` casts it: neither side writes or parses an
            // array literal and its elements' text (timestamps and uuids above all) for every delivery.
            [
                PostgresBinaryArray.bigint(completions.map(\.deliveryID)),
                PostgresBinaryArray.bigint(completions.map(\.fence)),
                PostgresBinaryArray.text(completions.map(\.event.rawValue)),
                PostgresBinaryArray.text(completions.map(\.reason?.rawValue)),
                PostgresBinaryArray.text(completions.map(\.detailJSON)),
                PostgresBinaryArray.timestamptz(completions.map(\.nextRunAt)),
                PostgresBinaryArray.text(completions.map { $0.nextRunAt == nil ? nil : $0.reason?.rawValue }),
                PostgresBinaryArray.boolean(completions.map(\.refundsAttempt)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.appID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.notificationID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.subscriptionID)),
                PostgresBinaryArray.integer(completions.map(\.claimedAs?.attempt)),
                PostgresBinaryArray.boolean(completions.map(\.writesEvent)),
                PostgresBinaryArray.boolean(completions.map { $0.countsUncountedRetry && $0.nextRunAt != nil }),
            ])
        let applied = try result.first?.decode(Int.self, "applied") ?? 0
        let invalidations = completions.compactMap(\.invalidation)
        if !invalidations.isEmpty {
            _ = try connection.query(
                """
                UPDATE subscriptions s
                SET status = 'invalid', invalid_reason = i.reason
                FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS i(id, reason, token_seen)
                WHERE s.id = i.id AND s.status = 'active' AND s.token_updated_at <= i.token_seen
                """,
                [
                    invalidations.map(\.subscriptionID),
                    invalidations.map(\.reason.rawValue),
                    invalidations.map(\.tokenUpdatedAt),
                ])
        }
        for pause in completions.compactMap(\.channelPause) {
            _ = try connection.query(
                """
                UPDATE app_channels
                SET paused_until = greatest(coalesce(paused_until, now()), $3), paused_reason = $4,
                    updated_at = now()
                WHERE app_id = $1 AND provider = $2
                """,
                [pause.appID, pause.provider.rawValue, pause.until, pause.reason.rawValue])
        }
        // Last: a transaction waiting for a key's advisory lock may hold row locks, but one holding such a
        // lock then waits only for other such locks (taken in hash order), so no cycle can form.
        let releases = completions.compactMap(\.capRelease)
        if !releases.isEmpty {
            try releaseFrequencyCapGrants(on: connection, releases)
        }
        return applied
    }

    static let completeSQL = """
        WITH input AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                                 $6::timestamptz[], $7::text[], $8::bool[],
                                 $9::uuid[], $10::uuid[], $11::uuid[], $12::integer[], $13::bool[], $14::bool[])
                AS i(id, fence, event, reason, detail, next_run_at, last_error, refund,
                     app_id, notification_id, subscription_id, attempt, writes_event, uncounted)
        ), terminal AS (
            DELETE FROM deliveries d USING input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail,
                      i.writes_event
        ), rescheduled AS (
            UPDATE deliveries d
            SET run_at = i.next_run_at, leased_by = NULL, last_error = i.last_error,
                attempt = d.attempt - CASE WHEN i.refund THEN 1 ELSE 0 END,
                uncounted_retries = d.uncounted_retries + CASE WHEN i.uncounted THEN 1 ELSE 0 END
            FROM input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NOT NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail,
                      i.writes_event, d.run_at
        ), turns AS (
            -- A rescheduled delivery's app has its turn no later than the delivery's next run (claims visit apps
            -- by turn). Each row is written even when its time stays, so that a claim that computed a later turn
            -- without seeing this reschedule keeps the earlier one (docs/fairness.md); in app order, as the
            -- deliveries insert trigger takes them.
            INSERT INTO app_claim_turns (app_id, turn_at)
            SELECT app_id, min(run_at) FROM rescheduled GROUP BY app_id ORDER BY app_id
            ON CONFLICT (app_id) DO UPDATE SET turn_at = least(app_claim_turns.turn_at, excluded.turn_at)
        ), missing AS MATERIALIZED (
            -- Only completions that settled nothing (usually none) are looked up: is their queue row gone?
            SELECT i.id, i.app_id, i.notification_id, i.subscription_id, i.attempt, i.event, i.reason, i.detail,
                   i.writes_event
            FROM input i
            WHERE i.notification_id IS NOT NULL
              AND i.id NOT IN (SELECT id FROM terminal UNION ALL SELECT id FROM rescheduled)
              AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = i.id)
        ), vanished AS (
            -- The row is gone because its subscription or notification (or their app) was deleted while the
            -- push was in flight (ON DELETE CASCADE): the outcome is still written. A row another worker
            -- completed is gone too, but its parents exist (or that worker wrote the final event): ignored.
            SELECT m.* FROM missing m
            WHERE (NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = m.notification_id)
                   OR NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = m.subscription_id))
              AND NOT EXISTS (SELECT 1 FROM delivery_events e
                              WHERE e.notification_id = m.notification_id AND e.subscription_id = m.subscription_id
                                AND e.event IN ('sent', 'failed', 'skipped'))
        ), settled AS (
            -- Each settled row carries its input's event, so no join back to the input is planned (a prepared
            -- plan that guesses a few rows may make it a nested loop: 83,000 comparisons for 289 rows, seen).
            SELECT id, app_id, notification_id, subscription_id, attempt, event, reason, detail, writes_event,
                   false AS deleted FROM terminal
            UNION ALL SELECT id, app_id, notification_id, subscription_id, attempt, event, reason, detail, writes_event,
                             false FROM rescheduled
            UNION ALL SELECT *, true FROM vanished
        ), written AS (
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
            -- jsonb refuses the escape \\u0000 that JSON allows (a NUL from a provider's answer): never fail on it.
            SELECT s.app_id, s.notification_id, s.subscription_id, s.event, s.reason, s.attempt,
                   coalesce(replace(s.detail, '\\u0000', '\\ufffd')::jsonb, '{}'::jsonb)
                       || CASE WHEN s.deleted THEN '{"delivery_deleted": true}'::jsonb ELSE '{}'::jsonb END
            FROM settled s
            WHERE s.writes_event
        )
        -- The completions that took effect: their queue row changed, or their event was written for a row gone.
        SELECT count(*) AS applied FROM settled WHERE writes_event OR NOT deleted
        """

    /// A notification's message as stored: its row version, its size in bytes of JSON text, and the text
    /// itself unless it is larger than the limit asked for.
    public struct StoredMessage: Sendable {
        public var version: String
        public var byteCount: Int
        public var json: String?
    }

    /// Reads the messages of `notificationIDs` in one round trip; documents over `maximumBytes` of JSON text
    /// are measured but not transferred.
    public static func messages(
        on connection: PostgresConnection, notificationIDs: [UUID], maximumBytes: Int
    ) throws -> [UUID: StoredMessage] {
        // Planned on every call, not prepared: a prepared statement's generic plan is made from the statistics of
        // the moment, and one made while `notifications` was nearly empty can be a sequential scan, kept until an
        // autoanalyze, as the deliveries insert trigger's was (migration 0020). In the same stalls of make bench's
        // transactional section this read took 53 ms a claimed batch instead of 2-3.
        let rows = try connection.query(
            """
            SELECT id, xmin::text AS version, octet_length(text) AS size,
                   CASE WHEN octet_length(text) <= $2 THEN text END AS message
            FROM (SELECT id, xmin, message::text AS text
                  FROM notifications WHERE id = ANY($1::uuid[])
                  -- Not pulled up, so each document is written as text once (not once for its size and again).
                  OFFSET 0) AS n
            """, [notificationIDs, maximumBytes])
        var result: [UUID: StoredMessage] = [:]
        for row in rows {
            result[try row.decode(UUID.self, "id")] = StoredMessage(
                version: try row.decode(String.self, "version"), byteCount: try row.decode(Int.self, "size"),
                json: try row.decodeIfPresent(String.self, "message"))
        }
        return result
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

    /// `true` when nothing is left to do now: no due notification waits for expansion and the deliveries
    /// queue is empty (deliveries waiting for a retry count as work). Used by `PUSHIZO_EXIT_WHEN_DRAINED`.
    public static func isDrained(on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query(
            """
            SELECT NOT EXISTS (SELECT 1 FROM deliveries)
               AND NOT EXISTS (SELECT 1 FROM notifications
                               WHERE status IN ('pending', 'expanding')
                                 AND (send_after IS NULL OR send_after <= now())) AS drained
            """)
        return try rows.first?.decode(Bool.self, "drained") ?? false
    }

}

extension ClaimedDelivery {
    /// Reads one row of the claim statement, its columns found through `columns` (looked up once per result).
    /// - Throws: ``PostgresError`` (`decodingFailed`) when a column is missing or cannot be read.
    /// - Parameter repeats: the last values of the columns that repeat down a claim (one app's settings on each
    ///   of its deliveries), shared with the result's other rows so they are read once.
    init(claimedRow row: PostgresRow, columns c: ClaimedColumns, repeats r: inout ClaimedColumns.Repeats) throws {
        self.init(
            id: try c.id.decode(Int64.self, row),
            fence: try c.fence.decode(Int64.self, row),
            attempt: try c.attempt.decode(Int.self, row),
            notificationID: try c.notificationID.decode(UUID.self, row, repeating: &r.notificationID),
            subscriptionID: try c.subscriptionID.decode(UUID.self, row),
            appID: try c.appID.decode(UUID.self, row, repeating: &r.appID),
            apnsID: try c.apnsID.decode(UUID.self, row),
            messageVersion: try c.messageVersion.decode(String.self, row, repeating: &r.messageVersion),
            campaignID: try c.campaignID.decodeIfPresent(String.self, row, repeating: &r.campaignID),
            notificationStatus: try c.notificationStatus.decode(String.self, row, repeating: &r.notificationStatus),
            notificationStart: try c.notificationStart.decode(Date.self, row, repeating: &r.notificationStart),
            platform: try c.platform.decode(String.self, row),
            token: try c.token.decode(String.self, row),
            apnsEnvironment: try c.apnsEnvironment.decodeIfPresent(String.self, row),
            language: try c.language.decodeIfPresent(String.self, row),
            timezone: try c.timezone.decodeIfPresent(String.self, row),
            country: try c.country.decodeIfPresent(String.self, row),
            subscriptionStatus: try c.subscriptionStatus.decode(String.self, row),
            tokenUpdatedAt: try c.tokenUpdatedAt.decode(Date.self, row),
            userTagsJSON: try c.userTags.decodeIfPresent(String.self, row),
            userID: try c.userID.decodeIfPresent(UUID.self, row),
            webP256DH: try c.webP256DH.decodeIfPresent(String.self, row),
            webAuth: try c.webAuth.decodeIfPresent(String.self, row),
            defaultLanguage: try c.defaultLanguage.decodeIfPresent(String.self, row),
            defaultTimezone: try c.defaultTimezone.decodeIfPresent(String.self, row, repeating: &r.defaultTimezone),
            quietHoursStart: try c.quietHoursStart.decodeIfPresent(String.self, row),
            quietHoursEnd: try c.quietHoursEnd.decodeIfPresent(String.self, row),
            signingKey: try c.signingKey.decode([UInt8].self, row, repeating: &r.signingKey),
            frequencyCapsJSON: try c.frequencyCaps.decodeIfPresent(String.self, row, repeating: &r.frequencyCaps),
            channelProvider: try c.channelProvider.decodeIfPresent(String.self, row),
            channelSettingsJSON: try c.channelSettings.decodeIfPresent(String.self, row, repeating: &r.channelSettings),
            channelEndpoint: try c.channelEndpoint.decodeIfPresent(String.self, row, repeating: &r.channelEndpoint),
            channelPausedUntil: try c.channelPausedUntil.decodeIfPresent(Date.self, row),
            uncountedRetries: try c.uncountedRetries.decodeIfPresent(Int.self, row) ?? 0)
        localDueAt = try c.localDueAt.decodeIfPresent(Date.self, row)
        oversizedColumns = (try c.oversizedColumns.decodeIfPresent(String.self, row) ?? "")
            .split(separator: ",").map(String.init)
    }
}

/// The claim statement's columns, each looked up by name once per result instead of once per row and column.
/// A class: as a struct of 36 names, each row's decoding copied it, retaining and releasing every name.
final class ClaimedColumns {
    /// One column: its name and its index in the result (nil when the result has no such column, which each
    /// row's decoding then reports as the name-based lookup does).
    struct Column {
        let name: String
        let index: Int?

        func decode<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow) throws -> T {
            guard let index else { return try row.decode(type, name) }
            return try row.decode(type, at: index)
        }

        func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow) throws -> T? {
            guard let index else { return try row.decodeIfPresent(type, name) }
            return try row.decodeIfPresent(type, at: index)
        }

        func decode<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow, repeating last: inout PostgresRepeatedValue<T>) throws -> T {
            guard let value = try decodeIfPresent(type, row, repeating: &last) else { return try decode(type, row) }
            return value
        }

        func decodeIfPresent<T: PostgresDecodable>(
            _ type: T.Type, _ row: PostgresRow, repeating last: inout PostgresRepeatedValue<T>
        ) throws -> T? {
            guard let index else { return try row.decodeIfPresent(type, name) }
            return try row.decodeIfPresent(type, at: index, repeating: &last)
        }
    }

    /// The last value of each column that repeats down a claim: the app's and notification's, the same on
    /// each of their deliveries (a broadcast's rows come in runs of one notification), and costly to read again
    /// on every row: long text (a copy per row is an allocation) or parsed values (UUIDs, timestamps). A row's
    /// bytes are compared with the last ones (one memcmp) instead.
    struct Repeats {
        var notificationID = PostgresRepeatedValue<UUID>()
        var appID = PostgresRepeatedValue<UUID>()
        var notificationStatus = PostgresRepeatedValue<String>()
        var notificationStart = PostgresRepeatedValue<Date>()
        var messageVersion = PostgresRepeatedValue<String>()
        var campaignID = PostgresRepeatedValue<String>()
        var defaultTimezone = PostgresRepeatedValue<String>()
        var signingKey = PostgresRepeatedValue<[UInt8]>()
        var frequencyCaps = PostgresRepeatedValue<String>()
        var channelSettings = PostgresRepeatedValue<String>()
        var channelEndpoint = PostgresRepeatedValue<String>()
    }

    let id, fence, attempt, notificationID, subscriptionID, appID, apnsID, messageVersion, campaignID,
        notificationStatus, notificationStart, platform, token, apnsEnvironment, language, timezone, country,
        subscriptionStatus, tokenUpdatedAt, userTags, userID, webP256DH, webAuth, defaultLanguage,
        defaultTimezone, quietHoursStart, quietHoursEnd, signingKey, frequencyCaps, channelProvider,
        channelSettings, channelEndpoint, channelPausedUntil, uncountedRetries, localDueAt,
        oversizedColumns: Column

    init(_ result: PostgresQueryResult) {
        func column(_ name: String) -> Column { Column(name: name, index: result.columnIndex(name)) }
        id = column("id")
        fence = column("fence")
        attempt = column("attempt")
        notificationID = column("notification_id")
        subscriptionID = column("subscription_id")
        appID = column("app_id")
        apnsID = column("apns_id")
        messageVersion = column("message_version")
        campaignID = column("campaign_id")
        notificationStatus = column("notification_status")
        notificationStart = column("notification_start")
        platform = column("platform")
        token = column("token")
        apnsEnvironment = column("apns_environment")
        language = column("language")
        timezone = column("timezone")
        country = column("country")
        subscriptionStatus = column("subscription_status")
        tokenUpdatedAt = column("token_updated_at")
        userTags = column("user_tags")
        userID = column("user_id")
        webP256DH = column("web_p256dh")
        webAuth = column("web_auth")
        defaultLanguage = column("default_language")
        defaultTimezone = column("default_timezone")
        quietHoursStart = column("quiet_hours_start")
        quietHoursEnd = column("quiet_hours_end")
        signingKey = column("signing_key")
        frequencyCaps = column("frequency_caps")
        channelProvider = column("channel_provider")
        channelSettings = column("channel_settings")
        channelEndpoint = column("channel_endpoint")
        channelPausedUntil = column("channel_paused_until")
        uncountedRetries = column("uncounted_retries")
        localDueAt = column("local_due_at")
        oversizedColumns = column("oversized_columns")
    }
}

/// The most bytes of each producer- or subscriber-written text column a claim reads (as PostgreSQL prints it).
/// Generous for every real value (a Web Push endpoint URL is a few hundred bytes, a BCP 47 tag a few dozen),
/// and small enough that a row holding hundreds of megabytes in one of them costs the worker nothing: the
/// value stays in the database and the delivery fails `oversized_column` naming the column.
enum ClaimedColumnBounds {
    struct Bound {
        /// The SQL expression in the claim statement.
        var expression: String
        /// The column as `delivery_events.detail` names it.
        var column: String
        var maximumBytes: Int
    }

    static let all: [Bound] = [
        Bound(expression: "n.campaign_id", column: "notifications.campaign_id", maximumBytes: 1_024),
        Bound(expression: "s.platform", column: "subscriptions.platform", maximumBytes: 64),
        Bound(expression: "s.token", column: "subscriptions.token", maximumBytes: 8_192),
        Bound(expression: "s.language", column: "subscriptions.language", maximumBytes: 256),
        Bound(expression: "s.timezone", column: "subscriptions.timezone", maximumBytes: 256),
        Bound(expression: "s.country", column: "subscriptions.country", maximumBytes: 256),
        Bound(expression: "s.web_p256dh", column: "subscriptions.web_p256dh", maximumBytes: 256),
        Bound(expression: "s.web_auth", column: "subscriptions.web_auth", maximumBytes: 256),
        Bound(expression: "a.default_language", column: "apps.default_language", maximumBytes: 256),
        Bound(expression: "a.default_timezone", column: "apps.default_timezone", maximumBytes: 256),
        Bound(expression: "a.frequency_caps", column: "apps.frequency_caps", maximumBytes: 16_384),
        Bound(expression: "ch.settings", column: "app_channels.settings", maximumBytes: 65_536),
        Bound(expression: "ch.endpoint", column: "app_channels.endpoint", maximumBytes: 2_048),
    ]
}
