import Foundation
import Postgres

/// The fleet's current queue sample as one worker found it in `queue_depth_samples`.
public struct SharedQueueDepth: Sendable, Equatable {
    /// The counts (relative to ``sampledAt``: `oldestDueAge` is the age then).
    public var sample: QueueDepthSample
    /// When the sample was measured (the database's clock).
    public var sampledAt: Date
    /// Whether this call measured it (it was due and this worker took the turn) rather than read it.
    public var measuredHere: Bool
}

extension QueueStore {
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
}
