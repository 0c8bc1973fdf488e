import Foundation

/// The queue as the whole fleet sees it, for the `pushizo_queue_*` and `pushizo_channels_paused` gauges:
/// deliveries by provider and state, the oldest due delivery's age, and the paused channels.
///
/// States follow the claim statement (``ClaimStore/claimSQL(picking:limit:)``): **due** rows have `run_at <= now()`
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
    /// counted; below 1 on a queue larger than ``QueueDepthStore/exactQueueSampleRows``, whose counts are then
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
