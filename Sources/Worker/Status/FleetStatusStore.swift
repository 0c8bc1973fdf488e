import DeliveryCore
import Foundation
import Postgres
import UUIDText

/// `status --app` of an id that no row of `apps` has: refused in the operator commands' words (`no app <id>`,
/// exit 1), since it would otherwise read as an idle app with zeros everywhere.
public struct FleetStatusUnknownApp: Error, Sendable, Equatable, CustomStringConvertible {
    /// The id asked for (`apps.id`).
    public var app: UUID
    public var description: String { "no app \(CanonicalUUIDText.format(app))" }
}

/// A database without the tables or columns `status` reads.
public struct FleetStatusSchemaError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is missing, each as `table deliveries (migration 0001_producer_contract.sql)`.
    public var missing: [String]

    public var description: String {
        "the database schema is incomplete: missing \(missing.joined(separator: ", ")); run `pushizo-worker migrate`"
    }
}

/// The SQL of `pushizo-worker status`: every figure of a ``FleetStatus`` from one read-only REPEATABLE READ
/// snapshot, by queries PostgreSQL answers from indexes (docs/status.md lists each with its plan). Nothing here
/// scans a whole large table: counts stop at ``Limits/countLimit`` and are estimated beyond it, the queue's split by
/// provider comes from a sample once it is larger than ``Limits/exactSplitLimit``, and event counts come from a range
/// of `delivery_events.id` found by binary search (ids grow with `at`, which is the writing transaction's
/// `now()`), sampled once the range holds more than ``Limits/countLimit`` events.
public enum FleetStatusStore {
    /// How much each figure may read before it is estimated instead (docs/status.md, "Estimates").
    public struct Limits: Sendable {
        /// Counts stop after this many rows (each such count reads at most this many index entries).
        public var countLimit: Int64
        /// A queue state with at most this many rows is split by provider exactly (one subscription lookup
        /// per row); a larger one from a sample.
        public var exactSplitLimit: Int64
        /// Rows the provider-split sample aims at (`TABLESAMPLE SYSTEM`, whole pages).
        public var sampleRows: Double
        /// Events looked up per window, evenly spaced by id, when the last 16 minutes hold more than
        /// ``countLimit`` events.
        public var eventSamples: Int64

        public init(countLimit: Int64, exactSplitLimit: Int64, sampleRows: Double, eventSamples: Int64) {
            self.countLimit = countLimit
            self.exactSplitLimit = exactSplitLimit
            self.sampleRows = sampleRows
            self.eventSamples = eventSamples
        }

        /// What `pushizo-worker status` uses: 100,000 / 20,000 / 3,000 / 1,000.
        public static let standard = Limits(countLimit: 100_000, exactSplitLimit: 20_000, sampleRows: 3_000, eventSamples: 1_000)
    }
    /// Expanding notifications listed.
    public static let listedNotifications = 20
    /// Worker ids and paused channels listed.
    public static let listedRows = 1_000
    /// The providers always listed, in this order.
    public static let providers = Provider.allCases.map(\.rawValue)
    /// Event windows, in minutes.
    public static let windows = [1, 5, 15]
    /// The longest app name read (characters): longer ones are cut by the query.
    public static let appNameLength = 200

    /// The tables and columns read, each with the migration that creates it.
    static let requiredSchema: [(table: String, column: String?, migration: String)] = [
        ("deliveries", nil, "0001_producer_contract.sql"),
        ("delivery_events", nil, "0001_producer_contract.sql"),
        ("notifications", nil, "0001_producer_contract.sql"),
        ("subscriptions", nil, "0001_producer_contract.sql"),
        ("app_channels", nil, "0001_producer_contract.sql"),
        ("notifications", "expansion_cursor", "0003_chunked_expansion.sql"),
        ("notifications", "expansion_touched_at", "0003_chunked_expansion.sql"),
        ("app_claim_turns", nil, "0026_claim_turns.sql"),
    ]

    /// The partial index on leased rows; without it the leases are counted by a scan of the queue.
    static let leaseIndex = "deliveries_leased"

    /// The provider of a subscription's platform, as the claim maps it to a channel.
    static let providerOfPlatform =
        "CASE s.platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' WHEN 'huawei' THEN 'huawei' ELSE 'other' END"

    /// Reads a snapshot; with `app`, every figure narrowed to that app's rows (`status --app`), plus the app's and
    /// the fleet's operator pauses (migration 0028).
    /// - Throws: ``FleetStatusSchemaError`` when a table or column is missing (nothing else is read then),
    ///   ``FleetStatusUnknownApp`` when `app` names no row of `apps` (as the operator commands refuse it),
    ///   ``PostgresError`` from the database (including `statement_timeout`, 10 s per statement).
    public static func read(on connection: PostgresConnection, limits: Limits = .standard, app: UUID? = nil) throws
        -> FleetStatus
    {
        let missing = try missingSchema(on: connection)
        guard missing.isEmpty else { throw FleetStatusSchemaError(missing: missing) }
        return try connection.transaction { connection in
            // One snapshot and one now() for every figure; no JIT (its compile time dwarfs these queries).
            try connection.execute(
                "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET LOCAL jit = off; SET LOCAL statement_timeout = '10s'")
            var notes: [String] = []
            let now = try connection.query("SELECT now() AS now")[0].decode(Date.self, "now")
            // An id of no app would read as an idle app (zeros everywhere): refused, as `pause --app` refuses it.
            if let app,
                try connection.query("SELECT EXISTS (SELECT FROM apps WHERE id = $1) AS known", [app])[0]
                    .decode(Bool.self, "known") == false
            {
                throw FleetStatusUnknownApp(app: app)
            }
            let hasLeaseIndex = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [leaseIndex])[0]
                .decode(Bool.self, "present")
            if !hasLeaseIndex {
                notes.append("index \(leaseIndex) is missing (migration 0009_status_lease_index.sql): leases were counted by scanning the queue; run `pushizo-worker migrate`")
            }
            let leases = try readLeases(on: connection, app: app)
            // The totals apart from the list, which stops at listedRows workers.
            let leaseTotals = try connection.query(
                """
                SELECT sum(leased)::bigint AS leased, sum(expired)::bigint AS expired FROM (
                    SELECT count(*) FILTER (WHERE run_at > now()) AS leased, count(*) FILTER (WHERE run_at <= now()) AS expired
                    FROM deliveries WHERE leased_by IS NOT NULL\(appCondition("app_id", app))
                    \(try pagedLeases(on: connection, app: app, grouped: false))
                ) l
                """)[0]
            if leases.count == listedRows {
                notes.append("only the first \(listedRows) worker ids (by name) are listed")
            }
            let queue = try readQueue(
                on: connection, now: now, leased: try leaseTotals.decode(Int64.self, "leased"),
                expired: try leaseTotals.decode(Int64.self, "expired"), limits: limits, app: app, notes: &notes)
            var status = FleetStatus(
                takenAt: now, queue: queue, leases: leases, events: try readEvents(on: connection, limits: limits, app: app),
                expansion: try readExpansion(on: connection, limits: limits, app: app),
                pausedChannels: try readPausedChannels(on: connection, app: app),
                notes: notes, throttledApps: try readThrottledApps(on: connection, limits: limits, app: app),
                server: connection.serverAddress)
            status.app = app
            status.heldProjects = try readHeldProjects(on: connection, app: app)
            status.liveActivityChannels = try readLiveActivityChannels(on: connection, app: app)
            try readOperatorPauses(on: connection, app: app, into: &status)
            if app == nil {
                status.workers = try readWorkers(on: connection)
                if status.workers == nil {
                    status.notes.append("table worker_heartbeats is missing (migration 0029_worker_heartbeats.sql): workers are not listed; run `pushizo-worker migrate`")
                } else if status.workers?.count == listedRows {
                    status.notes.append("only the first \(listedRows) workers are listed (live, then stale, then stopped)")
                }
            }
            status.appNames = try readAppNames(on: connection, of: status)
            return status
        }
    }

    /// Names of what ``requiredSchema`` lists and the database lacks.
    static func missingSchema(on connection: PostgresConnection) throws -> [String] {
        var missing: [String] = []
        for item in requiredSchema {
            let present: Bool
            if let column = item.column {
                present = try connection.query(
                    """
                    SELECT EXISTS (SELECT 1 FROM pg_attribute
                                   WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped) AS present
                    """, [item.table, column])[0].decode(Bool.self, "present")
            } else {
                present = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [item.table])[0]
                    .decode(Bool.self, "present")
            }
            guard !present else { continue }
            let name = item.column.map { "column \(item.table).\($0)" } ?? "table \(item.table)"
            // A missing table makes its columns missing too: name the table once.
            if item.column != nil, missing.contains(where: { $0.hasPrefix("table \(item.table) ") }) { continue }
            missing.append("\(name) (migration \(item.migration))")
        }
        return missing
    }

    // MARK: Leases

    /// Leases per worker id, from the partial index on `leased_by` (index-only scan): exact.
    static func readLeases(on connection: PostgresConnection, app: UUID? = nil) throws -> [FleetStatus.WorkerLeases] {
        try connection.query(
            """
            SELECT leased_by, sum(leased)::bigint AS leased, min(oldest_expiry) AS oldest_expiry,
                   sum(expired)::bigint AS expired
            FROM (
                SELECT leased_by,
                       count(*) FILTER (WHERE run_at > now()) AS leased,
                       min(run_at) FILTER (WHERE run_at > now()) AS oldest_expiry,
                       count(*) FILTER (WHERE run_at <= now()) AS expired
                FROM deliveries WHERE leased_by IS NOT NULL\(appCondition("app_id", app))
                GROUP BY leased_by
                \(try pagedLeases(on: connection, app: app, grouped: true))
            ) l
            GROUP BY leased_by ORDER BY leased_by LIMIT $1
            """, [listedRows]
        ).map { row in
            FleetStatus.WorkerLeases(
                workerID: try row.decode(String.self, "leased_by"), leased: try row.decode(Int64.self, "leased"),
                oldestLeaseExpiresAt: try row.decodeIfPresent(Date.self, "oldest_expiry"),
                expired: try row.decode(Int64.self, "expired"))
        }
    }

    /// `UNION ALL` and the leases of leased pages (`delivery_pages`) in the shape of the deliveries' lease counts
    /// (per worker with `grouped`): each page counts the deliveries it handed out that have no outcome yet. Empty
    /// on a database without the table (a migration behind).
    static func pagedLeases(on connection: PostgresConnection, app: UUID?, grouped: Bool) throws -> String {
        let present = try connection.query("SELECT to_regclass('delivery_pages') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return "" }
        // A page lives until its last delivery is settled: those with an outcome (a terminal event, or the
        // deliveries row a waiting one became) are no longer its own. One range of delivery_events_notification
        // and of the deliveries' unique key per live page, each no longer than a page.
        return """
            UNION ALL
            SELECT \(grouped ? "leased_by, " : "")coalesce(sum(open) FILTER (WHERE lease_until > now()), 0) AS leased,
                   \(grouped ? "min(lease_until) FILTER (WHERE lease_until > now()) AS oldest_expiry, " : "")coalesce(sum(open) FILTER (WHERE lease_until <= now()), 0) AS expired
            FROM (
                SELECT p.leased_by, p.lease_until,
                       greatest(0, p.deliveries - \(DeliveryPageStore.settledSQL(page: "p", upTo: "p.up_to"))) AS open
                FROM delivery_pages p WHERE true\(appCondition("p.app_id", app))
            ) pages\(grouped ? " GROUP BY leased_by" : "")
            """
    }

    // MARK: Queue

    /// Which rows of `deliveries` a state is, as a condition on `d` (`$1` the priorities present, `$2` the
    /// state's apps: ``QueueApps/of(_:)``), written as ranges of the claim's index `deliveries_claim_app`.
    enum QueueState: CaseIterable {
        /// Due and claimable (no operator's pause holds the row's app or the fleet).
        case due
        /// Due, and held by an operator's pause of the row's app or of the fleet.
        case held
        case deferred, leased

        var condition: String {
            switch self {
            case .due, .held: "\(Self.inClaimRanges) AND d.run_at <= now()"
            case .deferred: "\(Self.inClaimRanges) AND d.run_at > now() AND d.leased_by IS NULL"
            case .leased: "d.leased_by IS NOT NULL AND d.run_at > now() AND \(Self.inClaimRanges)"
            }
        }

        /// Every row, as the ranges of `deliveries_claim_app` (one per app and priority).
        static let inClaimRanges = "d.app_id = ANY($2::uuid[]) AND d.priority = ANY($1::smallint[])"
    }

    /// The apps with queued rows, split by the operator's pauses as the claim honours them (``ClaimPauses``) and
    /// as the metrics' queue sample counts them (``QueueDepthStore``): while the fleet is paused every app's due
    /// rows are held; otherwise a paused app's are. Deferred and leased rows are what they are, paused or not.
    struct QueueApps {
        var queued: [UUID]
        var held: [UUID]
        var claimable: [UUID]

        /// The apps a state's rows are counted over.
        func of(_ state: QueueState) -> [UUID] {
            switch state {
            case .due: claimable
            case .held: held
            case .deferred, .leased: queued
            }
        }
    }

    /// Splits `queued` by the operator's pauses: the one-row `fleet_settings` and the paused apps among `queued`
    /// (primary-key lookups, at most one per queued app). No pause is held before migration 0028.
    static func queueApps(on connection: PostgresConnection, queued: [UUID]) throws -> QueueApps {
        let present = try connection.query("SELECT to_regclass('fleet_settings') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present, !queued.isEmpty else { return QueueApps(queued: queued, held: [], claimable: queued) }
        let rows = try connection.query(
            """
            SELECT \(ClaimPauses.fleetPaused) AS fleet, NULL::uuid AS id
            UNION ALL
            SELECT NULL, id FROM (\(ClaimPauses.pausedApps) AND id = ANY($1::uuid[])) a
            """, [queued])
        let fleetPaused = try rows.contains { try $0.decodeIfPresent(Bool.self, "fleet") == true }
        let pausedApps = Set(try rows.compactMap { try $0.decodeIfPresent(UUID.self, "id") })
        let held = fleetPaused ? queued : queued.filter(pausedApps.contains)
        return QueueApps(queued: queued, held: held, claimable: fleetPaused ? [] : queued.filter { !pausedApps.contains($0) })
    }

    static func readQueue(
        on connection: PostgresConnection, now: Date, leased: Int64, expired: Int64, limits: Limits, app: UUID? = nil,
        notes: inout [String]
    ) throws -> FleetStatus.Queue {
        // The apps with queued rows and their distinct priorities (a handful) by loose index scans of the claim's
        // index, so each count below is a few ranges of it (app_id = ANY(...) AND priority = ANY(...) AND run_at
        // <= / > now()), each counted up to the bound.
        let ranges = try connection.query(
            """
            WITH RECURSIVE \(claimRanges(app))
            SELECT priority, NULL::uuid AS app_id FROM priorities WHERE priority IS NOT NULL
            UNION ALL
            SELECT NULL, app_id FROM queued_apps
            """)
        let priorities = try ranges.compactMap { try $0.decodeIfPresent(Int64.self, "priority") }
        let apps = try queueApps(
            on: connection, queued: try ranges.compactMap { try $0.decodeIfPresent(UUID.self, "app_id") })
        let bound = limits.countLimit + 1
        // The claimable apps are `$4`, the held ones `$5`: the same ranges of the index, split by app, so holding
        // rows apart costs no further read of the queue.
        func bounded(_ runAt: String, apps: String = "$2") -> String {
            """
            (SELECT count(*) FROM (SELECT 1 FROM deliveries d
                                   WHERE \(QueueState.inClaimRanges.replacingOccurrences(of: "$2", with: apps)) AND \(runAt)
                                   LIMIT $3) x)
            """
        }
        let row = try connection.query(
            """
            WITH RECURSIVE \(claimRanges(app))
            SELECT \(bounded("d.run_at <= now()", apps: "$4")) AS due, \(bounded("d.run_at <= now()", apps: "$5")) AS held,
                   \(bounded("d.run_at > now()")) AS future,
                   \(QueueLagStore.oldestDueRunAt(queuedAppCondition: "q.app_id = ANY($4::uuid[])")) AS oldest_due
            """, [priorities, apps.queued, bound, apps.claimable, apps.held])[0]
        let dueCounted = try row.decode(Int64.self, "due")
        let heldCounted = try row.decode(Int64.self, "held")
        let futureCounted = try row.decode(Int64.self, "future")
        let oldestDue = try row.decodeIfPresent(Date.self, "oldest_due")
        let dueExact = dueCounted <= limits.countLimit
        let heldExact = heldCounted <= limits.countLimit
        let futureExact = futureCounted <= limits.countLimit

        // The split by provider: exact for small states, from a sample of pages for large ones.
        var counts: [QueueState: [String: Int64]] = [:]
        var sample: [QueueState: [String: Int64]]?
        let exactCounts: [QueueState: Int64?] = [
            .due: dueExact ? dueCounted : nil,
            .held: heldExact ? heldCounted : nil,
            .deferred: futureExact ? futureCounted - leased : nil,
            .leased: leased,
        ]
        var estimatedRows: Double = 0
        for state in QueueState.allCases {
            if let exact = exactCounts[state] ?? nil, exact <= limits.exactSplitLimit {
                counts[state] =
                    exact == 0
                    ? [:] : try exactSplit(on: connection, state: state, priorities: priorities, apps: apps.of(state))
            } else if sample == nil {
                estimatedRows = try plannerRows(on: connection, "SELECT 1 FROM deliveries")
                sample = try sampleSplit(
                    on: connection, estimatedRows: estimatedRows, sampleRows: limits.sampleRows, heldApps: apps.held,
                    app: app)
            }
        }
        let sampled = sample ?? [:]
        let sampleSize = sampled.values.reduce(0) { $0 + $1.values.reduce(0, +) }

        // Beyond the count limit: the planner's rows times the state's share of the sample, never below the
        // floor that counting proved.
        func total(_ state: QueueState, floor: Int64) -> FleetStatus.Figure {
            if let exact = exactCounts[state] ?? nil { return .exact(exact) }
            let inSample = sampled[state]?.values.reduce(0, +) ?? 0
            let fraction = sampleSize == 0 ? 0 : Double(inSample) / Double(sampleSize)
            return .estimate(max(floor + 1, Int64((estimatedRows * fraction).rounded())), countedAtLeast: floor)
        }
        let totals: [QueueState: FleetStatus.Figure] = [
            .due: total(.due, floor: limits.countLimit),
            .held: total(.held, floor: limits.countLimit),
            .deferred: total(.deferred, floor: max(0, limits.countLimit - leased)),
            .leased: .exact(leased),
        ]
        func perProvider(_ state: QueueState, _ provider: String) -> FleetStatus.Figure {
            if let exact = counts[state] { return .exact(exact[provider] ?? 0) }
            let inState = sampled[state] ?? [:]
            let stateSize = inState.values.reduce(0, +)
            guard stateSize > 0, let stateTotal = totals[state] else { return .estimate(0) }
            let share = Double(inState[provider] ?? 0) / Double(stateSize)
            return .estimate(Int64((Double(stateTotal.value) * share).rounded()))
        }
        var providerNames = providers
        let seen = Set(counts.values.flatMap(\.keys)).union(sampled.values.flatMap(\.keys))
        providerNames += seen.subtracting(providers).sorted()
        if sample != nil {
            notes.append(
                "the queue's split by provider is estimated from a sample of \(sampleSize) rows; totals over \(limits.countLimit) are estimated from the planner's row count")
        }
        return FleetStatus.Queue(
            due: totals[.due]!, deferred: totals[.deferred]!, leased: totals[.leased]!,
            providers: providerNames.map {
                FleetStatus.ProviderDepth(
                    provider: $0, due: perProvider(.due, $0), deferred: perProvider(.deferred, $0),
                    leased: perProvider(.leased, $0), held: perProvider(.held, $0))
            },
            oldestDueAt: oldestDue, lagSeconds: oldestDue.map { max(0, now.timeIntervalSince($0)) },
            expiredLeases: expired, scheduledByLocalTime: try readScheduledByLocalTime(on: connection, limits: limits, app: app),
            held: totals[.held]!)
    }

    /// Deliveries still waiting for their local time: `run_at` is the local due instant the expansion set and
    /// it is in the future, with no lease (a retry or quiet hours move `run_at` off it). Read through the
    /// partial index `deliveries_local_due` (only local-time rows) and counted up to `limits.countLimit`. nil
    /// when the schema predates migration 0011.
    static func readScheduledByLocalTime(on connection: PostgresConnection, limits: Limits, app: UUID? = nil) throws
        -> FleetStatus.Figure?
    {
        let present = try connection.query("SELECT to_regclass('deliveries_local_due') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return nil }
        let counted = try connection.query(
            """
            SELECT count(*) AS n FROM (SELECT 1 FROM deliveries d
                                       WHERE d.local_due_at IS NOT NULL AND d.local_due_at > now()
                                         AND d.run_at = d.local_due_at AND d.leased_by IS NULL\(appCondition("d.app_id", app))
                                       LIMIT $1) x
            """, [limits.countLimit + 1])[0].decode(Int64.self, "n")
        return counted > limits.countLimit
            ? FleetStatus.Figure(value: limits.countLimit, countedAtLeast: limits.countLimit) : .exact(counted)
    }

    /// Rows of one state per provider, every row joined to its subscription (one primary-key lookup each);
    /// `apps` are the state's (``QueueApps/of(_:)``).
    static func exactSplit(
        on connection: PostgresConnection, state: QueueState, priorities: [Int64], apps: [UUID]
    ) throws -> [String: Int64] {
        var split: [String: Int64] = [:]
        for row in try connection.query(
            """
            SELECT p.provider, count(*) AS n
            FROM deliveries d
            CROSS JOIN LATERAL (SELECT (SELECT \(providerOfPlatform) FROM subscriptions s WHERE s.id = d.subscription_id)
                                AS provider) p
            WHERE \(state.condition)
            GROUP BY p.provider
            """, [priorities, apps])
        {
            split[try row.decodeIfPresent(String.self, "provider") ?? "other"] = try row.decode(Int64.self, "n")
        }
        return split
    }

    /// A `TABLESAMPLE SYSTEM` sample of about ``sampleRows`` rows, counted per state and provider; due rows of
    /// `heldApps` are held.
    static func sampleSplit(
        on connection: PostgresConnection, estimatedRows: Double, sampleRows: Double, heldApps: [UUID] = [],
        app: UUID? = nil
    ) throws
        -> [QueueState: [String: Int64]]
    {
        let percent = min(100, max(0.0001, 100 * sampleRows / max(estimatedRows, 1)))
        var split: [QueueState: [String: Int64]] = [:]
        for row in try connection.query(
            """
            SELECT p.provider,
                   count(*) FILTER (WHERE d.run_at <= now() AND d.app_id <> ALL($2::uuid[])) AS due,
                   count(*) FILTER (WHERE d.run_at <= now() AND d.app_id = ANY($2::uuid[])) AS held,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NULL) AS deferred,
                   count(*) FILTER (WHERE d.run_at > now() AND d.leased_by IS NOT NULL) AS leased
            FROM deliveries d TABLESAMPLE SYSTEM ($1::float8)
            CROSS JOIN LATERAL (SELECT (SELECT \(providerOfPlatform) FROM subscriptions s WHERE s.id = d.subscription_id)
                                AS provider) p
            WHERE true\(appCondition("d.app_id", app))
            GROUP BY p.provider
            """, [percent, heldApps])
        {
            let provider = try row.decodeIfPresent(String.self, "provider") ?? "other"
            split[.due, default: [:]][provider] = try row.decode(Int64.self, "due")
            split[.held, default: [:]][provider] = try row.decode(Int64.self, "held")
            split[.deferred, default: [:]][provider] = try row.decode(Int64.self, "deferred")
            split[.leased, default: [:]][provider] = try row.decode(Int64.self, "leased")
        }
        return split
    }

    /// The planner's row estimate for `query` (`EXPLAIN`, nothing executed): `reltuples` scaled to the
    /// table's current size in pages.
    static func plannerRows(on connection: PostgresConnection, _ query: String) throws -> Double {
        let plan = try connection.query("EXPLAIN (FORMAT JSON) \(query)")[0].decode(String.self, at: 0)
        guard let data = plan.data(using: .utf8),
            let parsed = try JSONSerialization.jsonObject(with: data) as? [[String: Any]],
            let top = parsed.first?["Plan"] as? [String: Any], let rows = top["Plan Rows"] as? NSNumber
        else {
            throw PostgresError(code: .unexpectedResult, message: "EXPLAIN (FORMAT JSON) gave no Plan Rows")
        }
        return rows.doubleValue
    }

    // MARK: Events

    /// Event counts per window: exact when the last 16 minutes hold at most ``Limits/countLimit`` events; else, per
    /// window, from ``Limits/eventSamples`` events evenly spaced by id from the window's first id on.
    static func readEvents(on connection: PostgresConnection, limits: Limits, app: UUID? = nil) throws
        -> [FleetStatus.EventWindow]
    {
        let zero = windows.map {
            var window = FleetStatus.EventWindow(minutes: $0, sent: .exact(0), failed: .exact(0), retrying: .exact(0))
            (window.channelSent, window.channelFailed) = (.exact(0), .exact(0))
            return window
        }
        let range = try connection.query("SELECT min(id) AS low, max(id) AS high FROM delivery_events")[0]
        guard let low = try range.decodeIfPresent(Int64.self, "low"), let high = try range.decodeIfPresent(Int64.self, "high")
        else { return zero }
        func first(from low: Int64, minutes: Int) throws -> Int64 {
            try firstID(from: low, through: high) { id in
                let rows = try connection.query(
                    """
                    SELECT id, at > now() - make_interval(mins => $2::int) AS inside
                    FROM delivery_events WHERE id >= $1 ORDER BY id LIMIT 1
                    """, [id, minutes])
                guard let row = rows.first else { return nil }
                return (try row.decode(Int64.self, "id"), try row.decode(Bool.self, "inside"))
            }
        }
        // A minute's margin below the widest window: `at` is the writing transaction's start, so ids and
        // instants may disagree by as long as a completion transaction runs.
        let widest = windows.max() ?? 15
        let start = try first(from: low, minutes: widest + 1)
        guard high >= start else { return zero }
        let events = ["sent", "failed", "retrying"]
        // Live Activity channel sends are the events without a subscription (one broadcast each).
        func selections(_ minutes: [Int]) -> String {
            minutes.flatMap { minutes in
                events.map { "count(*) FILTER (WHERE event = '\($0)' AND at > now() - interval '\(minutes) minutes') AS \($0)_\(minutes)" }
                    + ["sent", "failed"].map {
                        "count(*) FILTER (WHERE event = '\($0)' AND subscription_id IS NULL AND at > now() - interval '\(minutes) minutes') AS channel_\($0)_\(minutes)"
                    }
            }.joined(separator: ", ")
        }
        if high - start + 1 <= limits.countLimit {
            let row = try connection.query(
                "SELECT \(selections(windows)) FROM delivery_events WHERE id >= $1 AND id <= $2\(appCondition("app_id", app))",
                [start, high])[0]
            return try windows.map { minutes in
                var window = FleetStatus.EventWindow(
                    minutes: minutes, sent: .exact(try row.decode(Int64.self, "sent_\(minutes)")),
                    failed: .exact(try row.decode(Int64.self, "failed_\(minutes)")),
                    retrying: .exact(try row.decode(Int64.self, "retrying_\(minutes)")))
                window.channelSent = .exact(try row.decode(Int64.self, "channel_sent_\(minutes)"))
                window.channelFailed = .exact(try row.decode(Int64.self, "channel_failed_\(minutes)"))
                return window
            }
        }
        var result: [FleetStatus.EventWindow] = []
        for minutes in windows {
            let windowStart = try first(from: start, minutes: minutes)
            let span = high - windowStart + 1
            guard span > 0 else {
                var window = FleetStatus.EventWindow(minutes: minutes, sent: .exact(0), failed: .exact(0), retrying: .exact(0))
                (window.channelSent, window.channelFailed) = (.exact(0), .exact(0))
                result.append(window)
                continue
            }
            let samples = min(span, limits.eventSamples)
            let step = Double(span) / Double(samples)
            // An array of ids (not `IN (subquery)`, which the planner hashes first): one index probe per id.
            let row = try connection.query(
                """
                SELECT \(selections([minutes])) FROM delivery_events
                WHERE id = ANY(ARRAY(SELECT $1::bigint + floor(g * $2::float8)::bigint
                                     FROM generate_series(0, $3::bigint - 1) g))\(appCondition("app_id", app))
                """, [windowStart, step, samples])[0]
            func figure(_ event: String) throws -> FleetStatus.Figure {
                let counted = try row.decode(Int64.self, "\(event)_\(minutes)")
                return samples == span ? .exact(counted) : .estimate(Int64((Double(counted) * step).rounded()))
            }
            var window = FleetStatus.EventWindow(
                minutes: minutes, sent: try figure("sent"), failed: try figure("failed"), retrying: try figure("retrying"))
            window.channelSent = try figure("channel_sent")
            window.channelFailed = try figure("channel_failed")
            result.append(window)
        }
        return result
    }

    /// The smallest id from which on `probe` says every event is inside the window, by binary search over ids
    /// `low...high` (`high + 1` when none is). `probe(id)` gives the first existing id at or above `id` and
    /// whether its event lies inside the window (nil when none exists). Assumes insideness only turns on as ids
    /// grow (ids grow with `at`); about log2(high - low) probes, each one primary-key lookup.
    public static func firstID(
        from low: Int64, through high: Int64, probe: (Int64) throws -> (id: Int64, inside: Bool)?
    ) rethrows -> Int64 {
        var low = low
        var high = high + 1
        while low < high {
            let middle = low + (high - low) / 2
            guard let found = try probe(middle) else {
                high = middle
                continue
            }
            if found.inside {
                high = middle
            } else {
                low = found.id + 1
            }
        }
        return low
    }

    // MARK: Expansion

    static func readExpansion(on connection: PostgresConnection, limits: Limits, app: UUID? = nil) throws
        -> FleetStatus.Expansion
    {
        let bound = limits.countLimit + 1
        let counts = try connection.query(
            """
            SELECT (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE status = 'pending'\(appCondition("app_id", app))
                                          LIMIT $1) x) AS pending,
                   (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE status = 'expanding'\(appCondition("app_id", app))
                                          LIMIT $1) x) AS expanding
            """, [bound])[0]
        func figure(_ column: String) throws -> FleetStatus.Figure {
            let counted = try counts.decode(Int64.self, column)
            return counted > limits.countLimit ? .estimate(counted, countedAtLeast: limits.countLimit) : .exact(counted)
        }
        // The app's first and last active subscription ids (ends of subscriptions_app_active) frame the cursor.
        let rows = try connection.query(
            """
            SELECT n.id, n.app_id, coalesce(n.targeted_count, 0) AS expanded, n.expansion_cursor,
                   n.expansion_touched_at,
                   (SELECT s.id FROM subscriptions s WHERE s.app_id = n.app_id AND s.status = 'active'
                    ORDER BY s.id LIMIT 1) AS first_id,
                   (SELECT s.id FROM subscriptions s WHERE s.app_id = n.app_id AND s.status = 'active'
                    ORDER BY s.id DESC LIMIT 1) AS last_id
            FROM notifications n
            WHERE n.status = 'expanding'\(appCondition("n.app_id", app))
            ORDER BY n.expansion_touched_at NULLS FIRST, n.created_at
            LIMIT $1
            """, [listedNotifications])
        // A sliced broadcast's progress is what its slices have left (migration 0019; absent before it).
        var slicesLeft: [UUID: [(after: UUID, upTo: UUID?)]] = [:]
        let hasSlices = try connection.query("SELECT to_regclass('expansion_slices') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        if hasSlices, !rows.isEmpty {
            for slice in try connection.query(
                """
                SELECT notification_id, slice_after, slice_upto FROM expansion_slices
                WHERE notification_id = ANY($1::uuid[])
                """, [try rows.map { try $0.decode(UUID.self, "id") }])
            {
                slicesLeft[try slice.decode(UUID.self, "notification_id"), default: []].append(
                    (try slice.decode(UUID.self, "slice_after"), try slice.decodeIfPresent(UUID.self, "slice_upto")))
            }
        }
        let notifications = try rows.map { row in
            let expanded = try row.decode(Int64.self, "expanded")
            let first = try row.decodeIfPresent(UUID.self, "first_id")
            let last = try row.decodeIfPresent(UUID.self, "last_id")
            let progress =
                if let left = slicesLeft[try row.decode(UUID.self, "id")] {
                    slicedExpansionProgress(left: left, first: first, last: last)
                } else {
                    try row.decodeIfPresent(UUID.self, "expansion_cursor").flatMap { cursor in
                        expansionProgress(cursor: cursor, first: first, last: last)
                    }
                }
            return FleetStatus.ExpandingNotification(
                id: try row.decode(UUID.self, "id"), appID: try row.decode(UUID.self, "app_id"), expanded: expanded,
                progress: progress,
                audienceEstimate: progress.flatMap { $0 >= 0.01 ? Int64((Double(expanded) / $0).rounded()) : nil },
                lastChunkAt: try row.decodeIfPresent(Date.self, "expansion_touched_at"))
        }
        return FleetStatus.Expansion(
            pending: try figure("pending"), expanding: try figure("expanding"), notifications: notifications)
    }

    /// Where `cursor` lies between `first` and `last` (0...1), comparing the ids' first 8 bytes as numbers:
    /// keyset pagination by id walks the id space in order, so this is the share of the audience done when
    /// ids are spread evenly (random UUIDs are). Nil without both ends.
    public static func expansionProgress(cursor: UUID, first: UUID?, last: UUID?) -> Double? {
        guard let first, let last else { return nil }
        func prefix(_ id: UUID) -> Double {
            withUnsafeBytes(of: id.uuid) { bytes in bytes.prefix(8).reduce(0.0) { $0 * 256 + Double($1) } }
        }
        let low = prefix(first)
        let high = prefix(last)
        guard high > low else { return prefix(cursor) >= high ? 1 : 0 }
        return min(1, max(0, (prefix(cursor) - low) / (high - low)))
    }

    /// ``expansionProgress(cursor:first:last:)`` of a broadcast cut into slices: one minus the share of the id
    /// range its slices left to do still hold (each from its cursor `after` to `upTo`, or to `last` for the
    /// last slice). Nil without both ends.
    public static func slicedExpansionProgress(left: [(after: UUID, upTo: UUID?)], first: UUID?, last: UUID?)
        -> Double?
    {
        guard let first, let last else { return nil }
        var remaining = 0.0
        for slice in left {
            guard let start = expansionProgress(cursor: slice.after, first: first, last: last),
                let end = expansionProgress(cursor: slice.upTo ?? last, first: first, last: last)
            else { return nil }
            remaining += max(0, end - start)
        }
        return min(1, max(0, 1 - remaining))
    }

    // MARK: Throttle

    /// Limited apps (at most ``listedRows``, by id) with their bucket refilled to `now()` and their due
    /// deliveries counted through `deliveries_claim_app` up to `limits.countLimit`. Empty when the
    /// schema predates migration 0012 (nothing else in `status` needs it).
    static func readThrottledApps(on connection: PostgresConnection, limits: Limits, app: UUID? = nil) throws
        -> [FleetStatus.ThrottledApp]
    {
        let present = try connection.query("SELECT to_regclass('app_send_buckets') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return [] }
        return try connection.query(
            """
            SELECT a.id, a.max_sends_per_second AS rate, pushizo_send_burst(a.max_sends_per_second) AS burst,
                   coalesce(pushizo_bucket_permits(a.max_sends_per_second, b.tokens, b.refilled_at, now()),
                            pushizo_send_burst(a.max_sends_per_second)) AS permits,
                   (SELECT count(*) FROM (SELECT 1 FROM deliveries d
                                          WHERE d.app_id = a.id AND d.run_at <= now()
                                          LIMIT $2) x) AS due
            FROM apps a LEFT JOIN app_send_buckets b ON b.app_id = a.id
            WHERE a.max_sends_per_second IS NOT NULL\(appCondition("a.id", app))
            ORDER BY a.id LIMIT $1
            """, [listedRows, limits.countLimit + 1]
        ).map { row in
            let due = try row.decode(Int64.self, "due")
            return FleetStatus.ThrottledApp(
                appID: try row.decode(UUID.self, "id"), maxSendsPerSecond: try row.decode(Double.self, "rate"),
                burst: try row.decode(Double.self, "burst"), permits: try row.decode(Double.self, "permits"),
                due: due > limits.countLimit
                    ? FleetStatus.Figure(value: limits.countLimit, countedAtLeast: limits.countLimit) : .exact(due))
        }
    }

    // MARK: FCM project quotas

    /// FCM projects whose bucket held sends back in the minute before `now()` (at most ``listedRows``, by project),
    /// the bucket refilled to `now()`; narrowed to `app`, the projects its fcm channel names. Empty when the
    /// schema predates migration 0034.
    static func readHeldProjects(on connection: PostgresConnection, app: UUID? = nil) throws -> [FleetStatus.HeldProject] {
        let present = try connection.query("SELECT to_regclass('fcm_project_buckets') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return [] }
        let narrowed = app == nil ? "" : """
             AND b.project_id IN (SELECT pushizo_fcm_channel_project(ch.settings) FROM app_channels ch
                                  WHERE ch.provider = 'fcm'\(appCondition("ch.app_id", app)))
            """
        return try connection.query(
            """
            SELECT b.project_id, b.per_minute::float8 AS quota, b.held_at, b.held_deliveries,
                   least(b.per_minute / 61,
                         b.tokens + b.per_minute / 61 * greatest(0, extract(epoch FROM now() - b.refilled_at)::numeric))::float8
                       AS permits
            FROM fcm_project_buckets b
            WHERE b.held_at > now() - interval '1 minute'\(narrowed)
            ORDER BY b.project_id LIMIT $1
            """, [listedRows]
        ).map { row in
            FleetStatus.HeldProject(
                project: try row.decode(String.self, "project_id"), quotaPerMinute: try row.decode(Double.self, "quota"),
                permits: try row.decode(Double.self, "permits"), heldAt: try row.decode(Date.self, "held_at"),
                heldDeliveries: try row.decode(Int64.self, "held_deliveries"))
        }
    }

    // MARK: Live Activity channels

    /// The Live Activity channel rows by reconciliation state, the channel sends queued by state and the failed
    /// rows (latest first, at most ``listedRows``), exactly; narrowed to `app`, its rows. Nil before migration 0035.
    static func readLiveActivityChannels(on connection: PostgresConnection, app: UUID? = nil) throws
        -> FleetStatus.LiveActivityChannels?
    {
        let present = try connection.query("SELECT to_regclass('live_activity_channel_sends') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return nil }
        let counts = try connection.query(
            """
            SELECT (SELECT count(*) FROM live_activity_channels WHERE reconciled_revision < revision\(appCondition("app_id", app))) AS pending,
                   (SELECT count(*) FROM live_activity_channels
                    WHERE reconciled_revision >= revision AND state = 'failed'\(appCondition("app_id", app))) AS failed,
                   (SELECT count(*) FROM live_activity_channels
                    WHERE reconciled_revision >= revision AND state = 'active'\(appCondition("app_id", app))) AS active,
                   count(*) FILTER (WHERE run_at <= now()) AS due,
                   count(*) FILTER (WHERE run_at > now() AND leased_by IS NULL) AS deferred,
                   count(*) FILTER (WHERE run_at > now() AND leased_by IS NOT NULL) AS leased
            FROM live_activity_channel_sends WHERE true\(appCondition("app_id", app))
            """)[0]
        let failed = try connection.query(
            """
            SELECT app_id, left(name, $2) AS name, left(error_reason, $2) AS reason, updated_at FROM live_activity_channels
            WHERE reconciled_revision >= revision AND state = 'failed'\(appCondition("app_id", app))
            ORDER BY updated_at DESC, app_id, name LIMIT $1
            """, [listedRows, appNameLength]
        ).map { row in
            FleetStatus.FailedChannel(
                appID: try row.decode(UUID.self, "app_id"), name: try row.decode(String.self, "name"),
                reason: try row.decodeIfPresent(String.self, "reason"), failedAt: try row.decode(Date.self, "updated_at"))
        }
        return FleetStatus.LiveActivityChannels(
            pending: try counts.decode(Int64.self, "pending"), failed: try counts.decode(Int64.self, "failed"),
            active: try counts.decode(Int64.self, "active"), sendsDue: try counts.decode(Int64.self, "due"),
            sendsDeferred: try counts.decode(Int64.self, "deferred"), sendsLeased: try counts.decode(Int64.self, "leased"),
            failedChannels: failed)
    }

    // MARK: Channels

    static func readPausedChannels(on connection: PostgresConnection, app: UUID? = nil) throws
        -> [FleetStatus.PausedChannel]
    {
        try connection.query(
            """
            SELECT app_id, provider, paused_until, paused_reason FROM app_channels
            WHERE paused_until > now()\(appCondition("app_id", app)) ORDER BY paused_until DESC, app_id, provider LIMIT $1
            """, [listedRows]
        ).map { row in
            FleetStatus.PausedChannel(
                appID: try row.decode(UUID.self, "app_id"), provider: try row.decode(String.self, "provider"),
                pausedUntil: try row.decode(Date.self, "paused_until"),
                reason: try row.decodeIfPresent(String.self, "paused_reason"))
        }
    }

    // MARK: One app, operator pauses

    /// ` AND <column> = '<app>'` when narrowed to an app, else nothing. The id is a typed UUID written in its
    /// canonical form, so it is a literal, not text from outside.
    static func appCondition(_ column: String, _ app: UUID?) -> String {
        guard let app else { return "" }
        return " AND \(column) = '\(CanonicalUUIDText.format(app))'::uuid"
    }

    /// ``QueueLagStore/claimRangesCTE`` narrowed to one app's ranges when `app` is given.
    static func claimRanges(_ app: UUID?) -> String {
        guard app != nil else { return QueueLagStore.claimRangesCTE }
        let all = "WHERE turn_at < 'infinity'"
        precondition(QueueLagStore.claimRangesCTE.contains(all), "claimRangesCTE lists queued apps differently")
        return QueueLagStore.claimRangesCTE.replacingOccurrences(of: all, with: all + appCondition("app_id", app))
    }

    /// The worker processes by their heartbeats (``WorkerHeartbeatStore``): live and stopping first (by host, pid),
    /// then stale (longest unseen last), then stopped (latest first), at most ``listedRows``; one scan of a table
    /// of one row per process of the last day. Nil before migration 0029.
    static func readWorkers(on connection: PostgresConnection) throws -> [FleetStatus.Worker]? {
        let present = try connection.query("SELECT to_regclass('worker_heartbeats') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return nil }
        return try connection.query(
            """
            SELECT w.worker_id, w.leased_by, w.host, w.pid, w.version, w.commit, w.roles, w.started_at, w.last_seen_at,
                   greatest(0, extract(epoch FROM now() - w.last_seen_at))::float8 AS seen_ago, w.heartbeat_seconds,
                   w.in_flight, w.claims_per_minute, w.sends_per_minute, w.stopping_at, w.stopped_at, s.state
            FROM worker_heartbeats w
            CROSS JOIN LATERAL (
                SELECT CASE WHEN w.stopped_at IS NOT NULL THEN 'stopped'
                            WHEN NOT (\(WorkerHeartbeatStore.liveCondition)) THEN 'stale'
                            WHEN w.stopping_at IS NOT NULL THEN 'stopping'
                            ELSE 'live' END AS state
            ) s
            ORDER BY CASE s.state WHEN 'stale' THEN 1 WHEN 'stopped' THEN 2 ELSE 0 END,
                     CASE WHEN s.state IN ('live', 'stopping') THEN w.host END, CASE WHEN s.state IN ('live', 'stopping') THEN w.pid END,
                     coalesce(w.stopped_at, w.last_seen_at) DESC, w.worker_id
            LIMIT $1
            """, [listedRows]
        ).map { row in
            FleetStatus.Worker(
                workerID: try row.decode(UUID.self, "worker_id"), leasedBy: try row.decode(String.self, "leased_by"),
                host: try row.decode(String.self, "host"), pid: try row.decode(Int32.self, "pid"),
                version: try row.decode(String.self, "version"), commit: try row.decode(String.self, "commit"),
                roles: try row.decode([String].self, "roles"),
                state: FleetStatus.Worker.State(rawValue: try row.decode(String.self, "state")) ?? .stale,
                startedAt: try row.decode(Date.self, "started_at"), lastSeenAt: try row.decode(Date.self, "last_seen_at"),
                lastSeenSecondsAgo: try row.decode(Double.self, "seen_ago"),
                heartbeatSeconds: try row.decode(Double.self, "heartbeat_seconds"),
                inFlight: Int64(try row.decode(Int32.self, "in_flight")),
                claimsPerMinute: try row.decode(Double.self, "claims_per_minute"),
                sendsPerMinute: try row.decode(Double.self, "sends_per_minute"),
                stoppingAt: try row.decodeIfPresent(Date.self, "stopping_at"),
                stoppedAt: try row.decodeIfPresent(Date.self, "stopped_at"))
        }
    }

    /// The fleet's operator pause (`fleet_settings`) and the paused apps (`apps.paused_until` ahead; only `app`
    /// when narrowed), at most ``listedRows``. Nothing before migration 0028.
    static func readOperatorPauses(on connection: PostgresConnection, app: UUID?, into status: inout FleetStatus) throws {
        let present = try connection.query("SELECT to_regclass('fleet_settings') IS NOT NULL AS present")[0]
            .decode(Bool.self, "present")
        guard present else { return }
        if let fleet = try connection.query(
            "SELECT paused_until, paused_reason FROM fleet_settings WHERE paused_until > now()").first
        {
            status.fleetPause = FleetStatus.Pause(
                until: try fleet.decode(Date.self, "paused_until"), reason: try fleet.decodeIfPresent(String.self, "paused_reason"))
        }
        status.pausedApps = try connection.query(
            """
            SELECT id, paused_until, paused_reason FROM apps
            WHERE paused_until > now()\(appCondition("id", app)) ORDER BY paused_until DESC, id LIMIT $1
            """, [listedRows]
        ).map { row in
            FleetStatus.PausedApp(
                appID: try row.decode(UUID.self, "id"), pausedUntil: try row.decode(Date.self, "paused_until"),
                reason: try row.decodeIfPresent(String.self, "paused_reason"))
        }
        try readOperatorNotes(on: connection, app: app, into: &status)
    }

    /// The operator's note (`--note`, `operator_actions.reason`) of each operator's pause listed: that of the
    /// `pause` that set the pause in force, the latest of its target that changed something (`rows_affected` > 0;
    /// none when that one had no note). A `pause` that found the target already so is recorded but changed
    /// nothing, its note included: a second `pause` run to check keeps the first one's reason on show.
    static func readOperatorNotes(on connection: PostgresConnection, app: UUID?, into status: inout FleetStatus) throws {
        let operatorPaused = status.fleetPause?.reason == "operator" || status.pausedApps.contains { $0.reason == "operator" }
            || status.pausedChannels.contains { $0.reason == "operator" }
        guard operatorPaused else { return }
        var notes: [String: String] = [:]
        for row in try connection.query(
            """
            SELECT DISTINCT ON (scope, app_id, provider) scope, app_id::text AS app_id, provider, reason
            FROM operator_actions WHERE action = 'pause' AND rows_affected > 0\(app.map { " AND (app_id IS NULL OR app_id = '\(CanonicalUUIDText.format($0))'::uuid)" } ?? "")
            ORDER BY scope, app_id, provider, id DESC
            """)
        {
            guard let note = try row.decodeIfPresent(String.self, "reason") else { continue }
            let key = [row["scope"] ?? "", row["app_id"] ?? "", row["provider"] ?? ""].joined(separator: "/")
            notes[key] = note
        }
        if status.fleetPause?.reason == "operator" { status.fleetPause?.note = notes["fleet//"] }
        for index in status.pausedApps.indices where status.pausedApps[index].reason == "operator" {
            status.pausedApps[index].note = notes["app/\(CanonicalUUIDText.format(status.pausedApps[index].appID))/"]
        }
        for index in status.pausedChannels.indices where status.pausedChannels[index].reason == "operator" {
            let channel = status.pausedChannels[index]
            status.pausedChannels[index].note = notes["channel/\(CanonicalUUIDText.format(channel.appID))/\(channel.provider)"]
        }
    }

    /// The names of the apps `status` lists (by primary key: at most a few thousand lookups, each an index probe).
    static func readAppNames(on connection: PostgresConnection, of status: FleetStatus) throws -> [FleetStatus.AppName] {
        var ids = status.pausedChannels.map(\.appID) + status.pausedApps.map(\.appID) + status.throttledApps.map(\.appID)
        ids += status.expansion.notifications.map(\.appID) + (status.app.map { [$0] } ?? [])
        ids += status.liveActivityChannels?.failedChannels.map(\.appID) ?? []
        let listed = Array(Set(ids.map(CanonicalUUIDText.format))).sorted()
        guard !listed.isEmpty else { return [] }
        return try connection.query(
            "SELECT id, left(name, $2) AS name FROM apps WHERE id = ANY($1::uuid[]) AND name <> '' ORDER BY id",
            [listed, appNameLength]
        ).map { row in
            FleetStatus.AppName(appID: try row.decode(UUID.self, "id"), name: try row.decode(String.self, "name"))
        }
    }
}
