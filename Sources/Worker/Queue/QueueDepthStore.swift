import Foundation
import Postgres

/// The queue's depth: counted by provider and state, sampled once per turn for the whole fleet
/// (`queue_depth_samples`), and whether anything is left to do at all.
public enum QueueDepthStore {
    /// Longest a sample may take before PostgreSQL cancels it (`statement_timeout`, milliseconds).
    public static let queueSampleTimeoutMilliseconds = 30_000

    /// Queues of up to this many rows are counted exactly; larger ones are estimated from a block sample
    /// (``measureQueueDepth(on:exactUpTo:sampleBlocks:)``).
    public static let exactQueueSampleRows = 1_000_000

    /// Table blocks an estimated count reads, about (8 KiB each, some 60-80 deliveries a block).
    public static let queueSampleBlocks = 2_000

    /// Counts the queue on `connection`, inside the caller's transaction.
    ///
    /// Cost: exact counts need one pass over `deliveries`, each row's subscription looked up by primary key
    /// (the provider is the subscription's platform; never a scan of `subscriptions`, which may be far larger
    /// than the queue): seconds on a queue of a million rows, and more than the 30 s
    /// statement timeout on tens of millions. So the rows are first counted up to `exactUpTo` + 1 (a pass that
    /// stops there, without the join); a queue within that is counted exactly, a larger one from a
    /// `TABLESAMPLE SYSTEM` sample of about `sampleBlocks` of the table's blocks, each count divided by the
    /// share of blocks sampled (unbiased: every block is taken with that probability). The result's
    /// ``QueueDepthSample/sampledFraction`` says which. The caller samples in the background, less often when a
    /// sample is slow, never per scrape, and once for the whole fleet
    /// (``sharedQueueDepth(on:interval:dutyCycle:sampler:timeoutMilliseconds:)``); the paused channels come from
    /// `app_channels` (one row per app and provider), the paused apps from the `apps_paused` partial index and the
    /// fleet's pause from the one-row `fleet_settings`, always exactly. Due rows an operator's pause of their app
    /// or of the fleet holds are counted apart (``QueueDepthSample/Depth/held``), out of `due` and of the oldest
    /// due age: they wait for `resume`, not for a claim.
    /// - Throws: ``PostgresError``.
    static func measureQueueDepth(
        on connection: PostgresConnection, exactUpTo: Int = exactQueueSampleRows, sampleBlocks: Int = queueSampleBlocks
    ) throws -> QueueDepthSample {
        var sample = QueueDepthSample()
        let rowsUpToBound = try connection.query(
            "SELECT count(*) AS n FROM (SELECT 1 FROM deliveries LIMIT $1) x", [exactUpTo + 1]
        )[0].decode(Int.self, "n")
        var fraction = 1.0
        var from = "deliveries d"
        if rowsUpToBound > exactUpTo {
            let blocks = try connection.query(
                "SELECT pg_relation_size('deliveries') / current_setting('block_size')::bigint AS blocks"
            )[0].decode(Int.self, "blocks")
            fraction = min(1, Double(max(sampleBlocks, 1)) / Double(max(blocks, 1)))
            if fraction < 1 {
                // A number written into the text: TABLESAMPLE takes a parameter, but the planner then cannot
                // see the sample's size when it chooses the join.
                from = "deliveries d TABLESAMPLE SYSTEM (\(String(format: "%.6f", fraction * 100)))"
            }
        }
        // The operator's pauses first, in a statement of their own: they decide the `held` grouping key below, so
        // an unpaused fleet's pass pays nothing for them. On 1,000,000 deliveries (min of 10 passes on 2 busy
        // cores) the pass took 0.83 s with a constant key, as without the key; 1.02 s with 3 of 20 apps paused
        // (a hashed SubPlan probed per row); 1.24 s with the fleet's EXISTS in every row's key as well; and about
        // twice as long with the key as a condition in each count's FILTER (evaluated three times a row). A pause
        // set between the two statements shows in the next turn's sample.
        let pauses = try connection.query(
            "SELECT (SELECT count(*) FROM (\(ClaimPauses.pausedApps)) a) AS apps, \(ClaimPauses.fleetPaused) AS fleet")
        let fleetPaused = try pauses[0].decode(Bool.self, "fleet")
        let pausedApps = try pauses[0].decode(Int.self, "apps")
        sample.fleetPaused = fleetPaused
        sample.pausedApps = pausedApps
        func held(_ app: String) -> String {
            if fleetPaused { return "true" }
            return pausedApps > 0 ? "\(app) IN (\(ClaimPauses.pausedApps))" : "false"
        }
        let rows = try connection.query(
            """
            SELECT CASE s.platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush'
                        WHEN 'huawei' THEN 'huawei' ELSE 'none' END AS provider,
                   \(held("d.app_id")) AS held,
                   count(*) FILTER (WHERE d.run_at <= now()) AS due,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NULL) AS deferred,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NOT NULL) AS leased,
                   coalesce(extract(epoch FROM now() - min(d.run_at) FILTER (WHERE d.run_at <= now())), 0)::float8
                       AS oldest_due_age
            FROM \(from)
            -- Each row's subscription by primary key: a join planned from statistics hashed the whole
            -- subscriptions table for a queue a thirtieth of its size (1,040,000 rows read for 36,000
            -- deliveries, 0.5-1 s a sample, evicting the hot pages from shared buffers as it went).
            LEFT JOIN LATERAL (SELECT platform FROM subscriptions WHERE id = d.subscription_id OFFSET 0) s ON true
            GROUP BY 1, 2
            """)
        func scaled(_ count: Int) -> Int { fraction < 1 ? Int((Double(count) / fraction).rounded()) : count }
        for row in rows {
            let provider = try row.decode(String.self, "provider")
            var depth = sample.depth[provider] ?? QueueDepthSample.Depth()
            let due = scaled(try row.decode(Int.self, "due"))
            // A held row is due all the same; only the state it is counted in differs (deferred and leased rows
            // are what they are, paused or not).
            if try row.decode(Bool.self, "held") {
                depth.held += due
            } else {
                depth.due += due
                depth.oldestDueAge = try row.decode(Double.self, "oldest_due_age")
            }
            depth.deferred += scaled(try row.decode(Int.self, "deferred"))
            depth.leased += scaled(try row.decode(Int.self, "leased"))
            sample.depth[provider] = depth
        }
        for row in try connection.query(pagedDeliveriesSQL(held: held("pg.app_id"))) {
            let provider = try row.decode(String.self, "provider")
            var depth = sample.depth[provider] ?? QueueDepthSample.Depth()
            let due = try row.decode(Int.self, "due")
            if try row.decode(Bool.self, "held") {
                depth.held += due
            } else {
                depth.due += due
                if due > 0 { depth.oldestDueAge = max(depth.oldestDueAge, try row.decode(Double.self, "oldest_due_age")) }
            }
            depth.leased += try row.decode(Int.self, "leased")
            sample.depth[provider] = depth
        }
        sample.sampledFraction = fraction
        let paused = try connection.query(
            """
            SELECT provider, count(*) AS n, count(*) FILTER (WHERE paused_reason = $1) AS by_operator
            FROM app_channels WHERE paused_until > now() GROUP BY provider
            """, [ClaimPauses.operatorReason])
        var pausedByOperator: [String: Int] = [:]
        for row in paused {
            let provider = try row.decode(String.self, "provider")
            sample.pausedChannels[provider] = try row.decode(Int.self, "n")
            pausedByOperator[provider] = try row.decode(Int.self, "by_operator")
        }
        sample.operatorPausedChannels = pausedByOperator
        sample.liveActivityChannels = try measureLiveActivityChannels(on: connection)
        return sample
    }

    /// The Live Activity channel rows pending or failed and the channel sends by state, exactly: one row per
    /// channel and one per channel send waiting, tables far smaller than the queue (the rows behind their revision
    /// through `live_activity_channels_to_reconcile`). Nil on a schema before migration 0035.
    static func measureLiveActivityChannels(on connection: PostgresConnection) throws -> QueueDepthSample.LiveActivityChannelCounts? {
        let present = try connection.query("SELECT to_regclass('live_activity_channel_sends') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return nil }
        let row = try connection.query(
            """
            SELECT (SELECT count(*) FROM live_activity_channels WHERE reconciled_revision < revision) AS pending,
                   (SELECT count(*) FROM live_activity_channels WHERE reconciled_revision >= revision AND state = 'failed') AS failed,
                   count(*) FILTER (WHERE run_at <= now()) AS due,
                   count(*) FILTER (WHERE run_at > now() AND leased_by IS NULL) AS deferred,
                   count(*) FILTER (WHERE run_at > now() AND leased_by IS NOT NULL) AS leased
            FROM live_activity_channel_sends
            """)[0]
        var counts = QueueDepthSample.LiveActivityChannelCounts()
        counts.pending = try row.decode(Int.self, "pending")
        counts.failed = try row.decode(Int.self, "failed")
        counts.sendsDue = try row.decode(Int.self, "due")
        counts.sendsDeferred = try row.decode(Int.self, "deferred")
        counts.sendsLeased = try row.decode(Int.self, "leased")
        return counts
    }

    /// The deliveries of leased pages (`delivery_pages`, docs/performance.md, "Pages leased at expansion") that
    /// have no outcome yet, by provider and `held` (the `held` expression on `pg.app_id`): `leased` under a live
    /// lease, `due` once the lease ran out (what any worker's next rescue takes; `oldest_due_age` from the lease's
    /// end), counted exactly whatever the queue's size. A page's count is `status`'s: the deliveries it handed out
    /// less those with a terminal event or a `deliveries` row, one range of `delivery_events_notification` and of
    /// the deliveries' unique key per page. Its provider split is its range's subscriptions' platforms (one range
    /// of `subscriptions` by app and id, at most a page), the count shared in their proportion (the largest
    /// takes what rounding leaves): exact for a page of one platform, the usual case of an app with one provider.
    static func pagedDeliveriesSQL(held: String) -> String {
        """
        WITH pages AS (
            SELECT p.id, p.app_id, p.lease_until > now() AS live,
                   extract(epoch FROM now() - p.lease_until)::float8 AS due_age,
                   greatest(0, p.deliveries - \(DeliveryPageStore.settledSQL(page: "p", upTo: "p.up_to"))) AS open,
                   p.after_id, p.up_to
            FROM delivery_pages p
        ), shares AS (
            SELECT pg.id, pg.app_id, pg.live, pg.due_age, pg.open, coalesce(x.provider, 'none') AS provider,
                   pg.open * coalesce(x.n, 1) / sum(coalesce(x.n, 1)) OVER (PARTITION BY pg.id) AS part,
                   row_number() OVER (PARTITION BY pg.id ORDER BY x.n DESC NULLS LAST, x.provider) AS rank
            FROM pages pg
            LEFT JOIN LATERAL (
                SELECT CASE s.platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush'
                            WHEN 'huawei' THEN 'huawei' ELSE 'none' END AS provider, count(*) AS n
                FROM subscriptions s
                WHERE s.app_id = pg.app_id AND (pg.after_id IS NULL OR s.id > pg.after_id) AND s.id <= pg.up_to
                GROUP BY 1
            ) x ON true
            WHERE pg.open > 0
        ), counted AS (
            SELECT pg.*, part + CASE WHEN rank = 1 THEN open - sum(part) OVER (PARTITION BY id) ELSE 0 END AS n
            FROM shares pg
        )
        SELECT provider, \(held) AS held,
               coalesce(sum(n) FILTER (WHERE live), 0)::bigint AS leased,
               coalesce(sum(n) FILTER (WHERE NOT live), 0)::bigint AS due,
               coalesce(max(due_age) FILTER (WHERE NOT live), 0)::float8 AS oldest_due_age
        FROM counted pg
        GROUP BY 1, 2
        """
    }

    /// Longest stored sample this worker will decode, in bytes of JSON text. A sample has a handful of
    /// providers; the table's own CHECK allows 64 KiB.
    static let sharedSampleByteLimit = 65_536

    /// The fleet's queue sample: measured by at most one worker per turn, read by the others.
    ///
    /// In one transaction: the `queue_depth_samples` row is read; when it is younger than
    /// `max(interval, took_seconds / dutyCycle)` (by the database's clock) it is returned as it is. Otherwise
    /// the row is locked with `FOR UPDATE SKIP LOCKED`: the worker that gets the lock measures
    /// (``measureQueueDepth(on:)``, under ``queueSampleTimeoutMilliseconds``, in one backend: no parallel
    /// workers, which would take more than the one backend's share the duty cycle bounds) and writes the
    /// result with how long it took; a worker that finds the row locked returns the last written sample, since
    /// another worker is measuring. So the pass over `deliveries` happens once per turn fleet-wide, not once per
    /// worker, and a slow pass makes the next turn come later. A pass cancelled by the timeout is recorded too
    /// (`timed_out_at`, when it was cancelled, with the time it ran as `took_seconds`, which then no longer
    /// describes the stored sample), so the next turn is spaced from it as from a slow sample, instead of
    /// being due at once; the last sample is kept.
    /// - Parameters:
    ///   - interval: the shortest time between two samples.
    ///   - dutyCycle: the share of one backend's time the measuring may take (0 < dutyCycle <= 1).
    ///   - sampler: this worker's id, written with the sample (for operators reading the table).
    ///   - timeoutMilliseconds: the measuring's `statement_timeout` (tests shorten it).
    /// - Returns: `nil` when no sample was ever written and another worker is measuring the first.
    /// - Throws: ``PostgresError`` (a lost connection, the statement timeout: SQLSTATE 57014 `query_canceled`,
    ///   after the attempt is recorded; the table missing before the migration that creates it), or
    ///   `.decodingFailed` for a stored sample that is not what a worker writes.
    public static func sharedQueueDepth(
        on connection: PostgresConnection, interval: Duration, dutyCycle: Double, sampler: String,
        timeoutMilliseconds: Int = queueSampleTimeoutMilliseconds
    ) throws -> SharedQueueDepth? {
        var timedOut: PostgresError?
        let shared: SharedQueueDepth? = try connection.transaction { connection in
            try connection.execute("SET LOCAL statement_timeout = \(timeoutMilliseconds)")
            try connection.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            // Planned costs that grow with the queue pass jit_above_cost: compiling the leased pages' count took
            // 5.0 of its 5.2 s on a 10,000,000-delivery queue with 20 pages (22 ms without).
            try connection.execute("SET LOCAL jit = off")
            let seconds = interval.inSeconds
            // Spaced from the last sample or the last timed-out attempt, whichever is later (greatest ignores NULL).
            let due = """
                (greatest(sampled_at, timed_out_at) IS NULL
                 OR greatest(sampled_at, timed_out_at) + make_interval(secs => greatest($1::float8, took_seconds / $2::float8))
                    <= now())
                """
            let stored = try connection.query(
                "SELECT \(due) AS due, sampled_at, sample::text AS sample FROM queue_depth_samples WHERE name = 'queue'",
                [seconds, dutyCycle])
            guard let row = stored.first else {
                throw PostgresError(code: .decodingFailed, message: "queue_depth_samples has no 'queue' row")
            }
            if try !row.decode(Bool.self, "due") { return try decodeShared(row, measuredHere: false) }
            // Our turn if nobody holds the row; re-checked under the lock, since a worker that just finished
            // measuring may have committed between the read above and the lock.
            let locked = try connection.query(
                """
                SELECT \(due) AS due, sampled_at, sample::text AS sample FROM queue_depth_samples
                WHERE name = 'queue' FOR UPDATE SKIP LOCKED
                """, [seconds, dutyCycle])
            guard let mine = locked.first else { return try decodeShared(row, measuredHere: false) }
            if try !mine.decode(Bool.self, "due") { return try decodeShared(mine, measuredHere: false) }
            let started = ContinuousClock.now
            let sample: QueueDepthSample
            do {
                // A savepoint, so that a cancelled pass leaves the transaction able to record it.
                sample = try connection.transaction { try measureQueueDepth(on: $0) }
            } catch let error as PostgresError where error.sqlState == "57014" {
                _ = try connection.query(
                    "UPDATE queue_depth_samples SET timed_out_at = clock_timestamp(), took_seconds = $1 WHERE name = 'queue'",
                    [started.duration(to: ContinuousClock.now).inSeconds])
                timedOut = error
                return try decodeShared(mine, measuredHere: false)
            }
            let took = started.duration(to: ContinuousClock.now)
            let json = String(decoding: try JSONEncoder().encode(sample), as: UTF8.self)
            let written = try connection.query(
                """
                UPDATE queue_depth_samples
                SET sampled_at = now(), took_seconds = $1, sampled_by = left($2, 200), sample = $3::jsonb
                WHERE name = 'queue' RETURNING sampled_at
                """,
                [took.inSeconds, sampler, json])
            return SharedQueueDepth(sample: sample, sampledAt: try written[0].decode(Date.self, "sampled_at"), measuredHere: true)
        }
        if let timedOut { throw timedOut }
        return shared
    }

    private static func decodeShared(_ row: PostgresRow, measuredHere: Bool) throws -> SharedQueueDepth? {
        guard let text = try row.decodeIfPresent(String.self, "sample"),
            let sampledAt = try row.decodeIfPresent(Date.self, "sampled_at")
        else { return nil }
        guard text.utf8.count <= sharedSampleByteLimit,
            let sample = try? JSONDecoder().decode(QueueDepthSample.self, from: Data(text.utf8))
        else {
            throw PostgresError(code: .decodingFailed, message: "queue_depth_samples holds a sample this worker cannot read")
        }
        return SharedQueueDepth(sample: sample, sampledAt: sampledAt, measuredHere: measuredHere)
    }

    /// `true` when nothing is left that the fleet will claim without a person: no due notification waits for
    /// expansion and no delivery is queued but those an operator's pause holds (its app's, or every one while the
    /// fleet is paused: they wait for `resume`, or the pause's end). Deliveries waiting for a retry, a local time
    /// or a provider's channel pause count as work: they become claimable by themselves, and so does a leased
    /// page (`delivery_pages`: in flight, or rescued once its lease runs out), and so do Live Activity channel sends
    /// and channel rows behind their revision (docs/live-activity-channels.md). Used by `PUSHIZO_EXIT_WHEN_DRAINED`.
    ///
    /// The notifications are asked first: each side is an InitPlan, run only when `AND` needs its value, and while a
    /// notification waits to be expanded (a broadcast sent as its worker's room allows, docs/performance.md) the
    /// queue is not read at all. Read, the queue is a sequential scan that passes the dead rows of every delivery
    /// completed since the last vacuum: 300-1,400 pages of a 100,000-delivery drain, at each check.
    public static func isDrained(on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.preparedQuery(
            """
            SELECT NOT EXISTS (SELECT 1 FROM notifications
                               WHERE status IN ('pending', 'expanding')
                                 AND (send_after IS NULL OR send_after <= now()))
               AND NOT EXISTS (SELECT 1 FROM deliveries d
                               WHERE \(ClaimPauses.fleetNotPaused)
                                 AND NOT EXISTS (SELECT FROM apps a WHERE a.id = d.app_id AND a.paused_until > now()))
               AND NOT EXISTS (SELECT 1 FROM delivery_pages)
               AND NOT EXISTS (SELECT 1 FROM live_activity_channel_sends)
               AND NOT EXISTS (SELECT 1 FROM live_activity_channels WHERE reconciled_revision < revision) AS drained
            """)
        return try rows.first?.decode(Bool.self, "drained") ?? false
    }
}
