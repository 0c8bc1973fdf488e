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

    enum CodingKeys: String, CodingKey {
        case depth, pausedChannels = "paused_channels"
    }
}

extension QueueStore {
    /// Longest a sample may take before PostgreSQL cancels it (`statement_timeout`, milliseconds).
    public static let queueSampleTimeoutMilliseconds = 30_000

    /// Counts the queue on `connection`, inside the caller's transaction.
    ///
    /// Cost: exact counts need one pass over `deliveries` joined to `subscriptions` by primary key (the
    /// provider is the subscription's platform): seconds on a queue of a million rows. The caller samples in
    /// the background, less often when a sample is slow, never per scrape, and once for the whole fleet
    /// (``sharedQueueDepth(on:interval:dutyCycle:sampler:timeoutMilliseconds:)``); the paused channels come from `app_channels`
    /// (one row per app and provider).
    /// - Throws: ``PostgresError``.
    static func measureQueueDepth(on connection: PostgresConnection) throws -> QueueDepthSample {
        var sample = QueueDepthSample()
        let rows = try connection.query(
            """
            SELECT CASE s.platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush'
                        ELSE 'none' END AS provider,
                   count(*) FILTER (WHERE d.run_at <= now()) AS due,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NULL) AS deferred,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NOT NULL) AS leased,
                   coalesce(extract(epoch FROM now() - min(d.run_at) FILTER (WHERE d.run_at <= now())), 0)::float8
                       AS oldest_due_age
            FROM deliveries d LEFT JOIN subscriptions s ON s.id = d.subscription_id
            GROUP BY 1
            """)
        for row in rows {
            sample.depth[try row.decode(String.self, "provider")] = QueueDepthSample.Depth(
                due: try row.decode(Int.self, "due"), deferred: try row.decode(Int.self, "deferred"),
                leased: try row.decode(Int.self, "leased"), oldestDueAge: try row.decode(Double.self, "oldest_due_age"))
        }
        let paused = try connection.query(
            "SELECT provider, count(*) AS n FROM app_channels WHERE paused_until > now() GROUP BY provider")
        for row in paused {
            sample.pausedChannels[try row.decode(String.self, "provider")] = try row.decode(Int.self, "n")
        }
        return sample
    }
}
