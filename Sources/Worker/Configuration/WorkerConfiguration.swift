import Foundation
import DeliveryCore
import Metrics

/// A worker's share of the job. A fleet may dedicate hosts: e.g. a few `expand` workers near the database
/// and many `send` workers; by default every worker does both.
public enum WorkerRole: String, Sendable, CaseIterable {
    /// Turns due notifications into deliveries (chunked expansion, cancellation sweeps).
    case expand
    /// Claims due deliveries, sends them and writes their events.
    case send
}

/// Everything `pushizo-worker run` needs, read once at start-up from the environment and flags: plain values,
/// without I/O. The runtime maps them to the I/O modules' types at start-up (`WorkerConfiguration+Runtime.swift`:
/// the egress policy, the checked trust roots, the pooler mode). Durations are `Duration`s, read by ``ConfigurationReader/duration(_:default:in:)`` (plain seconds or with a
/// unit: `500ms`, `30s`, `5m`). Each key's meaning, default and range are declared once, in ``ConfigurationKey``;
/// the reader applies them, so only defaults that follow from other keys are written here.
public struct WorkerConfiguration: Sendable {
    public var databaseURL: String
    /// `PUSHIZO_DATABASE_POOLER` and the `LISTEN` route (``DatabaseRoute``).
    public var databaseRoute: DatabaseRoute
    public var workerID: String
    /// Most provider requests in flight at once.
    public var concurrency: Int
    /// Most deliveries claimed in one transaction.
    public var claimBatch: Int
    /// How long a claim lasts before any worker may rescue the delivery (`PUSHIZO_LEASE_SECONDS`).
    public var lease: Duration
    /// Time between polls when no NOTIFY arrives.
    public var pollInterval: Duration
    public var maxAttempts: Int
    public var retryPolicy: RetryPolicy
    public var databaseConnections: Int
    /// Expansion chunks run at once (`PUSHIZO_EXPANSION_TASKS`): one task takes chunks of any large notification,
    /// the others only slices of sliced broadcasts (``ExpansionStore/Slicing``); below ``databaseConnections``.
    /// Small notifications have a lane of their own beside them (bulk passes, short transactions).
    public var expansionTasks: Int
    /// PEM file of trusted CAs for provider connections; `nil` = the system trust store. Read and parsed when the
    /// runtime maps it to trust roots (``trustRoots()``).
    public var caFile: String?
    public var connectionsPerOrigin: Int
    /// Time before a provider request is abandoned.
    public var requestTimeout: Duration
    /// Time to finish in-flight sends after SIGTERM.
    public var shutdownTimeout: Duration
    public var exitWhenDrained: Bool
    /// Time over which deliveries held by quiet hours are released after the window ends (whole seconds).
    public var quietHoursSpread: Duration
    /// How far this host's clock may be from PostgreSQL's before a warning is logged
    /// (`PUSHIZO_CLOCK_OFFSET_WARNING`, docs/clocks.md).
    public var clockOffsetWarning: Duration
    /// Time between two heartbeats of this worker (`PUSHIZO_HEARTBEAT_INTERVAL`, docs/status.md, "Workers").
    public var heartbeatInterval: Duration
    /// What this worker does (`PUSHIZO_ROLES`); never empty.
    public var roles: Set<WorkerRole>
    /// Time one delivery's provider exchange may take in all (token fetch, send, refresh, resend); at
    /// least ``requestTimeout``, at most half of ``lease``. A delivery whose lease has less than this
    /// left is not sent but put back in the queue.
    public var deliveryTimeout: Duration
    /// Retries that spend no attempt before a delivery fails with `retries_exhausted`.
    public var maxUncountedRetries: Int
    /// `PUSHIZO_ALLOW_PRIVATE_NETWORKS`: the operator switch that lifts the egress policy (off by default).
    public var allowPrivateNetworks: Bool
    /// Retention of events and notifications (`PUSHIZO_EVENT_RETENTION`, `PUSHIZO_NOTIFICATION_RETENTION`).
    public var maintenance: MaintenanceSettings
    /// How often `run` does the data-lifecycle maintenance; `nil` = never (`PUSHIZO_MAINTENANCE_INTERVAL=off`).
    public var maintenanceInterval: Duration?
    /// `PUSHIZO_METRICS_LISTEN`: where `GET /metrics` is served; `nil`: no listener.
    public var metricsListen: MetricsListenAddress?

    /// The keys `run` accepts as flags.
    public static let keys: [ConfigurationKey] = [
        .databaseURL, .databasePooler, .listenDatabaseURL, .logLevel, .logFormat, .workerID, .concurrency, .claimBatch, .leaseSeconds, .pollInterval,
        .maxAttempts, .retryBase, .retryMax, .databaseConnections, .expansionTasks, .caFile, .connectionsPerOrigin, .requestTimeout,
        .shutdownTimeout, .exitWhenDrained, .quietHoursSpread, .clockOffsetWarning, .heartbeatInterval, .roles, .deliveryTimeout, .maxUncountedRetries,
        .allowPrivateNetworks, .eventRetention, .notificationRetention, .maintenanceInterval, .metricsListen,
    ]

    /// Reads and validates every key.
    /// - Throws: ``ConfigurationError`` naming the first key that is missing or bad.
    public init(_ reader: ConfigurationReader) throws {
        databaseURL = try reader.requiredConnectionString(.databaseURL)
        databaseRoute = try DatabaseRoute(reader, databaseURL: databaseURL)
        workerID = reader.string(.workerID) ?? Self.defaultWorkerID()
        concurrency = try reader.int(.concurrency)
        claimBatch = try reader.int(.claimBatch)
        lease = try reader.duration(.leaseSeconds)
        pollInterval = try reader.duration(.pollInterval)
        maxAttempts = try reader.int(.maxAttempts)
        let retryBase = try reader.duration(.retryBase)
        let retryMax = try reader.duration(.retryMax)
        guard retryMax >= retryBase else {
            throw ConfigurationError(key: ConfigurationKey.retryMax.name, problem: "must not be below PUSHIZO_RETRY_BASE")
        }
        retryPolicy = RetryPolicy(baseDelay: retryBase, maximumDelay: retryMax)
        databaseConnections = try reader.int(.databaseConnections)
        expansionTasks = try reader.int(.expansionTasks, default: min(2, databaseConnections - 1))
        guard expansionTasks < databaseConnections else {
            throw ConfigurationError(
                key: ConfigurationKey.expansionTasks.name,
                problem: "must be below PUSHIZO_DATABASE_CONNECTIONS (\(databaseConnections)): claims and completions need a connection too")
        }
        caFile = reader.string(.caFile)
        connectionsPerOrigin = try reader.int(.connectionsPerOrigin)
        requestTimeout = try reader.duration(.requestTimeout)
        shutdownTimeout = try reader.duration(.shutdownTimeout)
        exitWhenDrained = try reader.bool(.exitWhenDrained)
        quietHoursSpread = try reader.duration(.quietHoursSpread)
        clockOffsetWarning = try reader.duration(.clockOffsetWarning)
        heartbeatInterval = try reader.duration(.heartbeatInterval)
        allowPrivateNetworks = try reader.bool(.allowPrivateNetworks)
        maintenance = try MaintenanceSettings(reader)
        maintenanceInterval = try reader.durationSetting(.maintenanceInterval)
        if let listen = reader.string(.metricsListen) {
            do {
                metricsListen = try MetricsListenAddress(parsing: listen)
            } catch {
                throw ConfigurationError(key: ConfigurationKey.metricsListen.name, problem: error.message)
            }
        }
        roles = Set(try reader.list(.roles).compactMap(WorkerRole.init(rawValue:)))
        maxUncountedRetries = try reader.int(.maxUncountedRetries)
        // A send must end well within its lease: the other half covers the wait before the send and the
        // completion's write, so no lease runs out under a send in flight.
        deliveryTimeout = try reader.duration(.deliveryTimeout, default: min(requestTimeout * 2, lease / 2))
        guard requestTimeout <= deliveryTimeout else {
            let setting = reader.string(.deliveryTimeout) == nil ? "PUSHIZO_LEASE_SECONDS / 2" : "PUSHIZO_DELIVERY_TIMEOUT"
            // Name the key the operator set: with the request timeout at its default, the lease (or the delivery
            // timeout) set too short is what to change.
            if reader.string(.requestTimeout) == nil {
                if reader.string(.deliveryTimeout) != nil {
                    throw ConfigurationError(
                        key: ConfigurationKey.deliveryTimeout.name,
                        problem: "\(DurationText.describe(deliveryTimeout)) is below the request timeout "
                            + "\(DurationText.describe(requestTimeout)) (PUSHIZO_REQUEST_TIMEOUT's default): raise it, or lower PUSHIZO_REQUEST_TIMEOUT")
                }
                throw ConfigurationError(
                    key: ConfigurationKey.leaseSeconds.name,
                    problem: "\(DurationText.describe(lease)) leaves a per-delivery deadline of \(DurationText.describe(deliveryTimeout)) "
                        + "(half the lease), below the request timeout \(DurationText.describe(requestTimeout)) "
                        + "(PUSHIZO_REQUEST_TIMEOUT's default): set the lease to at least "
                        + "\(DurationText.describe(requestTimeout * 2)) (twice the request timeout), or lower PUSHIZO_REQUEST_TIMEOUT")
            }
            throw ConfigurationError(
                key: ConfigurationKey.requestTimeout.name,
                problem: "\(DurationText.describe(requestTimeout)) exceeds the per-delivery deadline "
                    + "\(DurationText.describe(deliveryTimeout)) (\(setting)); "
                    + "lower PUSHIZO_REQUEST_TIMEOUT or raise PUSHIZO_LEASE_SECONDS")
        }
        guard deliveryTimeout <= lease / 2 else {
            throw ConfigurationError(
                key: ConfigurationKey.deliveryTimeout.name,
                problem: "\(DurationText.describe(deliveryTimeout)) is more than half of PUSHIZO_LEASE_SECONDS "
                    + "(\(DurationText.describe(lease))), "
                    + "so a lease could run out under a send in flight")
        }
    }

    static func defaultWorkerID() -> String {
        "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"
    }
}
