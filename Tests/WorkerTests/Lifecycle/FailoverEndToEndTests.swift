import Emulator
import Foundation
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// A fleet pointed at a multi-host URL (`host=a,b`, `target_session_attrs=read-write`: libpq's own failover)
/// follows a promoted standby: the real `pushizo-worker run` drains a 20,000-device broadcast while the primary's
/// postmaster is killed with `kill -9` and the standby is promoted with `pg_ctl promote`. Nothing waits on a
/// wall-clock budget: the hang guards are generous, and what is asserted (one terminal event per delivery, every
/// delivery accepted by the emulator) holds however slow the machine is. The times and duplicate counts are
/// printed, not asserted.
@Suite("Failover to a promoted standby", .serialized)
struct FailoverEndToEndTests {
    static let broadcastSize = 20_000

    /// What one run through a failover measured.
    struct Outcome: CustomStringConvertible {
        let replication: ReplicatedCluster.Replication
        let manager: ReplicatedCluster.Manager
        /// The ports of the first primary and of the standby that took over.
        let primaryPort: Int
        let standbyPort: Int
        /// Deliveries with exactly one terminal event (`sent`, `failed`, `skipped`).
        let settledOnce: Int
        /// Deliveries with more than one terminal event.
        let settledTwice: Int
        /// Requests the emulator answered 200, and the distinct `apns-id`s among them.
        let accepted: Int
        let distinctAccepted: Int
        /// `sent` events whose `apns-id` the emulator never accepted.
        let sentButNotAccepted: Int
        /// Devices the emulator accepted more than one request for (whatever their `apns-id`).
        let devicesSentTwice: Int
        /// Sent events before the kill, as the test last read them.
        let sentBeforeKill: Int
        /// Seconds from the kill to `pg_ctl promote` returning, and to the first lease on the new primary (a claim,
        /// or deliveries leased as they are inserted).
        let killToPromoted: Double
        let killToFirstClaim: Double?
        /// The server `pushizo_database_server_info` named before the kill and after the drain, and the one
        /// `pushizo-worker status --json` named after the drain (`port` values).
        let metricsServerBefore: String?
        let metricsServerAfter: String?
        let statusServerAfter: String?

        var description: String {
            let claim = killToFirstClaim.map { String(format: "%.2f s", $0) } ?? "none"
            return "failover (\(replication.rawValue) replication, promoted by \(manager.rawValue)): killed after \(sentBeforeKill) of \(FailoverEndToEndTests.broadcastSize) sent; "
                + String(format: "kill -> promoted %.2f s, ", killToPromoted) + "kill -> first lease on the new primary \(claim); "
                + "emulator accepted \(accepted) requests, \(distinctAccepted) distinct apns-ids, "
                + "\(accepted - distinctAccepted) sent again with the same apns-id, \(devicesSentTwice) devices got two; "
                + "\(settledOnce) deliveries with one terminal event, \(settledTwice) with more"
        }
    }

    /// Opens a connection to `url`, runs `sql`, closes it; nil while no server takes the connection.
    static func read(_ url: String, _ sql: String, _ parameters: [any PostgresEncodable] = []) async -> [PostgresRow]? {
        try? await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-read")
            defer { connection.close() }
            return Array(try connection.query(sql, parameters))
        }
    }

    static func count(_ url: String, _ sql: String, _ parameters: [any PostgresEncodable] = []) async -> Int? {
        guard let rows = await read(url, sql, parameters), let first = rows.first else { return nil }
        return try? first.decode(Int.self, "n")
    }

    /// Polls `condition` every 200 ms; records an issue when it has not held after `limit` seconds (a hang guard).
    @discardableResult
    static func until(_ what: String, limit: Double, _ condition: () async -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(limit)
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("timed out waiting until \(what)")
        return false
    }

    /// Seeds the broadcast, starts the worker on the multi-host URL, kills the primary once `killAfter`
    /// deliveries are sent, promotes the standby, and waits for the worker to drain the queue on it.
    static func broadcastThroughFailover(
        _ replication: ReplicatedCluster.Replication, managedBy manager: ReplicatedCluster.Manager = .byHand,
        killAfter: Int = 4_000
    ) async throws -> Outcome {
        try await ReplicatedCluster.with(replication, managedBy: manager) { cluster in
            try await EmulatorHarness.with(latency: 0.05, retainLimit: 4 * broadcastSize) { emulator in
                try await onThread {
                    let seed = try SmallNotificationEndToEndTests.seedSubscriptions(cluster.url, emulator, count: broadcastSize)
                    defer { seed.connection.close() }
                    // Every lease taken (a claim's fence bump, a delivery an expansion chunk inserts leased to its
                    // worker, fence 1, or a page leased or rescued) leaves its time and server here, replicated like the lease itself, so
                    // the first lease on the new primary is read after the run, not raced for.
                    try seed.connection.execute(
                        """
                        CREATE TABLE failover_claims (
                            at timestamptz NOT NULL DEFAULT clock_timestamp(), port int NOT NULL DEFAULT inet_server_port());
                        CREATE FUNCTION failover_claim() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN INSERT INTO failover_claims DEFAULT VALUES; RETURN NEW; END $$;
                        CREATE TRIGGER failover_claim BEFORE UPDATE ON deliveries FOR EACH ROW
                            WHEN (NEW.fence > OLD.fence) EXECUTE FUNCTION failover_claim();
                        CREATE TRIGGER failover_lease_at_insert BEFORE INSERT ON deliveries FOR EACH ROW
                            WHEN (NEW.fence > 0) EXECUTE FUNCTION failover_claim();
                        CREATE TRIGGER failover_page_lease BEFORE INSERT OR UPDATE OF fence ON delivery_pages FOR EACH ROW
                            EXECUTE FUNCTION failover_claim();
                        """)
                    try seed.notification(target: #"{"all": true}"#)
                }
                // Leases short enough that deliveries claimed on the dead primary come back soon; the request and
                // delivery timeouts fit inside them (PUSHIZO_DELIVERY_TIMEOUT is at most half the lease).
                let metricsPort = try freePort()
                let metricsURL = "http://127.0.0.1:\(metricsPort)/metrics"
                let worker = emulator.workerProcess(
                    databaseURL: cluster.url,
                    extra: [
                        "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(metricsPort)", "PUSHIZO_CONCURRENCY": "64", "PUSHIZO_CLAIM_BATCH": "32", "PUSHIZO_LEASE_SECONDS": "20",
                        "PUSHIZO_REQUEST_TIMEOUT": "8", "PUSHIZO_SHUTDOWN_TIMEOUT": "5",
                    ])
                try worker.run()
                defer { if worker.isRunning { worker.terminate() } }
                let sentSQL = "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'"
                var sentBeforeKill = 0
                try await until("\(killAfter) deliveries are sent", limit: 600) {
                    sentBeforeKill = await count(cluster.url, sentSQL) ?? 0
                    return sentBeforeKill >= killAfter
                }
                var metricsServerBefore: String?
                try await until("the metrics name the database server", limit: 120) {
                    metricsServerBefore = serverPort(in: (try? await scrape(metricsURL)) ?? "")
                    return metricsServerBefore != nil
                }
                let killed = Date()
                let killedAt = ContinuousClock.now
                try await onThread { try cluster.killPrimary() }
                try await onThread { try cluster.promoteStandby() }
                let standbyURL = "postgresql://postgres@127.0.0.1:\(cluster.standbyPort)/pushizo"
                try await until("the standby is promoted", limit: 300) {
                    await count(standbyURL, "SELECT count(*) AS n WHERE NOT pg_is_in_recovery()") == 1
                }
                let killToPromoted = seconds(killedAt.duration(to: .now))
                try await until("the worker drains the broadcast on the new primary", limit: 900) {
                    let queued = await count(cluster.url, "SELECT count(*) AS n FROM deliveries")
                    let sent = await count(cluster.url, sentSQL) ?? 0
                    return queued == 0 && sent >= broadcastSize
                }
                // The sampler names the server every 15 s (WorkerMetrics.sampleInterval).
                var metricsServerAfter: String?
                try await until("the metrics name the new primary", limit: 120) {
                    metricsServerAfter = serverPort(in: (try? await scrape(metricsURL)) ?? "")
                    return metricsServerAfter == "\(cluster.standbyPort)"
                }
                worker.terminate()
                try await onThread { worker.waitUntilExit() }
                let (_, statusJSON, _) = try await StatusCommandTests.status(["--json"], databaseURL: cluster.url)
                let statusObject = try? JSONSerialization.jsonObject(with: Data(statusJSON.utf8)) as? [String: Any]
                let statusServerAfter = (statusObject?["server"] as? [String: String])?["port"]

                let perDelivery = await read(
                    cluster.url,
                    """
                    SELECT count(*) FILTER (WHERE n = 1) AS once, count(*) FILTER (WHERE n > 1) AS more FROM (
                        SELECT subscription_id, count(*) AS n FROM delivery_events
                        WHERE event IN ('sent', 'failed', 'skipped') GROUP BY subscription_id) s
                    """) ?? []
                let sentIDs = Set(
                    (await read(cluster.url, "SELECT detail->>'apns_id' AS id FROM delivery_events WHERE event = 'sent'") ?? [])
                        .compactMap { $0["id"] }.map { $0.lowercased() })
                let firstClaim = await read(
                    cluster.url,
                    "SELECT extract(epoch FROM min(at))::float8 AS at FROM failover_claims WHERE port = $1",
                    [cluster.standbyPort])?.first?["at"].flatMap(Double.init)
                let accepted = emulator.apns.acceptedNotifications
                let acceptedIDs = Set(accepted.map { $0.apnsID.lowercased() })
                let perDevice = Dictionary(grouping: accepted, by: \.deviceToken).values
                #expect(emulator.apns.acceptedCount == accepted.count, "the emulator kept every accepted request")
                return Outcome(
                    replication: replication, manager: manager, primaryPort: cluster.primaryPort,
                    standbyPort: cluster.standbyPort,
                    settledOnce: (try? perDelivery.first?.decode(Int.self, "once")) ?? 0,
                    settledTwice: (try? perDelivery.first?.decode(Int.self, "more")) ?? 0,
                    accepted: accepted.count, distinctAccepted: acceptedIDs.count,
                    sentButNotAccepted: sentIDs.subtracting(acceptedIDs).count,
                    devicesSentTwice: perDevice.filter { $0.count > 1 }.count,
                    sentBeforeKill: sentBeforeKill, killToPromoted: killToPromoted,
                    killToFirstClaim: firstClaim.map { $0 - killed.timeIntervalSince1970 },
                    metricsServerBefore: metricsServerBefore, metricsServerAfter: metricsServerAfter,
                    statusServerAfter: statusServerAfter)
            }
        }
    }

    /// The `port` label of the one `pushizo_database_server_info` series in a scrape, if exactly one.
    static func serverPort(in scrape: String) -> String? {
        let series = scrape.split(separator: "\n").filter { $0.hasPrefix("pushizo_database_server_info{") }
        guard series.count == 1, let start = series[0].range(of: #"port=""#) else { return nil }
        return String(series[0][start.upperBound...].prefix { $0 != "\"" })
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// What every test of the suite expects whatever the replication: the worker followed the promoted
    /// standby, and its metrics and `status` say so.
    static func expectFollowed(_ outcome: Outcome) {
        #expect(outcome.killToFirstClaim != nil, "no lease taken on the new primary")
        #expect(outcome.metricsServerBefore == "\(outcome.primaryPort)")
        #expect(outcome.metricsServerAfter == "\(outcome.standbyPort)")
        #expect(outcome.statusServerAfter == "\(outcome.standbyPort)")
    }

    /// What every test expects: each delivery ended with exactly one terminal event, every `sent` event's
    /// `apns-id` reached the emulator, every device's notification was accepted at least once (`exactly`: with
    /// synchronous replication, under no other `apns-id` than its delivery's), and the worker followed.
    static func expectNothingLost(_ outcome: Outcome, synchronous: Bool) {
        print(outcome)
        #expect(outcome.settledOnce == broadcastSize)
        #expect(outcome.settledTwice == 0)
        #expect(outcome.sentButNotAccepted == 0)
        if synchronous {
            #expect(outcome.distinctAccepted == broadcastSize)
        } else {
            #expect(outcome.distinctAccepted >= broadcastSize)
        }
        expectFollowed(outcome)
    }

    /// Synchronous replication: a commit the worker saw succeed is on the standby, so every delivery ends with
    /// exactly one terminal event, and every device's request was accepted at least once. Sends whose completions
    /// died with the primary are written again on the new one (the completion backlog) or, when their leases ran
    /// out first, sent again with the same `apns-id`.
    @Test func synchronousReplicationLosesNothingAcrossAKilledPrimary() async throws {
        Self.expectNothingLost(try await Self.broadcastThroughFailover(.sync), synchronous: true)
    }

    /// Asynchronous replication: commits not yet streamed die with the primary. The deliveries they completed
    /// come back on the new primary and are sent again with the same `apns-id` (measured and printed); none is
    /// lost, and each still ends with one terminal event (the lost one never reached the new primary).
    @Test func asynchronousReplicationSendsTheUnreplicatedAgainNeverLosesThem() async throws {
        Self.expectNothingLost(try await Self.broadcastThroughFailover(.async), synchronous: false)
    }

    /// Patroni (etcd, two nodes, synchronous_mode) instead of a hand-run `pg_ctl promote`: the leader node dies
    /// whole (`kill -9` of its Patroni and postmaster), the other takes the leader key once it expires and
    /// promotes itself; the worker follows as it does by hand, and nothing is lost.
    @Test func patroniSynchronousModeFailoverLosesNothing() async throws {
        Self.expectNothingLost(try await Self.broadcastThroughFailover(.sync, managedBy: .patroni), synchronous: true)
    }

    /// Patroni without synchronous_mode: what the last unreplicated commits cost when Patroni fails over
    /// (measured and printed); nothing is lost.
    @Test func patroniAsynchronousFailoverSendsTheUnreplicatedAgainNeverLosesThem() async throws {
        Self.expectNothingLost(try await Self.broadcastThroughFailover(.async, managedBy: .patroni), synchronous: false)
    }
}
