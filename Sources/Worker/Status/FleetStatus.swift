import Foundation
import Postgres

/// What `pushizo-worker status` shows: the fleet as the database sees it at one instant (one read-only
/// snapshot, so every figure is taken at the same `takenAt`). Built by ``FleetStatusStore``, printed by
/// ``FleetStatusRenderer``; its JSON form is the stable schema documented in docs/status.md (keys in
/// snake_case, instants as ISO 8601 UTC, ``schemaVersion`` bumped on any incompatible change).
public struct FleetStatus: Sendable, Equatable, Codable {
    /// The version of the JSON schema (docs/status.md). 1 so far.
    public var schemaVersion: Int = 1
    /// The database's `now()` of the snapshot.
    public var takenAt: Date
    public var queue: Queue
    /// Deliveries under a lease, per `deliveries.leased_by`, ordered by worker id.
    public var leases: [WorkerLeases]
    /// Event counts over the last 1, 5 and 15 minutes, in that order.
    public var events: [EventWindow]
    public var expansion: Expansion
    /// Channels with `app_channels.paused_until` in the future, latest first.
    public var pausedChannels: [PausedChannel]
    /// Remarks on how figures were obtained (say a missing index), already plain text.
    public var notes: [String]
    /// Apps with `apps.max_sends_per_second` (docs/throttle.md), by app id; empty before migration 0012.
    public var throttledApps: [ThrottledApp] = []
    /// The PostgreSQL server the snapshot was read from (libpq's `PQhost`, `PQport`): with a multi-host
    /// `PUSHIZO_DATABASE_URL` and `target_session_attrs=read-write`, the primary the fleet's connections reach
    /// too. Nil when not known.
    public var server: PostgresServerAddress? = nil
    /// The app every figure is narrowed to (`status --app`); nil for the whole fleet.
    public var app: UUID? = nil
    /// The fleet's operator pause (`fleet_settings`, migration 0028) while it lasts: no claims anywhere.
    public var fleetPause: Pause? = nil
    /// Apps paused by an operator (`apps.paused_until` ahead), latest end first; only ``app`` when narrowed.
    public var pausedApps: [PausedApp] = []
    /// The names (`apps.name`, producer data: untrusted, cut to ``FleetStatusStore/appNameLength`` characters) of
    /// the apps the report lists elsewhere, by app id; apps with an empty name are left out.
    public var appNames: [AppName] = []

    /// The name of `app` in ``appNames``, nil when it has none.
    public func name(of app: UUID) -> String? {
        appNames.first { $0.appID == app }?.name
    }

    /// FCM projects their fleet-wide bucket (migration 0034; docs/fcm.md, "Project quota") held back sends of in
    /// the last minute, by project id, at most ``FleetStatusStore/listedRows``; narrowed to an app, the projects its
    /// fcm channel names. Empty before migration 0034.
    public var heldProjects: [HeldProject] = []

    /// Live Activity broadcast channels (migration 0035, docs/live-activity-channels.md): the rows' reconciliation
    /// with APNs and the channel sends queued; narrowed to an app, its rows. Nil before migration 0035.
    public var liveActivityChannels: LiveActivityChannels? = nil

    /// The worker processes by their heartbeats (`worker_heartbeats`, migration 0029): live and stopping ones
    /// first (by host and pid), then stale ones, then stopped ones (latest first), at most
    /// ``FleetStatusStore/listedRows``. Nil when narrowed to an app (workers are not an app's) or before
    /// migration 0029.
    public var workers: [Worker]? = nil

    public init(
        takenAt: Date, queue: Queue, leases: [WorkerLeases], events: [EventWindow], expansion: Expansion,
        pausedChannels: [PausedChannel], notes: [String] = [], throttledApps: [ThrottledApp] = [],
        server: PostgresServerAddress? = nil
    ) {
        self.takenAt = takenAt
        self.queue = queue
        self.leases = leases
        self.events = events
        self.expansion = expansion
        self.pausedChannels = pausedChannels
        self.notes = notes
        self.throttledApps = throttledApps
        self.server = server
    }

    /// A count and how it was obtained.
    public struct Figure: Sendable, Equatable, Codable {
        /// The count (an estimate when ``estimated``).
        public var value: Int64
        /// `false`: counted row by row. `true`: extrapolated from a sample or the planner's row estimate.
        public var estimated: Bool
        /// When counting stopped at a bound: the number counted, a floor the true count exceeds.
        public var countedAtLeast: Int64?

        public init(value: Int64, estimated: Bool = false, countedAtLeast: Int64? = nil) {
            self.value = value
            self.estimated = estimated
            self.countedAtLeast = countedAtLeast
        }

        public static func exact(_ value: Int64) -> Figure { Figure(value: value) }
        public static func estimate(_ value: Int64, countedAtLeast: Int64? = nil) -> Figure {
            Figure(value: value, estimated: true, countedAtLeast: countedAtLeast)
        }
    }

    /// The `deliveries` queue. A row is *due* when `run_at <= now()` and no operator's pause holds it (claimable
    /// now, including rows whose lease ran out), *held* when it is due but an operator's pause of its app or of
    /// the whole fleet keeps claims off it (as `pushizo_queue_deliveries{state="held"}` counts it), *leased* when
    /// a worker holds it (`leased_by` set and `run_at`, the lease's expiry, in the future) and *deferred*
    /// otherwise (waiting for a retry, quiet hours or a paused channel).
    public struct Queue: Sendable, Equatable, Codable {
        public var due: Figure
        /// Due rows an operator's pause holds: every due row while the fleet is paused, else the paused apps'.
        public var held: Figure
        public var deferred: Figure
        public var leased: Figure
        /// Per provider (`apns`, `fcm`, `webpush`, always listed, then `other` for subscriptions whose
        /// platform maps to none, when there are any).
        public var providers: [ProviderDepth]
        /// `run_at` of the oldest due delivery (held ones left out); nil when nothing is due.
        public var oldestDueAt: Date?
        /// `takenAt - oldestDueAt` in seconds (the queue lag); nil when nothing is due. Held rows do not count:
        /// they wait for `resume`, not for a claim.
        public var lagSeconds: Double?
        /// Due rows whose lease ran out (`leased_by` still set): claims of workers that died or stalled.
        public var expiredLeases: Int64
        /// Deferred rows waiting for their subscriber's local time (`delivery_time_of_day`,
        /// docs/local-time-delivery.md), counted up to the count bound; nil on a schema before migration
        /// 0011, which has no local-time delivery.
        public var scheduledByLocalTime: Figure?

        public init(
            due: Figure, deferred: Figure, leased: Figure, providers: [ProviderDepth], oldestDueAt: Date?,
            lagSeconds: Double?, expiredLeases: Int64, scheduledByLocalTime: Figure? = nil, held: Figure = .exact(0)
        ) {
            self.due = due
            self.held = held
            self.deferred = deferred
            self.leased = leased
            self.providers = providers
            self.oldestDueAt = oldestDueAt
            self.lagSeconds = lagSeconds
            self.expiredLeases = expiredLeases
            self.scheduledByLocalTime = scheduledByLocalTime
        }
    }

    /// The queue of one provider (from the subscription's platform: ios -> apns, android -> fcm, web -> webpush).
    public struct ProviderDepth: Sendable, Equatable, Codable {
        public var provider: String
        public var due: Figure
        /// Due rows an operator's pause holds (``Queue/held``).
        public var held: Figure
        public var deferred: Figure
        public var leased: Figure

        public init(provider: String, due: Figure, deferred: Figure, leased: Figure, held: Figure = .exact(0)) {
            self.provider = provider
            self.due = due
            self.held = held
            self.deferred = deferred
            self.leased = leased
        }
    }

    /// The leases of one worker id (exact counts).
    public struct WorkerLeases: Sendable, Equatable, Codable {
        /// `deliveries.leased_by` as stored (the worker's `PUSHIZO_WORKER_ID`).
        public var workerID: String
        /// Deliveries it holds now.
        public var leased: Int64
        /// The earliest expiry (`run_at`) among them; nil when it holds none.
        public var oldestLeaseExpiresAt: Date?
        /// Deliveries it claimed whose lease ran out without a completion (due again).
        public var expired: Int64

        public init(workerID: String, leased: Int64, oldestLeaseExpiresAt: Date?, expired: Int64) {
            self.workerID = workerID
            self.leased = leased
            self.oldestLeaseExpiresAt = oldestLeaseExpiresAt
            self.expired = expired
        }
    }

    /// A worker process as its last heartbeat described it (docs/status.md, "Workers").
    public struct Worker: Sendable, Equatable, Codable {
        /// What the heartbeat says of the process at ``FleetStatus/takenAt``.
        public enum State: String, Sendable, Equatable, Codable {
            /// Seen within ``WorkerHeartbeatStore/staleAfterIntervals`` of its heartbeat intervals.
            case live
            /// Live, and asked to stop: finishing its in-flight sends.
            case stopping
            /// Not stopped, and not seen for ``WorkerHeartbeatStore/staleAfterIntervals`` intervals: killed,
            /// crashed, hung or cut off from the database. Its leases are rescued as they run out.
            case stale
            /// Stopped cleanly (its sends ended, their completions written or given up).
            case stopped
        }

        /// The process's UUID, made at its start.
        public var workerID: UUID
        /// What it writes into `deliveries.leased_by` (`PUSHIZO_WORKER_ID`): the name ``WorkerLeases`` lists.
        public var leasedBy: String
        /// The host's name as the process read it (`gethostname(2)`).
        public var host: String
        /// The process id on that host.
        public var pid: Int32
        /// The release it runs (`VERSION`, as `--version` prints it).
        public var version: String
        /// git's abbreviated commit it was built from (`-dirty`, `unknown` as `--version` prints them).
        public var commit: String
        /// `PUSHIZO_ROLES`.
        public var roles: [String]
        /// What its heartbeat says at ``FleetStatus/takenAt``.
        public var state: State
        /// The database's `now()` of its first heartbeat.
        public var startedAt: Date
        /// The database's `now()` of its last heartbeat.
        public var lastSeenAt: Date
        /// `takenAt - lastSeenAt`, seconds.
        public var lastSeenSecondsAgo: Double
        /// `PUSHIZO_HEARTBEAT_INTERVAL` of the process, seconds.
        public var heartbeatSeconds: Double
        /// Deliveries it had claimed and not finished sending, at its last heartbeat.
        public var inFlight: Int64
        /// Deliveries claimed (or leased at insert) per minute over the minute before its last heartbeat; in its
        /// first minute, the rate since its first heartbeat scaled to a minute (``PerMinuteRate``).
        public var claimsPerMinute: Double
        /// Provider exchanges ended per minute, taken as ``claimsPerMinute`` is.
        public var sendsPerMinute: Double
        /// When it was asked to stop; nil while it was not.
        public var stoppingAt: Date?
        /// When it stopped cleanly; nil otherwise.
        public var stoppedAt: Date?

        public init(
            workerID: UUID, leasedBy: String, host: String, pid: Int32, version: String, commit: String, roles: [String],
            state: State, startedAt: Date, lastSeenAt: Date, lastSeenSecondsAgo: Double, heartbeatSeconds: Double,
            inFlight: Int64, claimsPerMinute: Double, sendsPerMinute: Double, stoppingAt: Date?, stoppedAt: Date?
        ) {
            self.workerID = workerID
            self.leasedBy = leasedBy
            self.host = host
            self.pid = pid
            self.version = version
            self.commit = commit
            self.roles = roles
            self.state = state
            self.startedAt = startedAt
            self.lastSeenAt = lastSeenAt
            self.lastSeenSecondsAgo = lastSeenSecondsAgo
            self.heartbeatSeconds = heartbeatSeconds
            self.inFlight = inFlight
            self.claimsPerMinute = claimsPerMinute
            self.sendsPerMinute = sendsPerMinute
            self.stoppingAt = stoppingAt
            self.stoppedAt = stoppedAt
        }
    }

    /// `delivery_events` written in the last ``minutes`` minutes (`at > now() - minutes`).
    public struct EventWindow: Sendable, Equatable, Codable {
        public var minutes: Int
        /// `sent` events: deliveries the provider accepted (Live Activity channel sends included).
        public var sent: Figure
        /// `failed` events: deliveries given up (terminal; channel sends included).
        public var failed: Figure
        /// `retrying` events: attempts that failed and will be retried (channel sends included).
        public var retrying: Figure
        /// Of ``sent``, the Live Activity channel sends (one broadcast each, `subscription_id` NULL) APNs accepted.
        /// Nil in reports of workers that predate it.
        public var channelSent: Figure? = nil
        /// Of ``failed``, the Live Activity channel sends given up. Nil in reports of workers that predate it.
        public var channelFailed: Figure? = nil

        public init(minutes: Int, sent: Figure, failed: Figure, retrying: Figure) {
            self.minutes = minutes
            self.sent = sent
            self.failed = failed
            self.retrying = retrying
        }
    }

    /// Notifications not yet fully expanded into deliveries.
    public struct Expansion: Sendable, Equatable, Codable {
        /// `status = 'pending'` (not started; includes those whose `send_after` lies ahead).
        public var pending: Figure
        /// `status = 'expanding'` (at least one chunk committed).
        public var expanding: Figure
        /// The expanding ones, least recently served first, at most ``FleetStatusStore/listedNotifications``.
        public var notifications: [ExpandingNotification]

        public init(pending: Figure, expanding: Figure, notifications: [ExpandingNotification]) {
            self.pending = pending
            self.expanding = expanding
            self.notifications = notifications
        }
    }

    /// One notification being expanded and how far it got.
    public struct ExpandingNotification: Sendable, Equatable, Codable {
        public var id: UUID
        public var appID: UUID
        /// Deliveries created so far (`notifications.targeted_count`, exact).
        public var expanded: Int64
        /// How far the keyset cursor (`expansion_cursor`) is through the app's active subscription ids, 0...1
        /// (estimated: assumes ids spread evenly, as random UUIDs do); nil before the first chunk.
        public var progress: Double?
        /// `expanded / progress`: the audience the notification is heading for (estimated); nil while
        /// progress is unknown or under 1%.
        public var audienceEstimate: Int64?
        /// When its last chunk committed (`expansion_touched_at`).
        public var lastChunkAt: Date?

        public init(
            id: UUID, appID: UUID, expanded: Int64, progress: Double?, audienceEstimate: Int64?, lastChunkAt: Date?
        ) {
            self.id = id
            self.appID = appID
            self.expanded = expanded
            self.progress = progress
            self.audienceEstimate = audienceEstimate
            self.lastChunkAt = lastChunkAt
        }
    }

    /// An app with a send-rate limit (docs/throttle.md) and its token bucket at ``FleetStatus/takenAt``.
    public struct ThrottledApp: Sendable, Equatable, Codable {
        public var appID: UUID
        /// `apps.max_sends_per_second`: permits per second, fleet-wide.
        public var maxSendsPerSecond: Double
        /// The bucket's capacity in permits (`pushizo_send_burst`): the most sends above the rate.
        public var burst: Double
        /// Permits in the bucket now (refilled to ``FleetStatus/takenAt``, capped at ``burst``).
        public var permits: Double
        /// The app's due deliveries (counted up to a bound: ``Figure/countedAtLeast`` when it was reached).
        public var due: Figure

        public init(appID: UUID, maxSendsPerSecond: Double, burst: Double, permits: Double, due: Figure) {
            self.appID = appID
            self.maxSendsPerSecond = maxSendsPerSecond
            self.burst = burst
            self.permits = permits
            self.due = due
        }
    }

    /// Live Activity broadcast channels at one instant: how far their rows' reconciliation with APNs has come, and
    /// the channel sends waiting in `live_activity_channel_sends` (docs/live-activity-channels.md). Counted exactly.
    public struct LiveActivityChannels: Sendable, Equatable, Codable {
        /// Rows behind their revision (`reconciled_revision < revision`): a change the worker has not yet made at
        /// APNs (new rows, `absent` not yet deleted, changes retried after a transient answer).
        public var pending: Int64
        /// Rows APNs refused for good (`state = 'failed'`, no newer change pending).
        public var failed: Int64
        /// Rows whose channel exists at APNs (`state = 'active'`, no newer change pending).
        public var active: Int64
        /// Channel sends due now (a lease that ran out included).
        public var sendsDue: Int64
        /// Channel sends waiting for a later attempt (a retry, a channel not yet created).
        public var sendsDeferred: Int64
        /// Channel sends a worker holds now.
        public var sendsLeased: Int64
        /// The failed rows, latest first, at most ``FleetStatusStore/listedRows``.
        public var failedChannels: [FailedChannel]

        public init(
            pending: Int64, failed: Int64, active: Int64, sendsDue: Int64, sendsDeferred: Int64, sendsLeased: Int64,
            failedChannels: [FailedChannel]
        ) {
            self.pending = pending
            self.failed = failed
            self.active = active
            self.sendsDue = sendsDue
            self.sendsDeferred = sendsDeferred
            self.sendsLeased = sendsLeased
            self.failedChannels = failedChannels
        }

        /// Whether there is anything to show: a row pending or failed, or a send queued.
        public var isIdle: Bool {
            pending == 0 && failed == 0 && sendsDue == 0 && sendsDeferred == 0 && sendsLeased == 0
        }
    }

    /// A Live Activity channel row APNs refused for good.
    public struct FailedChannel: Sendable, Equatable, Codable {
        public var appID: UUID
        /// The producer's name of the channel (untrusted text).
        public var name: String
        /// `error_reason` (a ``DeliveryReason`` as stored, e.g. `cannot_create_channel_config`).
        public var reason: String?
        /// When the row last changed (`updated_at`).
        public var failedAt: Date

        public init(appID: UUID, name: String, reason: String?, failedAt: Date) {
            self.appID = appID
            self.name = name
            self.reason = reason
            self.failedAt = failedAt
        }
    }

    /// An FCM project whose bucket held sends back in the minute before ``FleetStatus/takenAt``.
    public struct HeldProject: Sendable, Equatable, Codable {
        /// The Firebase project ID the apps' fcm channels name.
        public var project: String
        /// The quota the bucket applies, messages per minute (the smallest the project's channels set, else
        /// Firebase's default, 600,000).
        public var quotaPerMinute: Double
        /// Permits in the bucket now (refilled to ``FleetStatus/takenAt``; at most quota / 61).
        public var permits: Double
        /// When a charge last granted less than it was asked.
        public var heldAt: Date
        /// Sends the bucket held back, in all (each hold of a send counts once).
        public var heldDeliveries: Int64

        public init(project: String, quotaPerMinute: Double, permits: Double, heldAt: Date, heldDeliveries: Int64) {
            self.project = project
            self.quotaPerMinute = quotaPerMinute
            self.permits = permits
            self.heldAt = heldAt
            self.heldDeliveries = heldDeliveries
        }
    }

    /// An operator's pause (docs/operations.md, "Operator commands"): its end (`Date.distantFuture` for
    /// PostgreSQL's `infinity`, until resumed) and reason.
    public struct Pause: Sendable, Equatable, Codable {
        public var until: Date
        public var reason: String?
        /// The operator's `--note` of the pause in force (`operator_actions.reason`), when the reason is `operator`.
        public var note: String? = nil

        public init(until: Date, reason: String?) {
            self.until = until
            self.reason = reason
        }
    }

    /// An app paused by an operator (`apps.paused_until`, `paused_reason`): none of its deliveries is claimed.
    public struct PausedApp: Sendable, Equatable, Codable {
        public var appID: UUID
        public var pausedUntil: Date
        public var reason: String?
        /// The operator's `--note` of the pause in force (`operator_actions.reason`), when the reason is `operator`.
        public var note: String? = nil

        public init(appID: UUID, pausedUntil: Date, reason: String?) {
            self.appID = appID
            self.pausedUntil = pausedUntil
            self.reason = reason
        }
    }

    /// An app's name (`apps.name`) as stored.
    public struct AppName: Sendable, Equatable, Codable {
        public var appID: UUID
        public var name: String

        public init(appID: UUID, name: String) {
            self.appID = appID
            self.name = name
        }
    }

    /// A channel paused after the provider refused its credentials, or by an operator (reason `operator`)
    /// (`app_channels.paused_until`, `paused_reason`).
    public struct PausedChannel: Sendable, Equatable, Codable {
        public var appID: UUID
        public var provider: String
        public var pausedUntil: Date
        /// As stored (from the database: sanitized when printed).
        public var reason: String?
        /// The operator's `--note` of the pause in force (`operator_actions.reason`), when the reason is `operator`.
        public var note: String? = nil

        public init(appID: UUID, provider: String, pausedUntil: Date, reason: String?) {
            self.appID = appID
            self.provider = provider
            self.pausedUntil = pausedUntil
            self.reason = reason
        }
    }
}

// The JSON schema (docs/status.md): snake_case keys spelled out here, so renaming a Swift property cannot change
// it; absent values are written as `null`, never left out.
extension FleetStatus {
    enum CodingKeys: String, CodingKey {
        case schemaVersion = "schema_version", takenAt = "taken_at", queue, leases, events, expansion
        case pausedChannels = "paused_channels", notes, throttledApps = "throttled_apps", server
        case app = "app_id", fleetPause = "fleet_pause", pausedApps = "paused_apps", workers, appNames = "app_names"
        case heldProjects = "fcm_projects_held", liveActivityChannels = "live_activity_channels"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(schemaVersion, forKey: .schemaVersion)
        try container.encode(takenAt, forKey: .takenAt)
        try container.encode(queue, forKey: .queue)
        try container.encode(leases, forKey: .leases)
        try container.encode(events, forKey: .events)
        try container.encode(expansion, forKey: .expansion)
        try container.encode(pausedChannels, forKey: .pausedChannels)
        try container.encode(notes, forKey: .notes)
        try container.encode(throttledApps, forKey: .throttledApps)
        try container.encode(server, forKey: .server)
        try container.encode(app, forKey: .app)
        try container.encode(fleetPause, forKey: .fleetPause)
        try container.encode(pausedApps, forKey: .pausedApps)
        try container.encode(workers, forKey: .workers)
        try container.encode(appNames, forKey: .appNames)
        try container.encode(heldProjects, forKey: .heldProjects)
        try container.encode(liveActivityChannels, forKey: .liveActivityChannels)
    }

    /// Decodes what ``encode(to:)`` writes; `app_names`, `fcm_projects_held` and `live_activity_channels`, added
    /// later to schema version 1, may be absent.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try container.decode(Int.self, forKey: .schemaVersion)
        takenAt = try container.decode(Date.self, forKey: .takenAt)
        queue = try container.decode(Queue.self, forKey: .queue)
        leases = try container.decode([WorkerLeases].self, forKey: .leases)
        events = try container.decode([EventWindow].self, forKey: .events)
        expansion = try container.decode(Expansion.self, forKey: .expansion)
        pausedChannels = try container.decode([PausedChannel].self, forKey: .pausedChannels)
        notes = try container.decode([String].self, forKey: .notes)
        throttledApps = try container.decode([ThrottledApp].self, forKey: .throttledApps)
        server = try container.decodeIfPresent(PostgresServerAddress.self, forKey: .server)
        app = try container.decodeIfPresent(UUID.self, forKey: .app)
        fleetPause = try container.decodeIfPresent(Pause.self, forKey: .fleetPause)
        pausedApps = try container.decode([PausedApp].self, forKey: .pausedApps)
        workers = try container.decodeIfPresent([Worker].self, forKey: .workers)
        appNames = try container.decodeIfPresent([AppName].self, forKey: .appNames) ?? []
        heldProjects = try container.decodeIfPresent([HeldProject].self, forKey: .heldProjects) ?? []
        liveActivityChannels = try container.decodeIfPresent(LiveActivityChannels.self, forKey: .liveActivityChannels)
    }
}

extension FleetStatus.AppName {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", name
    }
}

extension FleetStatus.Worker {
    enum CodingKeys: String, CodingKey {
        case workerID = "worker_id", leasedBy = "leased_by", host, pid, version, commit, roles, state
        case startedAt = "started_at", lastSeenAt = "last_seen_at", lastSeenSecondsAgo = "last_seen_seconds_ago"
        case heartbeatSeconds = "heartbeat_seconds", inFlight = "in_flight", claimsPerMinute = "claims_per_minute"
        case sendsPerMinute = "sends_per_minute", stoppingAt = "stopping_at", stoppedAt = "stopped_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        // UUIDs in lower case, as PostgreSQL prints them (Foundation's encoding is upper case).
        try container.encode(workerID.uuidString.lowercased(), forKey: .workerID)
        try container.encode(leasedBy, forKey: .leasedBy)
        try container.encode(host, forKey: .host)
        try container.encode(pid, forKey: .pid)
        try container.encode(version, forKey: .version)
        try container.encode(commit, forKey: .commit)
        try container.encode(roles, forKey: .roles)
        try container.encode(state, forKey: .state)
        try container.encode(startedAt, forKey: .startedAt)
        try container.encode(lastSeenAt, forKey: .lastSeenAt)
        try container.encode(lastSeenSecondsAgo, forKey: .lastSeenSecondsAgo)
        try container.encode(heartbeatSeconds, forKey: .heartbeatSeconds)
        try container.encode(inFlight, forKey: .inFlight)
        try container.encode(claimsPerMinute, forKey: .claimsPerMinute)
        try container.encode(sendsPerMinute, forKey: .sendsPerMinute)
        try container.encode(stoppingAt, forKey: .stoppingAt)
        try container.encode(stoppedAt, forKey: .stoppedAt)
    }
}

extension FleetStatus.Pause {
    enum CodingKeys: String, CodingKey {
        case until, reason, note
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(PauseEnd.json(until), forKey: .until)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        until = PauseEnd.date(try container.decodeIfPresent(Date.self, forKey: .until))
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
        note = try container.decodeIfPresent(String.self, forKey: .note)
    }
}

/// An operator's or a provider's pause end in JSON (`status --json`, the operator commands' `--json`): the instant,
/// or `null` for a pause until resumed (PostgreSQL's `infinity`, read as `Date.distantFuture`).
public enum PauseEnd {
    public static func json(_ until: Date) -> Date? { until >= .distantFuture ? nil : until }
    public static func date(_ json: Date?) -> Date { json ?? .distantFuture }
}

extension FleetStatus.PausedApp {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", pausedUntil = "paused_until", reason, note
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appID, forKey: .appID)
        try container.encode(PauseEnd.json(pausedUntil), forKey: .pausedUntil)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        appID = try container.decode(UUID.self, forKey: .appID)
        pausedUntil = PauseEnd.date(try container.decodeIfPresent(Date.self, forKey: .pausedUntil))
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
        note = try container.decodeIfPresent(String.self, forKey: .note)
    }
}

extension FleetStatus.Figure {
    enum CodingKeys: String, CodingKey {
        case value, estimated, countedAtLeast = "counted_at_least"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(value, forKey: .value)
        try container.encode(estimated, forKey: .estimated)
        try container.encode(countedAtLeast, forKey: .countedAtLeast)
    }
}

extension FleetStatus.Queue {
    enum CodingKeys: String, CodingKey {
        case due, held, deferred, leased, providers, oldestDueAt = "oldest_due_at", lagSeconds = "lag_seconds"
        case expiredLeases = "expired_leases", scheduledByLocalTime = "scheduled_by_local_time"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(due, forKey: .due)
        try container.encode(held, forKey: .held)
        try container.encode(deferred, forKey: .deferred)
        try container.encode(leased, forKey: .leased)
        try container.encode(providers, forKey: .providers)
        try container.encode(oldestDueAt, forKey: .oldestDueAt)
        try container.encode(lagSeconds, forKey: .lagSeconds)
        try container.encode(expiredLeases, forKey: .expiredLeases)
        try container.encode(scheduledByLocalTime, forKey: .scheduledByLocalTime)
    }
}

extension FleetStatus.WorkerLeases {
    enum CodingKeys: String, CodingKey {
        case workerID = "worker_id", leased, oldestLeaseExpiresAt = "oldest_lease_expires_at", expired
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(workerID, forKey: .workerID)
        try container.encode(leased, forKey: .leased)
        try container.encode(oldestLeaseExpiresAt, forKey: .oldestLeaseExpiresAt)
        try container.encode(expired, forKey: .expired)
    }
}

extension FleetStatus.ExpandingNotification {
    enum CodingKeys: String, CodingKey {
        case id, appID = "app_id", expanded, progress, audienceEstimate = "audience_estimate"
        case lastChunkAt = "last_chunk_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(appID, forKey: .appID)
        try container.encode(expanded, forKey: .expanded)
        try container.encode(progress, forKey: .progress)
        try container.encode(audienceEstimate, forKey: .audienceEstimate)
        try container.encode(lastChunkAt, forKey: .lastChunkAt)
    }
}

extension FleetStatus.PausedChannel {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", provider, pausedUntil = "paused_until", reason, note
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appID, forKey: .appID)
        try container.encode(provider, forKey: .provider)
        try container.encode(PauseEnd.json(pausedUntil), forKey: .pausedUntil)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        appID = try container.decode(UUID.self, forKey: .appID)
        provider = try container.decode(String.self, forKey: .provider)
        pausedUntil = PauseEnd.date(try container.decodeIfPresent(Date.self, forKey: .pausedUntil))
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
        note = try container.decodeIfPresent(String.self, forKey: .note)
    }
}

extension FleetStatus.EventWindow {
    enum CodingKeys: String, CodingKey {
        case minutes, sent, failed, retrying
        case channelSent = "live_activity_channel_sent", channelFailed = "live_activity_channel_failed"
    }

    /// Every key, `null` included (docs/status.md: keys are always present).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(minutes, forKey: .minutes)
        try container.encode(sent, forKey: .sent)
        try container.encode(failed, forKey: .failed)
        try container.encode(retrying, forKey: .retrying)
        try container.encode(channelSent, forKey: .channelSent)
        try container.encode(channelFailed, forKey: .channelFailed)
    }
}

extension FleetStatus.LiveActivityChannels {
    enum CodingKeys: String, CodingKey {
        case pending, failed, active, sendsDue = "sends_due", sendsDeferred = "sends_deferred", sendsLeased = "sends_leased"
        case failedChannels = "failed_channels"
    }
}

extension FleetStatus.FailedChannel {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", name, reason, failedAt = "failed_at"
    }

    /// Every key, `null` included.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appID, forKey: .appID)
        try container.encode(name, forKey: .name)
        try container.encode(reason, forKey: .reason)
        try container.encode(failedAt, forKey: .failedAt)
    }
}

extension FleetStatus.HeldProject {
    enum CodingKeys: String, CodingKey {
        case project, quotaPerMinute = "quota_per_minute", permits, heldAt = "held_at", heldDeliveries = "held_deliveries"
    }
}

extension FleetStatus.ThrottledApp {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", maxSendsPerSecond = "max_sends_per_second", burst, permits, due
    }
}
