import DeliveryCore
import Foundation
import Postgres

/// The fleet's worker heartbeats (`worker_heartbeats`, migration 0029; docs/status.md, "Workers"): each
/// `pushizo-worker run` process writes one row under a UUID it made at start, refreshes it every heartbeat interval
/// with the database's `now()`, and marks it stopped when it stops cleanly. A row whose process stopped writing
/// (killed, hung, cut off from the database) is *stale* once ``staleAfterIntervals`` of its own intervals have
/// passed; the maintenance deletes rows not seen for ``pruneAge``.
public enum WorkerHeartbeatStore {
    /// One heartbeat: what the process says about itself.
    public struct Beat: Sendable, Equatable {
        /// The process's UUID, made at start (a restart is a new row).
        public var workerID: UUID
        /// What the process writes into `deliveries.leased_by` (`PUSHIZO_WORKER_ID`).
        public var leasedBy: String
        /// The host's name (`gethostname(2)`).
        public var host: String
        /// The process id on that host.
        public var pid: Int32
        /// ``BuildInfo``'s `version` and `commit`.
        public var version: String
        public var commit: String
        /// `PUSHIZO_ROLES`, sorted.
        public var roles: [String]
        /// `PUSHIZO_HEARTBEAT_INTERVAL`: how often the row is written.
        public var interval: Duration
        /// Deliveries claimed whose sends have not ended.
        public var inFlight: Int
        /// Deliveries claimed (or leased at insert) per minute, over the last minute.
        public var claimsPerMinute: Double
        /// Provider exchanges ended per minute, over the last minute.
        public var sendsPerMinute: Double
        /// The process was asked to stop and is finishing its in-flight sends.
        public var stopping: Bool

        public init(
            workerID: UUID, leasedBy: String, host: String, pid: Int32, version: String, commit: String,
            roles: [String], interval: Duration, inFlight: Int = 0, claimsPerMinute: Double = 0,
            sendsPerMinute: Double = 0, stopping: Bool = false
        ) {
            self.workerID = workerID
            self.leasedBy = leasedBy
            self.host = host
            self.pid = pid
            self.version = version
            self.commit = commit
            self.roles = roles
            self.interval = interval
            self.inFlight = inFlight
            self.claimsPerMinute = claimsPerMinute
            self.sendsPerMinute = sendsPerMinute
            self.stopping = stopping
        }
    }

    /// A row is live while it was seen within this many of its own heartbeat intervals: one late heartbeat (a
    /// slow statement, a busy host) does not make a worker look dead, three missed ones do.
    public static let staleAfterIntervals = 3

    /// How long the rows of stopped or stale workers stay before the maintenance deletes them (a day): long
    /// enough to see yesterday's deploys and crashes in `status`.
    public static let pruneAge: Duration = .seconds(86_400)

    /// The SQL condition of a live row of `worker_heartbeats` (alias `w`): not stopped and seen within
    /// ``staleAfterIntervals`` intervals of the statement's `now()`.
    static let liveCondition =
        "w.stopped_at IS NULL AND w.last_seen_at >= now() - make_interval(secs => \(staleAfterIntervals) * w.heartbeat_seconds)"

    /// Writes this process's row (inserted on the first beat, refreshed after): `last_seen_at` is the database's
    /// `now()`; `stopping_at` is set on the first beat with ``Beat/stopping`` and kept after.
    /// - Returns: the live workers of the fleet now (this one included): rows passing ``liveCondition``.
    /// - Throws: ``PostgresError``.
    public static func beat(on connection: PostgresConnection, _ beat: Beat) throws -> Int {
        let rows = try connection.preparedQuery(
            """
            WITH me AS (
                INSERT INTO worker_heartbeats AS w
                    (worker_id, leased_by, host, pid, version, commit, roles, heartbeat_seconds, in_flight,
                     claims_per_minute, sends_per_minute, stopping_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7::text[], $8, $9, $10, $11, CASE WHEN $12 THEN now() END)
                ON CONFLICT (worker_id) DO UPDATE
                SET last_seen_at = now(), heartbeat_seconds = excluded.heartbeat_seconds, in_flight = excluded.in_flight,
                    claims_per_minute = excluded.claims_per_minute, sends_per_minute = excluded.sends_per_minute,
                    stopping_at = coalesce(w.stopping_at, excluded.stopping_at)
                RETURNING w.worker_id
            )
            -- The statement's snapshot does not see the row it writes: the others, plus this one.
            SELECT 1 + (SELECT count(*) FROM worker_heartbeats w
                        WHERE \(liveCondition) AND w.worker_id <> (SELECT worker_id FROM me))::integer AS live
            """,
            [
                beat.workerID, beat.leasedBy, beat.host, beat.pid, beat.version, beat.commit, beat.roles,
                beat.interval.inSeconds, beat.inFlight, beat.claimsPerMinute, beat.sendsPerMinute, beat.stopping,
            ])
        return try rows[0].decode(Int.self, "live")
    }

    /// Marks this process's row stopped (a clean stop: its sends ended and their completions were written or
    /// given up); the row stays for ``pruneAge``.
    /// - Throws: ``PostgresError``.
    public static func stopped(on connection: PostgresConnection, workerID: UUID, inFlight: Int) throws {
        _ = try connection.query(
            """
            UPDATE worker_heartbeats
            SET stopped_at = now(), last_seen_at = now(), stopping_at = coalesce(stopping_at, now()),
                in_flight = $2, claims_per_minute = 0, sends_per_minute = 0
            WHERE worker_id = $1
            """, [workerID, inFlight])
    }

    /// Deletes the rows not seen for `age` (stopped or stale workers; a live worker writes its row every few
    /// seconds). Part of the maintenance (``DataLifecycle``).
    /// - Returns: how many rows were deleted.
    /// - Throws: ``PostgresError``.
    public static func prune(on connection: PostgresConnection, olderThan age: Duration = pruneAge) throws -> Int {
        try connection.query(
            "DELETE FROM worker_heartbeats WHERE last_seen_at < now() - make_interval(secs => $1::float8)",
            [age.inSeconds]
        ).affectedRows
    }
}
