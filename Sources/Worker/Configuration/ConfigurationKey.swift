/// One configuration key: an environment variable `PUSHIZO_*` (what a systemd `EnvironmentFile` holds) and the
/// command-line flag derived from it (`PUSHIZO_CLAIM_BATCH` <-> `--claim-batch`). Flags override the environment.
///
/// A key's declaration below is the one place its default and range are written: ``ConfigurationReader`` reads
/// the value against them, `pushizo-worker help` prints them, and ``WorkerConfiguration`` takes its defaults from
/// the reader.
public struct ConfigurationKey: Sendable, Hashable {
    /// The environment-variable name, e.g. `PUSHIZO_DATABASE_URL`.
    public var name: String
    /// One line for `--help` and the sample EnvironmentFile: what it sets (the range and default are added from
    /// ``value``).
    public var summary: String
    /// What the value is, with its default and range.
    public var value: ConfigurationValue
    /// What applies when the key is unset and the default is not a constant (it follows from other keys or the
    /// host), as `--help` shows it; `nil` when ``value`` holds the default or there is none.
    public var derivedDefault: String?
    /// Secret values (passwords inside URLs) are never printed back, not even in errors.
    public var isSecret: Bool

    public init(
        _ name: String, _ summary: String, _ value: ConfigurationValue = .text(), derivedDefault: String? = nil,
        secret: Bool = false
    ) {
        self.name = name
        self.summary = summary
        self.value = value
        self.derivedDefault = derivedDefault
        self.isSecret = secret
    }

    /// The default as text (what `--help` shows), or `nil` when the key has no default.
    public var defaultValue: String? { derivedDefault ?? value.defaultText }

    /// The accepted values as text (`1...10000`, `5s...24h`, `text, json`), or `nil` for free text.
    public var rangeText: String? { value.rangeText }

    /// The declared default of a duration key.
    /// - Precondition: the key is declared ``ConfigurationValue/duration(default:in:off:)`` with a default.
    public var declaredDuration: Duration {
        guard case .duration(let value?, _, _) = value else { preconditionFailure("\(name) has no declared duration") }
        return value
    }

    /// The flag for this key: `--` plus the name without `PUSHIZO_`, lower-cased, `_` as `-`.
    public var flag: String { Self.flagName(forEnvironmentName: name) }

    /// `PUSHIZO_CLAIM_BATCH` -> `--claim-batch`.
    public static func flagName(forEnvironmentName name: String) -> String {
        let bare = name.hasPrefix("PUSHIZO_") ? String(name.dropFirst("PUSHIZO_".count)) : name
        return "--" + bare.lowercased().replacingOccurrences(of: "_", with: "-")
    }

    /// `--claim-batch` -> `PUSHIZO_CLAIM_BATCH`.
    public static func environmentName(forFlag flag: String) -> String {
        let bare = flag.hasPrefix("--") ? String(flag.dropFirst(2)) : flag
        return "PUSHIZO_" + bare.uppercased().replacingOccurrences(of: "-", with: "_")
    }
}

extension ConfigurationKey {
    // Shared by every command that touches the database.
    public static let databaseURL = ConfigurationKey(
        "PUSHIZO_DATABASE_URL",
        "libpq connection string: a URL (postgresql://user:pass@host:5432/db) or key=value pairs",
        secret: true)
    public static let migrateDatabaseURL = ConfigurationKey(
        "PUSHIZO_MIGRATE_DATABASE_URL",
        "`migrate` only: libpq connection string of a schema-owning role, so the workers' role needs no DDL rights",
        derivedDefault: "PUSHIZO_DATABASE_URL", secret: true)
    public static let databasePooler = ConfigurationKey(
        "PUSHIZO_DATABASE_POOLER",
        "what stands between the worker and PostgreSQL (PgBouncer's pool_mode); transaction: unnamed statements, transaction-level advisory locks, LISTEN only on PUSHIZO_LISTEN_DATABASE_URL",
        .choice(default: DatabasePooler.none.rawValue, among: DatabasePooler.allCases.map(\.rawValue)))
    public static let listenDatabaseURL = ConfigurationKey(
        "PUSHIZO_LISTEN_DATABASE_URL",
        "libpq connection string of the LISTEN connection (wake-ups); with PUSHIZO_DATABASE_POOLER=transaction it must reach PostgreSQL directly, and unset means polling only",
        derivedDefault: "PUSHIZO_DATABASE_URL; none with PUSHIZO_DATABASE_POOLER=transaction", secret: true)
    public static let migrationsDirectory = ConfigurationKey(
        "PUSHIZO_MIGRATIONS_DIR",
        "directory of NNNN_name.sql migration files",
        derivedDefault: "migrations (next to the working directory), else /usr/share/pushizo-worker/migrations")
    public static let logLevel = ConfigurationKey(
        "PUSHIZO_LOG_LEVEL", "least severe level written to stderr",
        .choice(default: Logger.Level.info.name, among: Logger.Level.allCases.map(\.name)))
    public static let logFormat = ConfigurationKey(
        "PUSHIZO_LOG_FORMAT", "how stderr lines are written: text is one line a record, led by a <N> priority prefix only when stderr is the journal (JOURNAL_STREAM); json is one object a line",
        .choice(default: "text", among: ["text", "json"]))

    // `run`
    public static let workerID = ConfigurationKey(
        "PUSHIZO_WORKER_ID", "name written to deliveries.leased_by", derivedDefault: "<hostname>:<pid>")
    public static let concurrency = ConfigurationKey(
        "PUSHIZO_CONCURRENCY", "most provider requests in flight at once", .wholeNumber(default: 2048, in: 1...100_000))
    public static let claimBatch = ConfigurationKey(
        "PUSHIZO_CLAIM_BATCH", "most deliveries claimed in one transaction", .wholeNumber(default: 200, in: 1...10_000))
    public static let leaseSeconds = ConfigurationKey(
        "PUSHIZO_LEASE_SECONDS",
        "duration a claim lasts before any worker may rescue the delivery; at least twice PUSHIZO_REQUEST_TIMEOUT (a send gets half the lease)",
        .duration(default: .seconds(120), in: .seconds(5) ... .seconds(86_400)))
    public static let pollInterval = ConfigurationKey(
        "PUSHIZO_POLL_INTERVAL", "duration between polls when no NOTIFY arrives",
        .duration(default: .seconds(1), in: .milliseconds(50) ... .seconds(60)))
    public static let maxAttempts = ConfigurationKey(
        "PUSHIZO_MAX_ATTEMPTS", "send attempts before a delivery fails with max_attempts", .wholeNumber(default: 10, in: 1...100))
    public static let retryBase = ConfigurationKey(
        "PUSHIZO_RETRY_BASE", "duration before the first retry; doubles each attempt, with jitter",
        .duration(default: .seconds(2), in: .milliseconds(10) ... .seconds(3600)))
    public static let retryMax = ConfigurationKey(
        "PUSHIZO_RETRY_MAX", "longest wait between retries; at least PUSHIZO_RETRY_BASE",
        .duration(default: .seconds(3600), in: .seconds(1) ... .seconds(86_400)))
    public static let databaseConnections = ConfigurationKey(
        "PUSHIZO_DATABASE_CONNECTIONS", "PostgreSQL connections in the pool, besides the LISTEN and heartbeat ones",
        .wholeNumber(default: 5, in: 2...64))
    public static let expansionTasks = ConfigurationKey(
        "PUSHIZO_EXPANSION_TASKS",
        "expansion chunks this worker runs at once: different slices of one large broadcast, each on a pooled database connection; below PUSHIZO_DATABASE_CONNECTIONS",
        .wholeNumber(default: nil, in: 1...16), derivedDefault: "min(2, PUSHIZO_DATABASE_CONNECTIONS - 1)")
    public static let caFile = ConfigurationKey(
        "PUSHIZO_CA_FILE", "PEM file of CA certificates trusted for provider connections instead of the system store")
    public static let connectionsPerOrigin = ConfigurationKey(
        "PUSHIZO_CONNECTIONS_PER_ORIGIN", "HTTP/2 connections per provider origin", .wholeNumber(default: 2, in: 1...64))
    public static let requestTimeout = ConfigurationKey(
        "PUSHIZO_REQUEST_TIMEOUT", "duration before a provider request is abandoned and retried",
        .duration(default: .seconds(30), in: .seconds(1) ... .seconds(300)))
    public static let shutdownTimeout = ConfigurationKey(
        "PUSHIZO_SHUTDOWN_TIMEOUT",
        "duration to finish in-flight sends after SIGTERM before giving up on them (leases rescue them); keep the unit's TimeoutStopSec above it plus 10 s",
        .duration(default: .seconds(30), in: .seconds(1) ... .seconds(3600)))
    public static let deliveryTimeout = ConfigurationKey(
        "PUSHIZO_DELIVERY_TIMEOUT",
        "duration of one delivery's whole provider exchange (token fetch, send, refresh, resend); at least PUSHIZO_REQUEST_TIMEOUT, at most half of PUSHIZO_LEASE_SECONDS",
        .duration(default: nil, in: .seconds(1) ... .seconds(3600)),
        derivedDefault: "min(2 x PUSHIZO_REQUEST_TIMEOUT, PUSHIZO_LEASE_SECONDS / 2)")
    public static let maxUncountedRetries = ConfigurationKey(
        "PUSHIZO_MAX_UNCOUNTED_RETRIES",
        "retries that spend no attempt (provider unreachable, channel paused, ...) before a delivery fails with retries_exhausted",
        .wholeNumber(default: 100, in: 1...100_000))
    public static let roles = ConfigurationKey(
        "PUSHIZO_ROLES",
        "what this worker does, comma-separated: expand (notifications into deliveries), send (claim and send deliveries)",
        .list(default: WorkerRole.allCases.map(\.rawValue), among: WorkerRole.allCases.map(\.rawValue)))
    public static let quietHoursSpread = ConfigurationKey(
        "PUSHIZO_QUIET_HOURS_SPREAD",
        "duration over which deliveries held by quiet hours are released after the window ends, spread by subscription",
        .duration(default: .seconds(900), in: .zero ... .seconds(86_400)))
    public static let clockOffsetWarning = ConfigurationKey(
        "PUSHIZO_CLOCK_OFFSET_WARNING",
        "duration this host's clock may differ from PostgreSQL's (measured with each claim) before a warning is logged, at most one every 10 minutes",
        .duration(default: .seconds(2), in: .milliseconds(100) ... .seconds(3600)))
    public static let heartbeatInterval = ConfigurationKey(
        "PUSHIZO_HEARTBEAT_INTERVAL",
        "duration between two writes of this worker's worker_heartbeats row (on a connection of its own); `status` shows a worker not seen for 3 intervals as stale",
        .duration(default: .seconds(5), in: .milliseconds(100) ... .seconds(300)))
    public static let exitWhenDrained = ConfigurationKey(
        "PUSHIZO_EXIT_WHEN_DRAINED",
        "true: exit 0 once nothing is left to claim: no due notification waits for expansion and no delivery is queued but those an operator's pause holds (demos, batch runs)",
        .flag(default: false))
    public static let allowPrivateNetworks = ConfigurationKey(
        "PUSHIZO_ALLOW_PRIVATE_NETWORKS",
        "true: provider connections may go to loopback, private, link-local and other non-public addresses, and channel endpoint overrides may be cleartext http:// (tests, the demo, emulators); never in production",
        .flag(default: false))
    // Data lifecycle: `run` (on a schedule) and `maintain` (docs/data-lifecycle.md)
    public static let eventRetention = ConfigurationKey(
        "PUSHIZO_EVENT_RETENTION",
        "how long delivery_events are kept: whole daily partitions older than this are dropped; a duration such as 30d, 12h, 90m or seconds",
        .duration(default: .seconds(30 * 86_400), in: .seconds(86_400) ... .seconds(3650 * 86_400)))
    public static let notificationRetention = ConfigurationKey(
        "PUSHIZO_NOTIFICATION_RETENTION",
        "finished notifications (expanded, failed or canceled, no delivery left) older than this are deleted with their counts; a duration, or off",
        .duration(default: .seconds(90 * 86_400), in: .seconds(86_400) ... .seconds(3650 * 86_400), off: true))
    public static let maintenanceInterval = ConfigurationKey(
        "PUSHIZO_MAINTENANCE_INTERVAL",
        "how often `run` does the data-lifecycle maintenance (one worker of the fleet at a time, under an advisory lock); a duration, or off",
        .duration(default: .seconds(3600), in: .seconds(10) ... .seconds(86_400), off: true))
    public static let metricsListen = ConfigurationKey(
        "PUSHIZO_METRICS_LISTEN",
        "host:port serving Prometheus metrics at GET /metrics, the probes GET /healthz and /readyz and a read-only status page at GET / (an IP literal; IPv6 in brackets, e.g. 127.0.0.1:9464 or [::1]:9464); unset: no listener")

    // `emulator`
    public static let emulatorListen = ConfigurationKey(
        "PUSHIZO_EMULATOR_LISTEN", "host:port the provider emulator listens on (port 0 = any free port)",
        .text(default: "127.0.0.1:8443"))
    public static let emulatorTLSDirectory = ConfigurationKey(
        "PUSHIZO_EMULATOR_TLS_DIR",
        "directory holding ca.pem, chain.pem and key.pem for the emulator's TLS; generated there when missing, reused after")
    public static let emulatorCleartext = ConfigurationKey(
        "PUSHIZO_EMULATOR_CLEARTEXT", "true: serve cleartext h2c (prior knowledge) instead of TLS", .flag(default: false))
    public static let emulatorAPNsKeys = ConfigurationKey(
        "PUSHIZO_EMULATOR_APNS_KEYS",
        "comma-separated TEAMID:KEYID:path-to-public-key.pem triples whose provider tokens the emulator accepts")
    public static let emulatorAPNsClientCA = ConfigurationKey(
        "PUSHIZO_EMULATOR_APNS_CLIENT_CA",
        "PEM file of the CA whose client certificates the APNs emulator accepts (certificate-based APNs); unset = none asked for")
    public static let emulatorRequestLog = ConfigurationKey(
        "PUSHIZO_EMULATOR_REQUEST_LOG", "JSON-lines file to append every accepted request to")
    public static let emulatorLatency = ConfigurationKey(
        "PUSHIZO_EMULATOR_LATENCY", "duration each emulator answer is held back, imitating a provider round trip",
        .duration(default: .zero, in: .zero ... .seconds(60)))
    public static let emulatorWebPushSeed = ConfigurationKey(
        "PUSHIZO_EMULATOR_WEBPUSH_SEED",
        "seed the Web Push emulator derives its subscriptions' keys from (`pushizo-worker emulator-subscription` prints them)",
        .text(default: "pushizo-demo"))
    public static let emulatorFCMKeys = ConfigurationKey(
        "PUSHIZO_EMULATOR_FCM_KEYS",
        "service accounts the FCM emulator's token endpoint trusts: comma-separated client_email:path-to-key.pem (public or private RSA PEM)")
    public static let emulatorHuaweiApps = ConfigurationKey(
        "PUSHIZO_EMULATOR_HUAWEI_APPS",
        "apps the Huawei Push Kit emulator's token endpoint trusts: comma-separated app_id:path-to-file-holding-the-client-secret")
    public static let emulatorFCMTokenLifetime = ConfigurationKey(
        "PUSHIZO_EMULATOR_FCM_TOKEN_LIFETIME", "duration an access token issued by the FCM emulator is valid",
        .duration(default: .seconds(3600), in: .seconds(1) ... .seconds(86_400)))
    public static let emulatorReadyFile = ConfigurationKey(
        "PUSHIZO_EMULATOR_READY_FILE", "file the emulator writes its bound port to once it listens")
    public static let emulatorRefuseBeyond = ConfigurationKey(
        "PUSHIZO_EMULATOR_REFUSE_BEYOND",
        "streams one connection may have open before the emulator refuses more with REFUSED_STREAM, whatever it announced; 0: never",
        .wholeNumber(default: 0, in: 0...100_000))

    /// Every key any command knows: an environment variable `PUSHIZO_*` outside this list stops start-up, so a
    /// typo in an EnvironmentFile is caught instead of silently ignored.
    public static let all: [ConfigurationKey] = [
        databaseURL, databasePooler, listenDatabaseURL, migrateDatabaseURL, migrationsDirectory, logLevel, logFormat,
        workerID, concurrency, claimBatch, leaseSeconds, pollInterval, maxAttempts, retryBase, retryMax,
        databaseConnections, expansionTasks, caFile, connectionsPerOrigin, requestTimeout, shutdownTimeout, exitWhenDrained,
        quietHoursSpread, clockOffsetWarning, heartbeatInterval, roles, deliveryTimeout, maxUncountedRetries, allowPrivateNetworks,
        eventRetention, notificationRetention, maintenanceInterval, metricsListen,
        emulatorListen, emulatorTLSDirectory, emulatorCleartext, emulatorAPNsKeys, emulatorRequestLog,
        emulatorReadyFile, emulatorLatency, emulatorWebPushSeed, emulatorFCMKeys, emulatorFCMTokenLifetime,
        emulatorHuaweiApps, emulatorRefuseBeyond,
        emulatorAPNsClientCA,
    ]
}
