import DeliveryCore
import Foundation
import Postgres
import Synchronization

/// The queue's SQL, each operation one short transaction on a connection the caller owns. No row lock is held
/// once a function returns, so nothing is locked while a provider request is in flight (README, "How it works").
public enum QueueStore {
    /// Claims up to `limit` due deliveries, highest priority first, skipping rows other workers hold
    /// (`FOR UPDATE SKIP LOCKED`). The claim moves `run_at` to the lease's expiry (so a worker that dies loses
    /// its claims after `leaseSeconds`), counts an attempt and bumps the fence, all in one statement.
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
    public static func claim(
        on connection: PostgresConnection, limit: Int, leaseSeconds: Double, workerID: String
    ) throws -> [ClaimedDelivery] {
        do {
            return try decodeClaimed(
                // Prepared with the limit written into its text: planning took longer than running it, and after
                // five executions PostgreSQL may keep a prepared statement's generic plan, which with `LIMIT $1`
                // unknown ran ten times slower than the custom one on a queue of 2,000,000 rows (89-103 ms
                // against 8-11 ms). With the limit known the generic plan is the custom one.
                try connection.preparedQuery(claimText(limit: limit), [leaseSeconds, workerID]), on: connection)
        } catch let error as PostgresError where error.isDataError {
            return try claimIsolatingBadRows(
                on: connection, limit: limit, leaseSeconds: leaseSeconds, workerID: workerID, error: error)
        }
    }

    /// The fallback of ``claim(on:limit:leaseSeconds:workerID:)`` after a data error: the candidates (read
    /// without locks, in claim order) are claimed by id, a failing set split in two until single rows remain.
    private static func claimIsolatingBadRows(
        on connection: PostgresConnection, limit: Int, leaseSeconds: Double, workerID: String, error: PostgresError
    ) throws -> [ClaimedDelivery] {
        let candidates = try connection.query(
            """
            (SELECT id FROM deliveries WHERE NOT throttled AND run_at <= now() ORDER BY priority DESC, run_at LIMIT $1)
            UNION ALL
            (SELECT id FROM deliveries WHERE throttled AND run_at <= now() ORDER BY priority DESC, run_at LIMIT $1)
            """, [limit]
        ).map { try $0.decode(Int64.self, "id") }
        var claimed: [ClaimedDelivery] = []
        var failing: [(id: Int64, error: PostgresError)] = []
        func claimSet(_ ids: ArraySlice<Int64>) throws {
            guard !ids.isEmpty else { return }
            do {
                claimed += try decodeClaimed(
                    try connection.query(
                        claimSQL(picking: .listed), [ids.count, leaseSeconds, workerID, Array(ids)]),
                    on: connection)
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
            claimed = try decodeClaimed(
                try connection.query(
                    claimSQL(picking: .unlisted), [limit, leaseSeconds, workerID, failing.map(\.id)]),
                on: connection)
            // No other row is due: no evidence either way; they are tried again with the next claim.
            if claimed.isEmpty { return [] }
        }
        for row in failing {
            try setAsideIfPossible(on: connection, deliveryID: row.id, fence: nil, error: row.error)
        }
        return claimed
    }

    /// Reads claimed rows; a row that cannot be read is set aside under the fence it was just claimed with.
    private static func decodeClaimed(_ rows: PostgresQueryResult, on connection: PostgresConnection) throws
        -> [ClaimedDelivery]
    {
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(rows.count)
        let columns = ClaimedColumns(rows)
        var repeats = ClaimedColumns.Repeats()
        for row in rows {
            do {
                claimed.append(try ClaimedDelivery(claimedRow: row, columns: columns, repeats: &repeats))
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
            reason = "unreadable_row"
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
    /// (``claim(on:limit:leaseSeconds:workerID:)`` prepares one per limit).
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
        /// Those of the due rows whose id is in `$4::bigint[]`.
        case listed
        /// The due rows whose id is not in `$4::bigint[]`.
        case unlisted
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

    /// The claim statement. Deliveries of apps with `apps.max_sends_per_second` (`throttled`) are picked per
    /// app through `deliveries_claim_throttled`, at most as many as the permits taken from the app's token
    /// bucket (`app_send_buckets`, refilled from `clock_timestamp()`, capacity `pushizo_send_burst`); the
    /// others through `deliveries_claim_unthrottled`, which does not contain a limited app's rows, so its
    /// backlog is never scanned. The two are merged in claim order; the bucket is charged only for the rows
    /// kept. A bucket another claim holds is skipped (`SKIP LOCKED`): that app waits for the next claim, the
    /// others do not. docs/throttle.md.
    ///
    /// Parameters: without `limit`, `$1` the limit, `$2` lease seconds, `$3` the worker id and, for `.listed`
    /// and `.unlisted`, `$4` the ids; with `limit` (written into the text), `$1` lease seconds, `$2` the worker
    /// id and `$3` the ids.
    static func claimSQL(picking: ClaimPicking, limit: Int? = nil) -> String {
        let shift = limit == nil ? 0 : 1
        let limitText = limit.map { "\(max($0, 0))" } ?? "$1"
        let lease = "$\(2 - shift)"
        let worker = "$\(3 - shift)"
        let ids = "$\(4 - shift)"
        let listed = picking == .due ? "" : picking == .listed ? " AND id = ANY(\(ids)::bigint[])" : " AND id <> ALL(\(ids)::bigint[])"
        return """
        WITH buckets AS MATERIALIZED (
            SELECT b.app_id, c.at,
                   pushizo_bucket_permits(a.max_sends_per_second, b.tokens, b.refilled_at, c.at) AS available
            FROM app_send_buckets b
            JOIN apps a ON a.id = b.app_id
            CROSS JOIN (SELECT clock_timestamp() AS at) c
            WHERE a.max_sends_per_second IS NOT NULL
            FOR UPDATE OF b SKIP LOCKED
        ), throttled_due AS MATERIALIZED (
            SELECT t.id, t.app_id, t.priority, t.run_at, true AS throttled
            FROM buckets b
            CROSS JOIN LATERAL (
                SELECT id, app_id, priority, run_at FROM deliveries
                WHERE app_id = b.app_id AND throttled AND run_at <= now()\(listed)
                ORDER BY priority DESC, run_at
                LIMIT least(floor(b.available), \(limitText))::int
                FOR UPDATE SKIP LOCKED
            ) t
        ), free_due AS MATERIALIZED (
            SELECT id, app_id, priority, run_at, false AS throttled FROM deliveries
            WHERE NOT throttled AND run_at <= now()\(listed)
            ORDER BY priority DESC, run_at
            LIMIT \(limitText)
            FOR UPDATE SKIP LOCKED
        ), picked AS MATERIALIZED (
            SELECT id, app_id, throttled FROM (SELECT * FROM throttled_due UNION ALL SELECT * FROM free_due) p
            ORDER BY priority DESC, run_at
            LIMIT \(limitText)
        ), taken AS (
            -- Permits of rows not kept (fewer due than permits, or beaten in claim order) stay in the bucket.
            UPDATE app_send_buckets s
            SET tokens = b.available - u.used, refilled_at = b.at
            FROM buckets b
            JOIN (SELECT app_id, count(*) AS used FROM picked WHERE throttled GROUP BY app_id) u ON u.app_id = b.app_id
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
    /// rescheduled, and one `delivery_events` row is appended for each delivery whose fence still matches.
    /// Completions whose fence no longer matches (the lease expired and another worker claimed the delivery)
    /// change nothing. Subscription invalidations and channel pauses are applied in the same transaction, and
    /// so are frequency-cap releases (``DeliveryCompletion/capRelease``) of completions that took effect.
    /// A batch that needs none of those is the one statement ``completeSQL``, run without a transaction block
    /// (a statement is atomic on its own; `BEGIN` and `COMMIT` would be two more round trips).
    /// - Returns: how many completions took effect (the rest lost their lease).
    @discardableResult
    public static func complete(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
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
                PostgresBinaryArray.text(completions.map(\.event)),
                PostgresBinaryArray.text(completions.map(\.reason)),
                PostgresBinaryArray.text(completions.map(\.detailJSON)),
                PostgresBinaryArray.timestamptz(completions.map(\.nextRunAt)),
                PostgresBinaryArray.text(completions.map { $0.nextRunAt == nil ? nil : $0.reason }),
                PostgresBinaryArray.boolean(completions.map(\.refundsAttempt)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.appID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.notificationID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.subscriptionID)),
                PostgresBinaryArray.integer(completions.map(\.claimedAs?.attempt)),
            ])
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
                    invalidations.map(\.reason),
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
                [pause.appID, pause.provider, pause.until, pause.reason])
        }
        // Last: a transaction waiting for a key's advisory lock may hold row locks, but one holding such a
        // lock then waits only for other such locks (taken in hash order), so no cycle can form.
        let releases = completions.compactMap(\.capRelease)
        if !releases.isEmpty {
            try releaseFrequencyCapGrants(on: connection, releases)
        }
        return result.affectedRows
    }

    static let completeSQL = """
        WITH input AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                                 $6::timestamptz[], $7::text[], $8::bool[],
                                 $9::uuid[], $10::uuid[], $11::uuid[], $12::integer[])
                AS i(id, fence, event, reason, detail, next_run_at, last_error, refund,
                     app_id, notification_id, subscription_id, attempt)
        ), terminal AS (
            DELETE FROM deliveries d USING input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail
        ), rescheduled AS (
            UPDATE deliveries d
            SET run_at = i.next_run_at, leased_by = NULL, last_error = i.last_error,
                attempt = d.attempt - CASE WHEN i.refund THEN 1 ELSE 0 END
            FROM input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NOT NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail
        ), missing AS MATERIALIZED (
            -- Only completions that settled nothing (usually none) are looked up: is their queue row gone?
            SELECT i.id, i.app_id, i.notification_id, i.subscription_id, i.attempt, i.event, i.reason, i.detail
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
            SELECT *, false AS deleted FROM terminal
            UNION ALL SELECT *, false FROM rescheduled
            UNION ALL SELECT *, true FROM vanished
        )
        INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
        -- jsonb refuses the escape \\u0000 that JSON allows (a NUL from a provider's answer): never fail on it.
        SELECT s.app_id, s.notification_id, s.subscription_id, s.event, s.reason, s.attempt,
               coalesce(replace(s.detail, '\\u0000', '\\ufffd')::jsonb, '{}'::jsonb)
                   || CASE WHEN s.deleted THEN '{"delivery_deleted": true}'::jsonb ELSE '{}'::jsonb END
        FROM settled s
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
