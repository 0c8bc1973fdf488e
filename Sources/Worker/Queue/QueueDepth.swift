import Foundation
import Postgres

/// The queue as the whole fleet sees it, for the `pushizo_queue_*` and `pushizo_channels_paused` gauges:
/// deliveries by provider and state, the oldest due delivery's age, and the paused channels.
///
/// States follow the claim statement (``QueueStore/claimSQL(picking:limit:)``): **due** rows have `run_at <= now()`
/// (including leases that ran out, which any worker may rescue); **leased** rows are under a live lease
/// (`leased_by` set, `run_at` = the lease's end in the future); **deferred** rows wait for a later `run_at`
/// with no lease (retries, quiet hours, paused channels).
public struct QueueDepthSample: Sendable, Equatable, Codable {
    public struct Depth: Sendable, Equatable, Codable {
        public var due = 0
        public var deferred = 0
        public var leased = 0
        /// Seconds since the oldest due delivery became due (0 when none is).
        public var oldestDueAge: Double = 0

        enum CodingKeys: String, CodingKey {
            case due, deferred, leased, oldestDueAge = "oldest_due_age"
        }
    }

    /// By provider (`apns`, `fcm`, `webpush`; `none` for rows whose subscription has another platform).
    public var depth: [String: Depth] = [:]
    /// Paused channels by provider.
    public var pausedChannels: [String: Int] = [:]
    /// The share of the queue's table blocks the counts were taken from (0 < x <= 1): 1 when every row was
    /// counted; below 1 on a queue larger than ``QueueStore/exactQueueSampleRows``, whose counts are then
    /// estimates scaled from a block sample and whose `oldestDueAge` is the oldest due row in the sample (a
    /// lower bound). Absent in samples stored by workers that predate it (read as 1).
    public var sampledFraction: Double?

    public init(depth: [String: Depth] = [:], pausedChannels: [String: Int] = [:], sampledFraction: Double? = nil) {
        self.depth = depth
        self.pausedChannels = pausedChannels
        self.sampledFraction = sampledFraction
    }

    enum CodingKeys: String, CodingKey {
        case depth, pausedChannels = "paused_channels", sampledFraction = "sampled_fraction"
    }
}

extension QueueStore {
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
    /// `app_channels` (one row per app and provider), always exactly.
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
        let rows = try connection.query(
            """
            SELECT CASE s.platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush'
                        ELSE 'none' END AS provider,
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
            GROUP BY 1
            """)
        func scaled(_ count: Int) -> Int { fraction < 1 ? Int((Double(count) / fraction).rounded()) : count }
        for row in rows {
            sample.depth[try row.decode(String.self, "provider")] = QueueDepthSample.Depth(
                due: scaled(try row.decode(Int.self, "due")), deferred: scaled(try row.decode(Int.self, "deferred")),
                leased: scaled(try row.decode(Int.self, "leased")),
                oldestDueAge: try row.decode(Double.self, "oldest_due_age"))
        }
        sample.sampledFraction = fraction
        let paused = try connection.query(
            "SELECT provider, count(*) AS n FROM app_channels WHERE paused_until > now() GROUP BY provider")
        for row in paused {
            sample.pausedChannels[try row.decode(String.self, "provider")] = try row.decode(Int.self, "n")
        }
        return sample
    }
}
