import BuildInfo
import DeliveryCore
import Foundation
import Metrics
import Synchronization

/// The worker's Prometheus metrics (docs/metrics.md lists each with its type, labels and meaning).
///
/// One object per `run`, passed to the parts that count (service, completer, pipeline, senders); it exists
/// whether or not `PUSHIZO_METRICS_LISTEN` is set (counting costs a lock and an add), and the listener, when
/// set, renders ``registry``. Labels are bounded: `provider` is `apns`, `fcm`, `webpush` or `none`; `event` one
/// of `delivery_events.event`'s five values; `reason` a known reason or a fold of it
/// (``reasonLabel(_:)``). Never a token, an id or an endpoint.
public final class WorkerMetrics: Sendable {
    public let registry: MetricsRegistry

    /// Seconds: sends, claims and completion writes (5 ms ... 60 s).
    public static let durationBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
    /// The `version` label of `pushizo_build_info`: the release (``BuildInfo/version``, from `VERSION`).
    public static let version = BuildInfo.version
    /// The `commit` label of `pushizo_build_info`: the git commit built (``BuildInfo/commit``).
    public static let commit = BuildInfo.commit
    /// The provider label of deliveries that reached no provider (an unknown platform).
    static let noProvider = "none"

    let deliveries: CounterFamily
    let sendDuration: HistogramFamily
    let claimDuration: HistogramFamily
    let claimedDeliveries: CounterFamily
    let completionDuration: HistogramFamily
    let completionsWritten: CounterFamily
    let completionsIgnored: CounterFamily
    let completionWriteFailures: CounterFamily
    let queueDeliveries: GaugeFamily
    let queueOldestDueAge: GaugeFamily
    let channelsPaused: GaugeFamily
    let appsPaused: GaugeFamily
    let fleetPaused: GaugeFamily
    let queueSampledAt: GaugeFamily
    let queueSampleFraction: GaugeFamily
    let queueSampleFailures: CounterFamily
    /// `pushizo_database_server_info{host,port}`: the server the last sample's connection reached.
    let databaseServer: GaugeFamily
    let http2Connections: GaugeFamily
    let http2Streams: GaugeFamily
    let http2Waiting: GaugeFamily
    let tokenRefreshes: CounterFamily
    let tokenRefreshFailures: CounterFamily
    let channelPauses: CounterFamily
    let expansionDeliveries: CounterFamily
    let notificationsExpanded: CounterFamily
    let plannerStatisticsRefreshes: CounterFamily
    let plannerStatisticsFailures: CounterFamily
    /// UNIX seconds: the soonest `notAfter` of a kind of credential in use (`kind` = `apns_certificate`).
    let credentialExpiry: GaugeFamily
    /// Seconds PostgreSQL's clock is ahead of this host's (negative: behind), as the last reading measured it.
    let databaseClockOffset: GaugeFamily
    let deliveriesRescued: CounterFamily
    let fleetWorkers: GaugeFamily
    /// `pushizo_schema_compatible`: 1 while the database's migrations are ones this build runs with, 0 once a
    /// judgement refused them (``WorkerSchema``); unset before the start-up check.
    let schemaCompatible: GaugeFamily
    /// `pushizo_live_activity_channel_sends_total{event,reason}`: channel sends settled by this worker.
    let liveActivityChannelSends: CounterFamily
    /// `pushizo_live_activity_channel_changes_total{result,reason}`: channel rows reconciled by this worker.
    let liveActivityChannelChanges: CounterFamily
    /// `pushizo_live_activity_channels{state}`: the fleet's channel rows pending or failed; sampled.
    let liveActivityChannels: GaugeFamily
    /// `pushizo_queue_live_activity_channel_sends{state}`: the fleet's channel sends queued; sampled.
    let queuedLiveActivityChannelSends: GaugeFamily

    /// Read at render time: the service's in-flight sends and unwritten completions (set by the service).
    private let live = LiveSources()

    private final class LiveSources: Sendable {
        let sources = Mutex<(inFlight: @Sendable () -> Int, pending: @Sendable () -> Int)?>(nil)
        var inFlight: Double? { sources.withLock { $0 }.map { Double($0.inFlight()) } }
        var pending: Double? { sources.withLock { $0 }.map { Double($0.pending()) } }
    }

    public init() {
        let registry = MetricsRegistry()
        self.registry = registry
        registry.gauge(
            "pushizo_build_info", help: "Always 1; the labels name the build.", labels: ["version", "commit", "swift"]
        ).set(1, LabelValues(Self.version, Self.commit, Self.swiftVersion))
        deliveries = registry.counter(
            "pushizo_deliveries_total",
            help: "Delivery outcomes decided by this worker, by provider, delivery_events.event and reason (sent has reason \"\").",
            labels: ["provider", "event", "reason"])
        sendDuration = registry.histogram(
            "pushizo_send_duration_seconds",
            help: "Seconds of one delivery's provider exchange (token, request, answer; a refresh and resend included).",
            labels: ["provider"], buckets: Self.durationBuckets)
        claimDuration = registry.histogram(
            "pushizo_claim_batch_duration_seconds",
            help: "Seconds of one claim statement (round trip included), successful or not.", buckets: Self.durationBuckets)
        claimedDeliveries = registry.counter(
            "pushizo_claimed_deliveries_total", help: "Deliveries claimed by this worker (those leased at insert included).")
        completionDuration = registry.histogram(
            "pushizo_completion_batch_duration_seconds",
            help: "Seconds of writing one batch of completions (one transaction), successful or not.",
            buckets: Self.durationBuckets)
        completionsWritten = registry.counter(
            "pushizo_completions_written_total", help: "Completions written (queue row changed, event appended).")
        completionsIgnored = registry.counter(
            "pushizo_completions_ignored_total",
            help: "Completions ignored because their delivery was claimed again after its lease ran out (fence mismatch).")
        completionWriteFailures = registry.counter(
            "pushizo_completion_write_failures_total", help: "Completion batches PostgreSQL refused or could not take.")
        registry.callback(
            "pushizo_sends_in_flight", help: "Deliveries being processed now (claimed, answer not yet in).", type: .gauge
        ) { [live] in live.inFlight }
        registry.callback(
            "pushizo_completions_pending",
            help: "Completions not yet written (the completion backlog); each holds a concurrency slot.", type: .gauge
        ) { [live] in live.pending }
        queueDeliveries = registry.gauge(
            "pushizo_queue_deliveries",
            help: "Deliveries in the queue by provider and state (due, held: due but held by an operator's pause of their app or the fleet, deferred, leased), fleet-wide; sampled.",
            labels: ["provider", "state"])
        queueOldestDueAge = registry.gauge(
            "pushizo_queue_oldest_due_age_seconds",
            help: "Seconds the oldest due delivery has been due (queue lag), fleet-wide, those an operator's pause holds left out; 0 when none is due; sampled.",
            labels: ["provider"])
        channelsPaused = registry.gauge(
            "pushizo_channels_paused",
            help: "App channels paused now (app_channels.paused_until in the future), fleet-wide, by provider and paused_by: operator (pushizo-worker pause) or provider (its refusal of the app's credentials or settings); sampled.",
            labels: ["provider", "paused_by"])
        appsPaused = registry.gauge(
            "pushizo_apps_paused",
            help: "Apps an operator paused (apps.paused_until in the future), fleet-wide; sampled. The same on every worker: aggregate with max.")
        fleetPaused = registry.gauge(
            "pushizo_fleet_paused",
            help: "1 while an operator has paused the whole fleet (pushizo-worker pause --fleet: no claims; sends in flight finish), else 0; sampled. The same on every worker: aggregate with max.")
        queueSampledAt = registry.gauge(
            "pushizo_queue_sample_timestamp_seconds",
            help: "Unix time of the last successful queue sample (the pushizo_queue_* gauges and the pause gauges pushizo_channels_paused, pushizo_apps_paused, pushizo_fleet_paused).")
        queueSampleFraction = registry.gauge(
            "pushizo_queue_sample_fraction",
            help: "Share of the queue the last sample counted: 1 when exact; below 1 on queues over 1,000,000 deliveries, whose pushizo_queue_* values are estimates scaled from a block sample.")
        queueSampleFailures = registry.counter(
            "pushizo_queue_sample_failures_total", help: "Queue samples that failed (database unreachable, timeout).")
        databaseServer = registry.gauge(
            "pushizo_database_server_info",
            help: "Always 1; the labels name the PostgreSQL server (libpq's PQhost and PQport) the worker's connections reached at the last sample: after a failover through a multi-host PUSHIZO_DATABASE_URL, the new primary.",
            labels: ["host", "port"])
        http2Connections = registry.gauge(
            "pushizo_http2_connections", help: "HTTP/2 connections open by provider kind; sampled.", labels: ["provider"])
        http2Streams = registry.gauge(
            "pushizo_http2_open_streams", help: "HTTP/2 streams open by provider kind; sampled.", labels: ["provider"])
        http2Waiting = registry.gauge(
            "pushizo_http2_waiting_requests",
            help: "Requests waiting for a stream or a connection by provider kind; sampled.", labels: ["provider"])
        tokenRefreshes = registry.counter(
            "pushizo_token_refreshes_total",
            help: "Provider tokens made: APNs provider tokens signed, FCM access tokens fetched.", labels: ["provider"])
        tokenRefreshFailures = registry.counter(
            "pushizo_token_refresh_failures_total",
            help: "Provider tokens that could not be made (signing failed, token endpoint refused or unreachable).",
            labels: ["provider"])
        channelPauses = registry.counter(
            "pushizo_channel_pauses_total", help: "Channel pauses decided by this worker, by provider and reason.",
            labels: ["provider", "reason"])
        expansionDeliveries = registry.counter(
            "pushizo_expansion_deliveries_total", help: "Delivery rows created by expanding notifications.")
        notificationsExpanded = registry.counter(
            "pushizo_notification_expansions_total",
            help: "Notifications whose expansion ended, by outcome (expanded, failed).", labels: ["outcome"])
        plannerStatisticsRefreshes = registry.counter(
            "pushizo_planner_statistics_refreshes_total",
            help: "Grown tables this worker had analyzed (outcome analyzed) or found held by another session (outcome skipped).",
            labels: ["table", "outcome"])
        plannerStatisticsFailures = registry.counter(
            "pushizo_planner_statistics_failures_total",
            help: "Checks or refreshes of grown tables' planner statistics that failed (database unreachable, function missing or not granted).")
        credentialExpiry = registry.gauge(
            "pushizo_credential_expiry_timestamp_seconds",
            help: "UNIX time at which the soonest-expiring credential of a kind this worker sends with expires (kind: apns_certificate).",
            labels: ["kind"])
        databaseClockOffset = registry.gauge(
            "pushizo_database_clock_offset_seconds",
            help: "Seconds PostgreSQL's clock is ahead of this host's (negative: behind), measured with the last claim to within half its round trip; PostgreSQL's clock decides due times, expiry, local times and retries.")
        deliveriesRescued = registry.counter(
            "pushizo_deliveries_rescued_total",
            help: "Deliveries this worker claimed after another claim's lease on them ran out without a completion (its worker died, hung or lost the database), by provider.",
            labels: ["provider"])
        fleetWorkers = registry.gauge(
            "pushizo_fleet_workers",
            help: "Live workers of the whole fleet (worker_heartbeats rows seen within 3 of their heartbeat intervals, this one included), counted with this worker's last heartbeat; the same on every worker: aggregate with max, not sum.")
        schemaCompatible = registry.gauge(
            "pushizo_schema_compatible",
            help: "1 while the database's migrations are ones this build runs with (judged at start and again by /readyz, at most once a minute), 0 once a judgement refused them: a migration headed -- pushizo:oldest-worker beyond this build (restart it with a newer binary), or one it needs missing (run migrate).")
        liveActivityChannelSends = registry.counter(
            "pushizo_live_activity_channel_sends_total",
            help: "Live Activity channel sends (one broadcast request on a channel each, docs/live-activity-channels.md) settled by this worker, by delivery_events.event and reason (sent has reason \"\").",
            labels: ["event", "reason"])
        liveActivityChannelChanges = registry.counter(
            "pushizo_live_activity_channel_changes_total",
            help: "Live Activity channel rows this worker reconciled with APNs, by result (active, deleted, failed, retrying) and reason (\"\" for active and deleted).",
            labels: ["result", "reason"])
        liveActivityChannels = registry.gauge(
            "pushizo_live_activity_channels",
            help: "Live Activity channel rows of the fleet by state: pending (a change not yet made at APNs: reconciled_revision < revision) and failed (APNs refused it for good); sampled with the queue.",
            labels: ["state"])
        queuedLiveActivityChannelSends = registry.gauge(
            "pushizo_queue_live_activity_channel_sends",
            help: "Live Activity channel sends waiting in live_activity_channel_sends, fleet-wide, by state (due, deferred, leased, as pushizo_queue_deliveries); sampled with the queue.",
            labels: ["state"])
        for provider in Provider.allCases { deliveriesRescued.touch(LabelValues(provider.rawValue)) }
        // Web Push's VAPID tokens are signed per push-service origin and not counted here.
        for provider in [Provider.apns.rawValue, Provider.fcm.rawValue] {
            tokenRefreshes.touch(LabelValues(provider))
            tokenRefreshFailures.touch(LabelValues(provider))
        }
    }

    /// The compiler that built this binary.
    static var swiftVersion: String {
        #if compiler(>=6.3)
            "6.3"
        #elseif compiler(>=6.2)
            "6.2"
        #elseif compiler(>=6.1)
            "6.1"
        #else
            "6.0"
        #endif
    }

    // MARK: Recording

    /// Seconds from `start` until now.
    static func seconds(since start: ContinuousClock.Instant) -> Double {
        seconds(from: start, to: .now)
    }

    /// Seconds from `start` to `end`.
    static func seconds(from start: ContinuousClock.Instant, to end: ContinuousClock.Instant) -> Double {
        (end - start).inSeconds
    }

    /// One claim statement ended at `end` (`claimed` rows; 0 also when it failed).
    func claimFinished(startedAt start: ContinuousClock.Instant, endedAt end: ContinuousClock.Instant = .now, claimed: Int) {
        claimDuration.observe(Self.seconds(from: start, to: end))
        claimedDeliveries.add(Double(claimed))
    }

    /// `count` deliveries were leased to this worker as an expansion chunk inserted them: counted as claimed, with
    /// no claim statement's duration.
    func leasedAtInsert(_ count: Int) {
        claimedDeliveries.add(Double(count))
    }

    /// One completion batch write ended: `written` completions applied, `ignored` for a lost lease, or the
    /// batch refused (`failed`).
    func completionBatchFinished(startedAt start: ContinuousClock.Instant, written: Int, ignored: Int, failed: Bool) {
        completionDuration.observe(Self.seconds(since: start))
        if failed {
            completionWriteFailures.add()
        } else {
            completionsWritten.add(Double(written))
            completionsIgnored.add(Double(ignored))
        }
    }

    /// A chunk of expansion created `created` delivery rows; `finished` when the notification is done.
    func expanded(created: Int, outcome: String?) {
        expansionDeliveries.add(Double(created))
        if let outcome { notificationsExpanded.add(1, LabelValues(outcome)) }
    }

    /// A bulk pass over small notifications: `expanded` notifications ended with `created` deliveries between
    /// them, `failed` notifications failed.
    func expandedInBulk(expanded: Int, created: Int, failed: Int) {
        expansionDeliveries.add(Double(created))
        if expanded > 0 { notificationsExpanded.add(Double(expanded), LabelValues("expanded")) }
        if failed > 0 { notificationsExpanded.add(Double(failed), LabelValues("failed")) }
    }

    /// A refresh of grown tables' planner statistics: the tables analyzed, and those skipped (held by another
    /// session).
    func plannerStatistics(analyzed: [String], skipped: [String]) {
        for table in analyzed { plannerStatisticsRefreshes.add(1, LabelValues(table, "analyzed")) }
        for table in skipped { plannerStatisticsRefreshes.add(1, LabelValues(table, "skipped")) }
    }

    /// Deliveries of one claimed batch rescued from expired leases, per provider (`nil`: none serves the platform).
    func rescued(byProvider: [Provider?: Int]) {
        for (provider, count) in byProvider {
            deliveriesRescued.add(Double(count), LabelValues(Self.providerLabel(provider)))
        }
    }

    /// The fleet's live workers as this worker's last heartbeat counted them.
    func fleetWorkersSeen(_ live: Int) {
        fleetWorkers.set(Double(live))
    }

    /// Deliveries claimed since start (those leased at insert included): what the heartbeat's claim rate is
    /// taken from.
    var claimedSoFar: Double { claimedDeliveries.value() }

    /// Provider exchanges ended since start, every provider together: what the heartbeat's send rate is taken
    /// from.
    var sendsSoFar: Double {
        Provider.allCases.reduce(0) { $0 + Double(sendDuration.count(LabelValues($1.rawValue))) }
    }

    /// A check or refresh of planner statistics that failed.
    func plannerStatisticsFailed() {
        plannerStatisticsFailures.add()
    }

    /// Where the in-flight and pending gauges read their values (the running service).
    func observe(inFlight: @escaping @Sendable () -> Int, pending: @escaping @Sendable () -> Int) {
        live.sources.withLock { $0 = (inFlight, pending) }
    }

    /// The offset of a reading of PostgreSQL's clock from this host's, in seconds (positive: PostgreSQL's is
    /// ahead; see docs/clocks.md).
    func databaseClockRead(offsetSeconds: Double) {
        databaseClockOffset.set(offsetSeconds)
    }

    /// One delivery's outcome (its completion, before it is written).
    func delivered(provider: Provider?, event: DeliveryEvent, reason: DeliveryReason?) {
        deliveries.add(1, LabelValues(Self.providerLabel(provider), event.rawValue, Self.reasonLabel(reason)))
    }

    func sendFinished(provider: Provider, seconds: Double) {
        sendDuration.observe(seconds, LabelValues(provider.rawValue))
    }

    /// A Live Activity channel send was settled with `event` (a `delivery_events.event`) and `reason`.
    func liveActivityChannelSendSettled(event: DeliveryEvent, reason: DeliveryReason?) {
        liveActivityChannelSends.add(1, LabelValues(event.rawValue, Self.reasonLabel(reason)))
    }

    /// The values of `pushizo_live_activity_channel_changes_total`'s `result` label.
    enum ChannelChangeResult: String, CaseIterable {
        case active, deleted, failed, retrying
    }

    /// A Live Activity channel row was reconciled: its result and the reason of a failure or retry.
    func liveActivityChannelChanged(_ result: ChannelChangeResult, reason: DeliveryReason?) {
        liveActivityChannelChanges.add(1, LabelValues(result.rawValue, Self.reasonLabel(reason)))
    }

    func channelPaused(provider: Provider, reason: DeliveryReason) {
        channelPauses.add(1, LabelValues(provider.rawValue, Self.reasonLabel(reason)))
    }

    /// A provider token was made (`succeeded`) or could not be.
    public func tokenRefreshed(provider: Provider, succeeded: Bool) {
        (succeeded ? tokenRefreshes : tokenRefreshFailures).add(1, LabelValues(provider.rawValue))
    }

    // MARK: Bounded labels

    static func providerLabel(_ provider: Provider?) -> String {
        provider?.rawValue ?? noProvider
    }

    /// A provider as a table holds it (`app_channels.provider`, which a producer writes): the label when the
    /// worker knows it, else `other`.
    static func providerLabel(column provider: String?) -> String {
        guard let provider else { return noProvider }
        return Provider(rawValue: provider) != nil ? provider : MetricsRegistry.overflowLabelValue
    }

    /// `reason` when it is one the worker or a provider documents, `http_4xx` / `http_5xx` for an
    /// undocumented status, else `other`; `""` for none. Provider reasons come from the network (APNs's
    /// `reason` text), so they are never used as labels unchecked.
    static func reasonLabel(_ reason: DeliveryReason?) -> String {
        guard let reason = reason?.rawValue, !reason.isEmpty else { return "" }
        if knownReasons.contains(reason) { return reason }
        if reason.hasPrefix("http_"), reason.utf8.count == 8, let status = Int(reason.dropFirst(5)) {
            switch status {
            case 400..<500: return "http_4xx"
            case 500..<600: return "http_5xx"
            default: break
            }
        }
        return MetricsRegistry.overflowLabelValue
    }

    /// The worker's own reasons and the providers' documented ones, as the classifiers spell them
    /// (docs/provider-answers.md).
    static let knownReasons: Set<String> = Set(DeliveryReason.documented.map(\.rawValue))
}
