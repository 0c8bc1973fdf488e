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

    /// The `deliveries` queue. A row is *due* when `run_at <= now()` (claimable now, including rows whose lease
    /// ran out), *leased* when a worker holds it (`leased_by` set and `run_at`, the lease's expiry, in the
    /// future) and *deferred* otherwise (waiting for a retry, quiet hours or a paused channel).
    public struct Queue: Sendable, Equatable, Codable {
        public var due: Figure
        public var deferred: Figure
        public var leased: Figure
        /// Per provider (`apns`, `fcm`, `webpush`, always listed, then `other` for subscriptions whose
        /// platform maps to none, when there are any).
        public var providers: [ProviderDepth]
        /// `run_at` of the oldest due delivery; nil when nothing is due.
        public var oldestDueAt: Date?
        /// `takenAt - oldestDueAt` in seconds (the queue lag); nil when nothing is due.
        public var lagSeconds: Double?
        /// Due rows whose lease ran out (`leased_by` still set): claims of workers that died or stalled.
        public var expiredLeases: Int64
        /// Deferred rows waiting for their subscriber's local time (`delivery_time_of_day`,
        /// docs/local-time-delivery.md), counted up to the count bound; nil on a schema before migration
        /// 0011, which has no local-time delivery.
        public var scheduledByLocalTime: Figure?

        public init(
            due: Figure, deferred: Figure, leased: Figure, providers: [ProviderDepth], oldestDueAt: Date?,
            lagSeconds: Double?, expiredLeases: Int64, scheduledByLocalTime: Figure? = nil
        ) {
            self.due = due
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
        public var deferred: Figure
        public var leased: Figure

        public init(provider: String, due: Figure, deferred: Figure, leased: Figure) {
            self.provider = provider
            self.due = due
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

    /// `delivery_events` written in the last ``minutes`` minutes (`at > now() - minutes`).
    public struct EventWindow: Sendable, Equatable, Codable {
        public var minutes: Int
        /// `sent` events: deliveries the provider accepted.
        public var sent: Figure
        /// `failed` events: deliveries given up (terminal).
        public var failed: Figure
        /// `retrying` events: attempts that failed and will be retried.
        public var retrying: Figure

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
        case app = "app_id", fleetPause = "fleet_pause", pausedApps = "paused_apps"
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
    }
}

extension FleetStatus.Pause {
    enum CodingKeys: String, CodingKey {
        case until, reason, note
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(until, forKey: .until)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
    }
}

extension FleetStatus.PausedApp {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", pausedUntil = "paused_until", reason, note
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appID, forKey: .appID)
        try container.encode(pausedUntil, forKey: .pausedUntil)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
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
        case due, deferred, leased, providers, oldestDueAt = "oldest_due_at", lagSeconds = "lag_seconds"
        case expiredLeases = "expired_leases", scheduledByLocalTime = "scheduled_by_local_time"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(due, forKey: .due)
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
        try container.encode(pausedUntil, forKey: .pausedUntil)
        try container.encode(reason, forKey: .reason)
        try container.encode(note, forKey: .note)
    }
}

extension FleetStatus.ThrottledApp {
    enum CodingKeys: String, CodingKey {
        case appID = "app_id", maxSendsPerSecond = "max_sends_per_second", burst, permits, due
    }
}
