import Foundation

/// The queue as the whole fleet sees it, for the `pushizo_queue_*` gauges and the pause gauges
/// (`pushizo_channels_paused`, `pushizo_apps_paused`, `pushizo_fleet_paused`): deliveries by provider and state,
/// the oldest due delivery's age, the paused channels, apps and fleet.
///
/// States follow the claim statement (``ClaimStore/claimSQL(picking:limit:lane:)``): **due** rows have `run_at <= now()`
/// (including leases that ran out, which any worker may rescue) and no operator's pause holds them; **held** rows
/// are due too, but an operator's pause of their app or of the whole fleet keeps every claim off them
/// (``ClaimPauses``) until `resume` or the pause's end; **leased** rows are under a live lease (`leased_by` set,
/// `run_at` = the lease's end in the future); **deferred** rows wait for a later `run_at` with no lease (retries,
/// quiet hours, paused channels).
public struct QueueDepthSample: Sendable, Equatable, Codable {
    public struct Depth: Sendable, Equatable, Codable {
        public var due = 0
        public var deferred = 0
        public var leased = 0
        /// Seconds since the oldest due delivery became due (0 when none is); held rows are not counted.
        public var oldestDueAge: Double = 0
        /// Due rows an operator's pause of their app or of the fleet holds. Absent in samples stored by workers
        /// that predate it (read as 0: their `due` counts these rows).
        public var held = 0

        enum CodingKeys: String, CodingKey {
            case due, deferred, leased, oldestDueAge = "oldest_due_age", held
        }
    }

    /// By provider (`apns`, `fcm`, `webpush`; `none` for rows whose subscription has another platform).
    public var depth: [String: Depth] = [:]
    /// Paused channels by provider, whoever paused them (`app_channels.paused_until` in the future).
    public var pausedChannels: [String: Int] = [:]
    /// The channels of ``pausedChannels`` an operator paused (`paused_reason = 'operator'`), by provider; the rest
    /// are the provider's pauses (its refusal of the app's credentials or settings). `nil` in samples stored by
    /// workers that predate it.
    public var operatorPausedChannels: [String: Int]?
    /// Apps an operator paused (`apps.paused_until` in the future). `nil` in samples of workers that predate it.
    public var pausedApps: Int?
    /// Whether an operator paused the whole fleet (`fleet_settings.paused_until` in the future). `nil` in samples
    /// of workers that predate it.
    public var fleetPaused: Bool?
    /// The share of the queue's table blocks the counts were taken from (0 < x <= 1): 1 when every row was
    /// counted; below 1 on a queue larger than ``QueueDepthStore/exactQueueSampleRows``, whose counts are then
    /// estimates scaled from a block sample and whose `oldestDueAge` is the oldest due row in the sample (a
    /// lower bound). Absent in samples stored by workers that predate it (read as 1).
    public var sampledFraction: Double?
    /// Live Activity channel rows and channel sends, fleet-wide, counted exactly (docs/live-activity-channels.md).
    /// `nil` in samples of workers that predate it and on a schema before migration 0035.
    public var liveActivityChannels: LiveActivityChannelCounts?

    /// The Live Activity channel rows behind their revision or refused, and the channel sends by queue state (as
    /// ``Depth`` counts deliveries).
    public struct LiveActivityChannelCounts: Sendable, Equatable, Codable {
        /// Rows behind their revision (`reconciled_revision < revision`).
        public var pending = 0
        /// Rows refused for good (`state = 'failed'`), no newer change pending.
        public var failed = 0
        public var sendsDue = 0
        public var sendsDeferred = 0
        public var sendsLeased = 0

        public init() {}

        enum CodingKeys: String, CodingKey {
            case pending, failed, sendsDue = "sends_due", sendsDeferred = "sends_deferred", sendsLeased = "sends_leased"
        }
    }

    public init(depth: [String: Depth] = [:], pausedChannels: [String: Int] = [:], sampledFraction: Double? = nil) {
        self.depth = depth
        self.pausedChannels = pausedChannels
        self.sampledFraction = sampledFraction
    }

    enum CodingKeys: String, CodingKey {
        case depth, pausedChannels = "paused_channels", sampledFraction = "sampled_fraction"
        case operatorPausedChannels = "operator_paused_channels", pausedApps = "paused_apps", fleetPaused = "fleet_paused"
        case liveActivityChannels = "live_activity_channels"
    }
}

extension QueueDepthSample.Depth {
    /// Decodes a stored depth; `held` may be absent (a sample stored by a worker that predates it).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        due = try container.decode(Int.self, forKey: .due)
        deferred = try container.decode(Int.self, forKey: .deferred)
        leased = try container.decode(Int.self, forKey: .leased)
        oldestDueAge = try container.decode(Double.self, forKey: .oldestDueAge)
        held = try container.decodeIfPresent(Int.self, forKey: .held) ?? 0
    }
}
