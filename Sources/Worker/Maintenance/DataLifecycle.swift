import DeliveryCore
import Foundation
import Postgres

/// What one maintenance run did.
public struct MaintenanceReport: Sendable, Equatable {
    public var createdPartitions: [String] = []
    public var droppedPartitions: [String] = []
    /// Rows of the DEFAULT partition older than the retention, deleted (normally 0; see docs/data-lifecycle.md).
    public var expiredDefaultRows = 0
    /// Notifications whose count deltas were folded into one row.
    public var foldedCounts = 0
    public var prunedGrants = 0
    public var prunedNotifications = 0
    /// Notifications whose `idempotency_key` was cleared, past ``DataLifecycle/idempotencyKeyWindow``.
    public var clearedIdempotencyKeys = 0
    /// Fleet-shared provider tokens expired for more than a day (``expiredProviderTokenAge``).
    public var prunedProviderTokens = 0
    /// `worker_heartbeats` rows not seen for ``WorkerHeartbeatStore/pruneAge`` (workers stopped or dead).
    public var prunedWorkerHeartbeats = 0
    /// `fcm_project_buckets` rows no charge touched for ``DataLifecycle/idleFCMProjectBucketAge``.
    public var prunedFCMProjectBuckets = 0
    /// Steps that failed (a lock not obtained within `lockTimeout`, ...); the others still ran.
    public var problems: [String] = []

    public init() {}

    /// `key=value` pairs for logs and `pushizo-worker maintain`.
    public var fields: [String: String] {
        [
            "partitions_created": createdPartitions.isEmpty ? "0" : createdPartitions.joined(separator: ","),
            "partitions_dropped": droppedPartitions.isEmpty ? "0" : droppedPartitions.joined(separator: ","),
            "default_rows_expired": "\(expiredDefaultRows)", "counts_folded": "\(foldedCounts)",
            "grants_pruned": "\(prunedGrants)", "notifications_pruned": "\(prunedNotifications)",
            "idempotency_keys_cleared": "\(clearedIdempotencyKeys)",
            "provider_tokens_pruned": "\(prunedProviderTokens)", "worker_heartbeats_pruned": "\(prunedWorkerHeartbeats)",
            "fcm_project_buckets_pruned": "\(prunedFCMProjectBuckets)",
            "problems": "\(problems.count)",
        ]
    }

    /// Whether the run changed anything.
    public var didWork: Bool {
        !createdPartitions.isEmpty || !droppedPartitions.isEmpty || expiredDefaultRows > 0 || foldedCounts > 0
            || prunedGrants > 0 || prunedNotifications > 0 || clearedIdempotencyKeys > 0 || prunedProviderTokens > 0
            || prunedWorkerHeartbeats > 0 || prunedFCMProjectBuckets > 0
    }
}

/// The data lifecycle's maintenance (docs/data-lifecycle.md): partitions of `delivery_events` created ahead and
/// dropped past the retention (never a `DELETE` of events), count deltas folded, frequency-cap grants outside
/// every cap window and finished notifications past their retention deleted in small batches, producers'
/// idempotency keys past their window cleared in small batches, fleet-shared provider tokens expired for a day
/// deleted, the heartbeat rows of workers not seen for a day deleted, and FCM projects' buckets no charge touched
/// for a day deleted.
///
/// One run at a time across the fleet: a session-level advisory lock (``advisoryLockKey``) is held for the run.
/// The worker's schedule tries it and skips when another worker holds it; `pushizo-worker maintain` waits for it.
/// Each step is its own short transaction; a step that fails is reported and the next one still runs.
///
/// Behind a transaction-mode pooler (``PostgresConnection/poolerMode``) no lock may outlive a transaction (the
/// pooler would hand the server session holding it to another client, and the lock would stay held there): each
/// of the run's writing transactions (a partition created or dropped, a batch deleted or folded) takes the same
/// key as a transaction-level lock (`pg_advisory_xact_lock`) instead. No two of them run at once across the fleet;
/// two runs started together may alternate batch by batch, which each step allows (each batch looks again at
/// what is left). The schedule's try is then a `pg_try_advisory_xact_lock` at the start of the run.
public enum DataLifecycle {
    /// `pg_advisory_lock` key of the maintenance ("PUSHLIFE" in ASCII), distinct from the migrator's.
    public static let advisoryLockKey: Int64 = 0x5055_5348_4C49_4645

    /// Runs every step once on `connection` (a session of its own: the advisory lock belongs to it).
    /// - Parameters:
    ///   - waitForLock: `true` waits for another run to end; `false` returns `nil` at once when one is running.
    ///   - shouldContinue: asked between batches; `false` (a stop request) ends the run early.
    /// - Returns: the report, or `nil` when the lock was held elsewhere and `waitForLock` is `false`.
    /// - Throws: ``PostgresError`` when the lock cannot be asked for (the connection failed).
    public static func maintain(
        on connection: PostgresConnection, settings: MaintenanceSettings, waitForLock: Bool,
        shouldContinue: () -> Bool = { true }
    ) throws -> MaintenanceReport? {
        if !connection.poolerMode.keepsSessionState {
            if !waitForLock {
                let locked = try connection.transaction {
                    try $0.query("SELECT pg_try_advisory_xact_lock($1) AS locked", [advisoryLockKey])
                }
                guard try locked.first?.decode(Bool.self, "locked") == true else { return nil }
            }
        } else if waitForLock {
            _ = try connection.query("SELECT pg_advisory_lock($1)", [advisoryLockKey])
        } else {
            let locked = try connection.query("SELECT pg_try_advisory_lock($1) AS locked", [advisoryLockKey])
            guard try locked.first?.decode(Bool.self, "locked") == true else { return nil }
        }
        defer {
            if !connection.isConnectionBad && connection.poolerMode.keepsSessionState {
                _ = try? connection.query("SELECT pg_advisory_unlock($1)", [advisoryLockKey])
            }
        }
        var report = MaintenanceReport()
        // Citus refuses a `FOR UPDATE SKIP LOCKED` across shards: on a distributed database two steps take their
        // rows another way (docs/scale-out.md, "Maintenance and `status` on Citus").
        let form = try SchemaForm.read(on: connection)
        func step(_ name: String, _ body: () throws -> Void) {
            guard shouldContinue() else { return }
            do {
                try body()
            } catch {
                report.problems.append("\(name): \(error)")
            }
        }
        let retentionSeconds = Double(settings.eventRetention.components.seconds)
        step("partitions") { try maintainPartitions(on: connection, settings: settings, report: &report) }
        step("default partition") {
            report.expiredDefaultRows = try locked(connection, settings) {
                try $0.query(
                    "DELETE FROM delivery_events_default WHERE at < now() - make_interval(secs => $1::float8)",
                    [retentionSeconds]
                ).affectedRows
            }
        }
        step("counts") {
            var folded = settings.batchSize
            while folded == settings.batchSize, shouldContinue() {
                folded = try exclusive(connection) {
                    try $0.query("SELECT pushizo_compact_notification_counts($1) AS folded", [settings.batchSize])
                }.first?.decode(Int.self, "folded") ?? 0
                report.foldedCounts += folded
            }
        }
        step("frequency-cap grants") {
            report.prunedGrants = try inBatches(settings.batchSize, shouldContinue) {
                let limit = $0
                return try exclusive(connection) {
                    try $0.query(
                        pruneGrantsSQL, [Double(FrequencyCapStore.minimumGrantRetention), Double(FrequencyCaps.longestWindow), limit])
                }.affectedRows
            }
        }
        if let retention = settings.notificationRetention {
            step("notifications") {
                let seconds = Double(retention.components.seconds)
                if form == .citus {
                    report.prunedNotifications = try pruneNotificationsAcrossShards(
                        on: connection, retentionSeconds: seconds, batchSize: settings.batchSize, shouldContinue)
                    return
                }
                report.prunedNotifications = try inBatches(settings.batchSize, shouldContinue) {
                    let limit = $0
                    return try exclusive(connection) {
                        try $0.query(pruneNotificationsSQL, [seconds, limit])
                    }.affectedRows
                }
            }
        }
        step("idempotency keys") {
            // The keys' table (migration 0037): the keys of a distributed database; empty on a single node.
            report.clearedIdempotencyKeys = try inBatches(settings.batchSize, shouldContinue) {
                let limit = $0
                return try exclusive(connection) {
                    try $0.query(deleteIdempotencyKeysSQL, [idempotencyKeyWindow.inSeconds, limit])
                }.affectedRows
            }
            // On Citus `notifications.idempotency_key` is no key (its index is not unique): nothing to clear there.
            guard form == .singleNode else { return }
            report.clearedIdempotencyKeys += try inBatches(settings.batchSize, shouldContinue) {
                let limit = $0
                return try exclusive(connection) {
                    try $0.query(clearIdempotencyKeysSQL, [idempotencyKeyWindow.inSeconds, limit])
                }.affectedRows
            }
        }
        step("provider tokens") {
            report.prunedProviderTokens = try exclusive(connection) {
                try $0.query(
                    "DELETE FROM provider_tokens WHERE expires_at < now() - make_interval(secs => $1::float8)",
                    [expiredProviderTokenAge.inSeconds])
            }.affectedRows
        }
        step("worker heartbeats") {
            // A schema before migration 0029 has no heartbeats to prune.
            let present = try connection.query("SELECT to_regclass('worker_heartbeats') IS NOT NULL AS present")[0]
                .decode(Bool.self, "present")
            guard present else { return }
            report.prunedWorkerHeartbeats = try exclusive(connection) { try WorkerHeartbeatStore.prune(on: $0) }
        }
        step("fcm project buckets") {
            report.prunedFCMProjectBuckets = try pruneIdleFCMProjectBuckets(on: connection, settings: settings)
        }
        return report
    }

    /// How long an FCM project's bucket (`fcm_project_buckets`, migration 0034) stays once no charge touches it: a
    /// day. A bucket refills whole within a second of its last charge (it holds at most a second's refill), so a
    /// deleted row loses no permit: the next charge of the project makes it again, full, as the first one did. The
    /// day keeps what `status` reads of a project that sends at all (its last hold, the sends held since the row
    /// was made) and spares a daily sender's row the churn.
    public static let idleFCMProjectBucketAge: Duration = .seconds(86_400)

    /// Deletes the buckets no charge touched for ``idleFCMProjectBucketAge`` (`refilled_at` is the last charge).
    ///
    /// `pushizo_fcm_project_charge` makes a missing row (`INSERT ... ON CONFLICT DO NOTHING`) and locks it in the
    /// next statement: a row deleted between the two would leave that charge without a bucket, granting a full
    /// bucket's permits and writing none, and the next charge would make a full one again, so the project could be
    /// granted a bucket's worth (its quota / 61) beyond its quota once. The delete therefore holds SHARE ROW
    /// EXCLUSIVE on the table, which waits for the charges under way (each holds ROW EXCLUSIVE from its insert to
    /// its commit) and makes new ones wait for the delete's few milliseconds; it is taken only when an idle
    /// bucket exists, with `lockTimeout` as every other lock of the run. Nothing on a schema before migration 0034.
    static func pruneIdleFCMProjectBuckets(on connection: PostgresConnection, settings: MaintenanceSettings) throws -> Int {
        let present = try connection.query("SELECT to_regclass('fcm_project_buckets') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return 0 }
        let idleSeconds = idleFCMProjectBucketAge.inSeconds
        // `SELECT 1`, not an empty select list: Citus reads a subquery's result on the coordinator through a
        // column list, and an empty one has none ("a column definition list is required").
        let idle = try connection.query(
            "SELECT EXISTS (SELECT 1 FROM fcm_project_buckets WHERE refilled_at < now() - make_interval(secs => $1::float8)) AS idle",
            [idleSeconds])[0].decode(Bool.self, "idle")
        guard idle else { return 0 }
        return try locked(connection, settings) { connection in
            try connection.execute("LOCK TABLE fcm_project_buckets IN SHARE ROW EXCLUSIVE MODE")
            return try connection.query(
                "DELETE FROM fcm_project_buckets WHERE refilled_at < now() - make_interval(secs => $1::float8)", [idleSeconds]
            ).affectedRows
        }
    }

    /// How long past its expiry a fleet-shared provider token's row stays (a day). A provider refuses the
    /// token after `expires_at` anyway; the day of grace keeps the row of a credential whose workers are merely
    /// between sends, so its generation (the compare-and-swap the fleet replaces it by) is not reset needlessly.
    /// A deleted row is simply minted again when next needed.
    public static let expiredProviderTokenAge: Duration = .seconds(86_400)

    /// How long a producer's `notifications.idempotency_key` stays unique in its app: 30 days from the
    /// notification's `created_at`, the window OneSignal documents for the `idempotency_key` of its create-message
    /// request ("Idempotent API requests"). Past it the maintenance clears the key (``clearIdempotencyKeysSQL``),
    /// so a key is held at least this long and at most one maintenance interval longer.
    public static let idempotencyKeyWindow: Duration = .seconds(30 * 86_400)

    /// Creates the days the ``PartitionPlan`` asks for, then drops the expired partitions, one transaction each.
    static func maintainPartitions(
        on connection: PostgresConnection, settings: MaintenanceSettings, report: inout MaintenanceReport
    ) throws {
        let retentionSeconds = Double(settings.eventRetention.components.seconds)
        let partitions = try connection.query(
            """
            SELECT name, extract(epoch FROM lower_bound)::float8 AS lower_bound,
                   extract(epoch FROM upper_bound)::float8 AS upper_bound, is_default
            FROM pushizo_event_partitions()
            """
        ).map {
            EventPartition(
                name: try $0.decode(String.self, "name"), lowerBound: try $0.decodeIfPresent(Double.self, "lower_bound"),
                upperBound: try $0.decodeIfPresent(Double.self, "upper_bound"), isDefault: try $0.decode(Bool.self, "is_default"))
        }
        let now = try connection.query("SELECT extract(epoch FROM now())::float8 AS now")[0].decode(Double.self, "now")
        // Days whose events wait in DEFAULT (normally none: a bounded look at a table that should be empty).
        let waiting = try connection.query(
            """
            SELECT DISTINCT ((at AT TIME ZONE 'UTC')::date - date '1970-01-01') AS day
            FROM (SELECT at FROM delivery_events_default
                  WHERE at >= now() - make_interval(secs => $1::float8) LIMIT 100000) AS d
            """, [retentionSeconds]
        ).map { try $0.decode(Int.self, "day") }
        let plan = PartitionPlan(
            partitions: partitions, now: now, retentionSeconds: retentionSeconds, daysWithDefaultRows: waiting)
        var failures: [String] = []
        for day in plan.daysToCreate {
            do {
                let name = try locked(connection, settings) {
                    try $0.query("SELECT pushizo_create_event_partition(date '1970-01-01' + $1::integer) AS name", [day])
                        .first?.decodeIfPresent(String.self, "name")
                }
                if let name { report.createdPartitions.append(name) }
            } catch {
                failures.append("creating the partition of day \(day): \(error)")
            }
        }
        for name in plan.partitionsToDrop {
            do {
                try locked(connection, settings) { connection in
                    // The function checks again, under the lock, that it is still an expired partition of
                    // delivery_events, and drops it with the schema owner's rights (migration 0010), so a worker
                    // role without them can run the maintenance.
                    let dropped = try connection.query(
                        "SELECT pushizo_drop_event_partition($1, $2::float8) AS dropped", [name, retentionSeconds]
                    ).first?.decode(Bool.self, "dropped") ?? false
                    if dropped { report.droppedPartitions.append(name) }
                }
            } catch {
                failures.append("dropping \(name): \(error)")
            }
        }
        if !failures.isEmpty {
            throw PostgresError(code: .queryFailed, message: failures.joined(separator: "; "))
        }
    }

    /// Runs `body` in a transaction whose statements wait at most `lockTimeout` for a lock (the run's lock,
    /// behind a transaction-mode pooler, is waited for first, without that limit).
    private static func locked<T>(
        _ connection: PostgresConnection, _ settings: MaintenanceSettings, _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        let milliseconds = max(1, Int(settings.lockTimeout / .milliseconds(1)))
        return try exclusive(connection) { connection in
            try connection.transaction { connection in
                try connection.execute("SET LOCAL lock_timeout = '\(milliseconds)ms'")
                return try body(connection)
            }
        }
    }

    /// Runs `body` as the fleet's only maintenance work: as is under the run's session lock; behind a
    /// transaction-mode pooler in a transaction that first takes ``advisoryLockKey`` as a transaction-level lock.
    private static func exclusive<T>(_ connection: PostgresConnection, _ body: (PostgresConnection) throws -> T) throws -> T {
        guard !connection.poolerMode.keepsSessionState else { return try body(connection) }
        return try connection.transaction { connection in
            _ = try connection.query("SELECT pg_advisory_xact_lock($1)", [advisoryLockKey])
            return try body(connection)
        }
    }

    /// Repeats `batch(limit)` while it affects a whole batch; returns the rows affected in all.
    private static func inBatches(_ limit: Int, _ shouldContinue: () -> Bool, _ batch: (Int) throws -> Int) throws -> Int {
        var total = 0
        while shouldContinue() {
            let affected = try batch(limit)
            total += affected
            if affected < limit { break }
        }
        return total
    }

    /// Deletes up to `$3` grants that no cap window of their app can count any more: older than the app's
    /// longest rule window and than `$1` seconds (the grant retention the reservation keeps, 28 days). A rule
    /// the worker could not read counts as the longest window allowed (`$2`, 366 days), so a malformed setting
    /// never loses a grant a corrected one would count: that includes a `per_seconds` that is no whole number
    /// of 1 ... `$2`, which is compared in `numeric` (a float8 cast of 1e-1000 failed the statement for every
    /// app). An app without caps (`NULL`, `[]`) keeps its grants `$1` seconds, as one with short windows does.
    static let pruneGrantsSQL = """
        WITH keep AS (
            SELECT a.id AS app_id,
                   greatest($1::numeric, coalesce(max(
                       -- No rule (no caps: NULL or []; the column's CHECK allows only arrays): nothing longer.
                       CASE WHEN r.rule IS NULL THEN 0
                            WHEN w.seconds BETWEEN 1 AND $2::numeric AND w.seconds = trunc(w.seconds) THEN w.seconds
                            ELSE $2::numeric END), 0))::float8
                       AS keep_seconds
            FROM apps a
            LEFT JOIN LATERAL jsonb_array_elements(
                CASE WHEN jsonb_typeof(a.frequency_caps) = 'array' THEN a.frequency_caps ELSE '[]'::jsonb END
            ) AS r(rule) ON true
            LEFT JOIN LATERAL (
                SELECT CASE WHEN jsonb_typeof(r.rule) = 'object' AND jsonb_typeof(r.rule -> 'per_seconds') = 'number'
                            THEN (r.rule ->> 'per_seconds')::numeric END AS seconds
            ) AS w ON true
            GROUP BY a.id
        ), doomed AS (
            SELECT g.app_id, g.cap_key, g.notification_id
            FROM frequency_cap_grants g JOIN keep k ON k.app_id = g.app_id
            WHERE g.granted_at < now() - make_interval(secs => $1::float8)
              AND g.granted_at < now() - make_interval(secs => k.keep_seconds)
            LIMIT $3
        )
        DELETE FROM frequency_cap_grants g USING doomed d
        WHERE g.app_id = d.app_id AND g.cap_key = d.cap_key AND g.notification_id = d.notification_id
        """

    /// Deletes up to `$2` finished notifications older than `$1` seconds, with their count deltas. Finished:
    /// `expanded`, `failed` or `canceled`, and no delivery of it left in the queue (so no worker will write
    /// another event for it); its age is from `expanded_at`, else `created_at`. Rows another transaction holds
    /// (an expansion chunk, a producer's update) are skipped until the next run.
    static let pruneNotificationsSQL = """
        WITH doomed AS (
            SELECT n.id FROM notifications n
            WHERE \(finishedNotification)
              AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = n.id)
            LIMIT $2
            FOR UPDATE OF n SKIP LOCKED
        ), counts AS (
            DELETE FROM notification_event_counts c USING doomed WHERE c.notification_id = doomed.id
        )
        DELETE FROM notifications n USING doomed WHERE n.id = doomed.id
        """

    /// Deletes up to `$2` rows of `notification_idempotency_keys` (migration 0037) created more than `$1` seconds
    /// ago, oldest first: the key may then be used again. The notification it named is left as it is.
    static let deleteIdempotencyKeysSQL = """
        DELETE FROM notification_idempotency_keys
        WHERE (app_id, idempotency_key) IN (
            SELECT app_id, idempotency_key FROM notification_idempotency_keys
            WHERE created_at < now() - make_interval(secs => $1::float8)
            ORDER BY created_at
            LIMIT $2)
        """

    /// The notifications' prune on a distributed database, where `FOR UPDATE SKIP LOCKED` runs only on one shard:
    /// batches of up to `batchSize` candidates read without a lock in id order, those with deliveries still queued
    /// (another colocation group: a second read) left out, the rest deleted by id with every condition checked again
    /// (a row changed since its read stays), and their count deltas with them, in one transaction.
    /// - Returns: the notifications deleted.
    static func pruneNotificationsAcrossShards(
        on connection: PostgresConnection, retentionSeconds: Double, batchSize: Int, _ shouldContinue: () -> Bool
    ) throws -> Int {
        var after = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        var pruned = 0
        while shouldContinue() {
            let candidates = try connection.query(
                """
                SELECT n.id FROM notifications n
                WHERE n.id > $3 AND \(finishedNotification)
                ORDER BY n.id
                LIMIT $2
                """, [retentionSeconds, batchSize, after]
            ).map { try $0.decode(UUID.self, "id") }
            guard let last = candidates.last else { break }
            after = last
            let queued = Set(try connection.query(
                "SELECT DISTINCT notification_id FROM deliveries WHERE notification_id = ANY($1::uuid[])", [candidates]
            ).map { try $0.decode(UUID.self, "notification_id") })
            let doomed = candidates.filter { !queued.contains($0) }
            if !doomed.isEmpty {
                pruned += try exclusive(connection) {
                    try $0.transaction { connection in
                        let deleted = try connection.query(
                            """
                            DELETE FROM notifications n
                            WHERE n.id = ANY($2::uuid[]) AND \(finishedNotification)
                            RETURNING n.id
                            """, [retentionSeconds, doomed]
                        ).map { try $0.decode(UUID.self, "id") }
                        _ = try connection.query(
                            "DELETE FROM notification_event_counts WHERE notification_id = ANY($1::uuid[])", [deleted])
                        return deleted.count
                    }
                }
            }
            if candidates.count < batchSize { break }
        }
        return pruned
    }

    /// A notification finished and past the retention (`$1` seconds), as ``pruneNotificationsSQL`` has it: the
    /// condition without the look for queued deliveries.
    static let finishedNotification = """
        n.status IN ('expanded', 'failed', 'canceled')
          AND n.created_at < now() - make_interval(secs => $1::float8)
          AND coalesce(n.expanded_at, n.created_at) < now() - make_interval(secs => $1::float8)
        """

    /// Clears the `idempotency_key` of up to `$2` notifications created more than `$1` seconds ago, oldest first
    /// through `notifications_idempotency_key_age` (migration 0033): the key leaves the unique index, which then
    /// holds only the window's keys, and the producer may use it again. Nothing else of the row changes, so a
    /// notification still pending, expanding or sending goes on as before. Rows another transaction holds (an
    /// expansion chunk, a producer's update) are skipped until the next batch or run.
    static let clearIdempotencyKeysSQL = """
        WITH expired AS (
            SELECT id FROM notifications
            WHERE idempotency_key IS NOT NULL AND created_at < now() - make_interval(secs => $1::float8)
            ORDER BY created_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        )
        UPDATE notifications n SET idempotency_key = NULL FROM expired WHERE n.id = expired.id
        """
}
