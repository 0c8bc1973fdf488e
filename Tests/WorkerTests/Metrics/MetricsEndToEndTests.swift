import DeliveryCore
import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// `pushizo-worker run` with `PUSHIZO_METRICS_LISTEN`: a real scrape over HTTP of a real run (PostgreSQL, the
/// emulator over TLS), checked by `promtool check metrics`, and the counters against what the run wrote.
@Suite("Prometheus metrics of pushizo-worker run", .serialized)
struct MetricsEndToEndTests {
    @Test func aRealScrapePassesPromtoolAndCountsTheDeliveriesSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let total = 30
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token)
                        SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('m' || n), 1, 30) FROM generate_series(1, $2) n
                        """, [seed.appID, total])
                    // One gone token: a failed/unregistered outcome next to the sent ones.
                    _ = try seed.connection.query(
                        "INSERT INTO subscriptions (app_id, platform, token) VALUES ($1, 'ios', $2)",
                        [seed.appID, Seed.token(prefix: "0410")])
                    _ = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target)
                        SELECT $1, '{"contents": {"en": "metrics"}}', jsonb_build_object('include_subscription_ids', jsonb_agg(id))
                        FROM subscriptions
                        """, [seed.appID])
                    // A users table grown past its statistics (and no autoanalyze first): the worker has it analyzed.
                    try seed.connection.execute("ALTER TABLE users SET (autovacuum_enabled = false)")
                    _ = try seed.connection.query(
                        "INSERT INTO users (app_id, external_id) SELECT $1, 'metrics-' || n FROM generate_series(1, 30000) n",
                        [seed.appID])
                }
                let port = try freePort()
                let process = emulator.workerProcess(databaseURL: url, extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                try process.run()
                defer { if process.isRunning { process.terminate() } }

                // Hang guard 60 s: until every delivery has its terminal event.
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(60)
                var settled = 0
                while ContinuousClock.now < deadline {
                    settled = try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event IN ('sent', 'failed')")[0].decode(Int.self, "n")
                    if settled == total + 1 { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(settled == total + 1)
                // The completion is written after the outcome is counted; one more poll of the counter settles it.
                var text = ""
                for _ in 0..<100 {
                    text = try await scrape("http://127.0.0.1:\(port)/metrics")
                    if sample(text, #"pushizo_completions_written_total"#) == Double(total + 1) { break }
                    try await Task.sleep(for: .milliseconds(50))
                }

                #expect(sample(text, #"pushizo_deliveries_total{provider="apns",event="sent",reason=""}"#) == Double(total))
                #expect(sample(text, #"pushizo_deliveries_total{provider="apns",event="failed",reason="unregistered"}"#) == 1)
                #expect(sample(text, #"pushizo_send_duration_seconds_count{provider="apns"}"#) == Double(total + 1))
                #expect(sample(text, #"pushizo_claimed_deliveries_total"#) == Double(total + 1))
                for _ in 0..<100 where sample(text, #"pushizo_planner_statistics_refreshes_total{table="users",outcome="analyzed"}"#) != 1 {
                    try await Task.sleep(for: .milliseconds(50))
                    text = try await scrape("http://127.0.0.1:\(port)/metrics")
                }
                #expect(sample(text, #"pushizo_planner_statistics_refreshes_total{table="users",outcome="analyzed"}"#) == 1)
                #expect(sample(text, #"pushizo_planner_statistics_failures_total"#) == 0)
                #expect(sample(text, #"pushizo_completions_written_total"#) == Double(total + 1))
                #expect(sample(text, #"pushizo_expansion_deliveries_total"#) == Double(total + 1))
                #expect(sample(text, #"pushizo_notification_expansions_total{outcome="expanded"}"#) == 1)
                #expect(sample(text, #"pushizo_token_refreshes_total{provider="apns"}"#) == 1)
                #expect(sample(text, #"pushizo_token_refresh_failures_total{provider="apns"}"#) == 0)
                #expect(sample(text, #"pushizo_sends_in_flight"#) == 0)
                #expect((sample(text, #"pushizo_claim_batch_duration_seconds_count"#) ?? 0) >= 1)
                #expect((sample(text, #"pushizo_completion_batch_duration_seconds_count"#) ?? 0) >= 1)
                #expect((sample(text, #"process_resident_memory_bytes"#) ?? 0) > 0)
                #expect((sample(text, #"process_open_fds"#) ?? 0) > 0)
                #expect(sample(text, #"pushizo_queue_deliveries{provider="apns",state="due"}"#) != nil)
                #expect(sample(text, #"pushizo_channels_paused{provider="apns",paused_by="provider"}"#) == 0)
                #expect(sample(text, #"pushizo_channels_paused{provider="apns",paused_by="operator"}"#) == 0)
                #expect(sample(text, #"pushizo_fleet_paused"#) == 0)
                #expect(sample(text, #"pushizo_apps_paused"#) == 0)
                #expect(sample(text, #"pushizo_build_info{version="\#(WorkerMetrics.version)",commit="\#(WorkerMetrics.commit)",swift="\#(WorkerMetrics.swiftVersion)"}"#) == 1)
                // Nothing from a row leaks into labels: no token (each starts with "a0"), no id. The build's line is
                // left out: its commit label is a hash, which may hold "a0" itself.
                #expect(!text.split(separator: "\n").contains { !$0.hasPrefix("pushizo_build_info") && $0.contains("a0") })
                try await promtoolCheckMetrics(text)

                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
                await database.shutdown()
            }
        }
    }

    @Test(arguments: ["nonsense", "127.0.0.1", "example.com:9464", "::1:9464", "127.0.0.1:70000"])
    func aBadListenAddressStopsStartUp(value: String) async throws {
        let (status, text) = try await ConfigurationExitTests.run(
            ["run"], environment: ["PUSHIZO_DATABASE_URL": "host=/nonexistent", "PUSHIZO_METRICS_LISTEN": value])
        #expect(status == 78)
        #expect(text.contains("PUSHIZO_METRICS_LISTEN"), "stderr: \(text)")
    }

    @Test func anAddressInUseStopsStartUp() async throws {
        let holder = try listeningSocket()
        defer { close(holder.fd) }
        let (status, text) = try await ConfigurationExitTests.run(
            ["run"],
            environment: ["PUSHIZO_DATABASE_URL": "host=/nonexistent", "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(holder.port)"])
        #expect(status == 78)
        #expect(text.contains("PUSHIZO_METRICS_LISTEN") && text.contains("cannot listen"), "stderr: \(text)")
    }

    @Test func reasonsFromTheNetworkAreFoldedToABoundedSet() {
        #expect(WorkerMetrics.reasonLabel(nil) == "")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "unregistered")) == "unregistered")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "max_attempts")) == "max_attempts")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "http_418")) == "http_4xx")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "http_503")) == "http_5xx")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "http_999")) == "other")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "some_new_apple_reason")) == "other")
        #expect(WorkerMetrics.reasonLabel(DeliveryReason(rawValue: "a0a0a0a0deadbeef")) == "other")
        #expect(WorkerMetrics.providerLabel(nil as Provider?) == "none")
        #expect(WorkerMetrics.providerLabel(column: "carrier-pigeon") == "other")
    }

    @Test func aQueueSampleSetsEveryProviderIncludingZeros() {
        let metrics = WorkerMetrics()
        var sample = QueueDepthSample()
        sample.depth["apns"] = .init(due: 3, deferred: 2, leased: 1, oldestDueAge: 4.5)
        sample.depth["apns"]?.held = 7
        sample.depth["none"] = .init(due: 1)
        sample.pausedChannels["fcm"] = 2
        sample.pausedChannels["apns"] = 1
        sample.operatorPausedChannels = ["apns": 1]
        sample.pausedApps = 3
        sample.fleetPaused = true
        metrics.record(sample, at: Date(timeIntervalSince1970: 1000))
        let text = metrics.registry.render()
        #expect(text.contains(#"pushizo_queue_deliveries{provider="apns",state="due"} 3"#))
        #expect(text.contains(#"pushizo_queue_deliveries{provider="apns",state="held"} 7"#))
        #expect(text.contains(#"pushizo_queue_deliveries{provider="apns",state="leased"} 1"#))
        #expect(text.contains(#"pushizo_queue_deliveries{provider="webpush",state="due"} 0"#))
        #expect(text.contains(#"pushizo_queue_deliveries{provider="webpush",state="held"} 0"#))
        #expect(text.contains(#"pushizo_queue_deliveries{provider="none",state="due"} 1"#))
        #expect(text.contains(#"pushizo_queue_oldest_due_age_seconds{provider="apns"} 4.5"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="fcm",paused_by="provider"} 2"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="fcm",paused_by="operator"} 0"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="apns",paused_by="operator"} 1"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="apns",paused_by="provider"} 0"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="webpush",paused_by="provider"} 0"#))
        #expect(text.contains("pushizo_apps_paused 3\n"))
        #expect(text.contains("pushizo_fleet_paused 1\n"))
        #expect(text.contains("pushizo_queue_sample_timestamp_seconds 1000\n"))
        #expect(text.contains("pushizo_queue_sample_fraction 1\n"))
    }

    /// A sample stored by a worker that predates the operator's counts (no `held`, no operator pauses) still
    /// reads: its paused channels count as the provider's, nothing as held, the fleet as not paused.
    @Test func aSampleOfAnOlderWorkerReadsWithoutThePauses() throws {
        let stored = #"{"depth": {"apns": {"due": 4, "deferred": 0, "leased": 0, "oldest_due_age": 30}}, "paused_channels": {"fcm": 1}}"#
        let sample = try JSONDecoder().decode(QueueDepthSample.self, from: Data(stored.utf8))
        #expect(sample.depth["apns"] == .init(due: 4, deferred: 0, leased: 0, oldestDueAge: 30, held: 0))
        #expect(sample.operatorPausedChannels == nil && sample.pausedApps == nil && sample.fleetPaused == nil)
        let metrics = WorkerMetrics()
        metrics.record(sample)
        let text = metrics.registry.render()
        #expect(text.contains(#"pushizo_channels_paused{provider="fcm",paused_by="provider"} 1"#))
        #expect(text.contains(#"pushizo_channels_paused{provider="fcm",paused_by="operator"} 0"#))
        #expect(text.contains("pushizo_fleet_paused 0\n"))
        #expect(text.contains("pushizo_apps_paused 0\n"))
        let roundTrip = try JSONDecoder().decode(QueueDepthSample.self, from: JSONEncoder().encode(sample))
        #expect(roundTrip == sample)
    }

    /// Due deliveries of an app an operator paused are held, not due, and out of the oldest due age; while the
    /// fleet is paused every due delivery is. An operator's channel pause is counted apart from the provider's.
    @Test func theQueueSampleCountsWhatAnOperatorsPauseHolds() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (appPaused, fleetPaused, resumed) = try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                let paused = seed.appID
                _ = try seed.connection.query(
                    "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 'held-' || n FROM generate_series(1, 3) n",
                    [paused])
                try seed.notification(target: #"{"include_external_ids": ["nobody"]}"#)
                let other = try Seed(url)
                try other.app(channelSettings: "{}")
                _ = try other.connection.query(
                    "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 'due-' || n FROM generate_series(1, 2) n",
                    [other.appID])
                try other.notification(target: #"{"include_external_ids": ["nobody"]}"#)
                // The paused app's 3 deliveries due for an hour, the other app's 2 for a minute.
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    SELECT (SELECT id FROM notifications n WHERE n.app_id = s.app_id), s.id, s.app_id,
                           CASE WHEN s.app_id = $1 THEN now() - interval '1 hour' ELSE now() - interval '1 minute' END
                    FROM subscriptions s
                    """, [paused])
                _ = try seed.connection.query(
                    "UPDATE apps SET paused_until = 'infinity', paused_reason = 'operator' WHERE id = $1", [paused])
                _ = try seed.connection.query(
                    "UPDATE app_channels SET paused_until = 'infinity', paused_reason = 'operator' WHERE app_id = $1", [paused])
                _ = try seed.connection.query(
                    "UPDATE app_channels SET paused_until = now() + interval '5 minutes', paused_reason = 'InvalidProviderToken' WHERE app_id = $1",
                    [other.appID])
                let appPaused = try QueueDepthStore.measureQueueDepth(on: seed.connection)
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = 'infinity', paused_reason = 'operator'")
                let fleetPaused = try QueueDepthStore.measureQueueDepth(on: seed.connection)
                _ = try seed.connection.query("UPDATE fleet_settings SET paused_until = NULL, paused_reason = NULL")
                _ = try seed.connection.query("UPDATE apps SET paused_until = NULL, paused_reason = NULL")
                return (appPaused, fleetPaused, try QueueDepthStore.measureQueueDepth(on: seed.connection))
            }
            let apns = try #require(appPaused.depth["apns"])
            #expect(apns.due == 2 && apns.held == 3)
            #expect(apns.oldestDueAge >= 60 && apns.oldestDueAge < 3600, "\(apns.oldestDueAge)")
            #expect(appPaused.pausedApps == 1 && appPaused.fleetPaused == false)
            #expect(appPaused.pausedChannels == ["apns": 2] && appPaused.operatorPausedChannels == ["apns": 1])
            #expect(fleetPaused.depth["apns"]?.due == 0 && fleetPaused.depth["apns"]?.held == 5)
            #expect(fleetPaused.depth["apns"]?.oldestDueAge == 0)
            #expect(fleetPaused.fleetPaused == true)
            #expect(resumed.depth["apns"]?.due == 5 && resumed.depth["apns"]?.held == 0)
            #expect((resumed.depth["apns"]?.oldestDueAge ?? 0) >= 3600)
            #expect(resumed.pausedApps == 0 && resumed.fleetPaused == false)
        }
    }

    @Test func theQueueSampleReadsStatesFromTheDatabase() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let sample = try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token)
                    SELECT $1, p, 'tok-' || p || n FROM generate_series(1, 3) n, unnest(ARRAY['ios', 'android', 'web']) p
                    """, [seed.appID])
                try seed.notification(target: #"{"include_external_ids": ["nobody"]}"#)
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at, leased_by)
                    SELECT (SELECT id FROM notifications), s.id, s.app_id,
                           CASE s.token WHEN 'tok-ios1' THEN now() - interval '90 seconds'
                                        WHEN 'tok-ios2' THEN now() + interval '1 hour'
                                        WHEN 'tok-ios3' THEN now() + interval '2 minutes' ELSE now() + interval '5 minutes' END,
                           CASE s.token WHEN 'tok-ios3' THEN 'w1' END
                    FROM subscriptions s WHERE s.platform IN ('ios', 'web')
                    """)
                _ = try seed.connection.query(
                    "UPDATE app_channels SET paused_until = now() + interval '5 minutes' WHERE provider = 'apns'")
                return try QueueDepthStore.measureQueueDepth(on: seed.connection)
            }
            let apns = try #require(sample.depth["apns"])
            #expect(apns.due == 1 && apns.deferred == 1 && apns.leased == 1)
            #expect(apns.oldestDueAge >= 90 && apns.oldestDueAge < 3600)
            #expect(sample.depth["webpush"] == .init(due: 0, deferred: 3, leased: 0, oldestDueAge: 0))
            #expect(sample.depth["fcm"] == nil)
            #expect(sample.pausedChannels == ["apns": 1])
            #expect(sample.operatorPausedChannels == ["apns": 0])
            #expect(sample.pausedApps == 0 && sample.fleetPaused == false)
            #expect(sample.sampledFraction == 1)
        }
    }

    /// The exact pass costs the queue, not the subscriptions: each delivery's subscription is looked up by key,
    /// so a queue of 1,000 in an app of 20,000 devices reads its 1,000 subscriptions, not the 20,000.
    @Test func theQueueSampleReadsTheQueuesSubscriptionsOnly() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 'tok-' || n FROM generate_series(1, 20000) n",
                    [seed.appID])
                try seed.notification(target: #"{"include_external_ids": ["nobody"]}"#)
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id)
                    SELECT (SELECT id FROM notifications), id, app_id FROM subscriptions LIMIT 1000
                    """)
                _ = try seed.connection.query("ANALYZE subscriptions")
                _ = try seed.connection.query("ANALYZE deliveries")
                let read = try rowsRead(of: "subscriptions", on: seed.connection) { () throws in
                    let sample = try QueueDepthStore.measureQueueDepth(on: seed.connection)
                    #expect(sample.depth["apns"]?.due == 1_000)
                }
                // PostgreSQL counted 2,000 for the 1,000 lookups; the join planned before read 21,002.
                #expect(read <= 2_100, "read \(read) rows of subscriptions for 1,000 deliveries")
            }
        }
    }

    /// A queue above the exact bound is estimated from a block sample: every count scaled by the share of
    /// blocks read, close to the truth on rows spread evenly over the table, and the paused channels still exact.
    @Test func aLargeQueueIsEstimatedFromABlockSample() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (exact, estimated) = try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token)
                    SELECT $1, (ARRAY['ios', 'android'])[1 + n % 2], 'tok-' || n FROM generate_series(1, 100) n
                    """, [seed.appID])
                // 60,000 deliveries of 600 notifications, a third due and two thirds deferred, interleaved.
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target, status)
                    SELECT $1, '{"contents": {"en": "hi"}}', '{"all": true}', 'expanded' FROM generate_series(1, 600)
                    """, [seed.appID])
                _ = try seed.connection.query(
                    """
                    INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
                    SELECT n.id, s.id, s.app_id,
                           CASE WHEN n.g % 3 = 0 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END
                    FROM (SELECT id, row_number() OVER (ORDER BY id) AS g FROM notifications) n CROSS JOIN subscriptions s
                    """)
                _ = try seed.connection.query(
                    "UPDATE app_channels SET paused_until = now() + interval '5 minutes' WHERE provider = 'apns'")
                let exact = try QueueDepthStore.measureQueueDepth(on: seed.connection)
                let estimated = try QueueDepthStore.measureQueueDepth(on: seed.connection, exactUpTo: 1_000, sampleBlocks: 150)
                return (exact, estimated)
            }
            #expect(exact.sampledFraction == 1)
            #expect(exact.depth["apns"]?.due == 10_000)
            let fraction = try #require(estimated.sampledFraction)
            #expect(fraction > 0 && fraction < 1)
            for provider in ["apns", "fcm"] {
                for (state, truth) in [(\QueueDepthSample.Depth.due, 10_000), (\QueueDepthSample.Depth.deferred, 20_000)] {
                    let value = try #require(estimated.depth[provider]?[keyPath: state])
                    #expect(abs(Double(value) - Double(truth)) < Double(truth) * 0.5, "\(provider) \(value) vs \(truth)")
                }
            }
            #expect(estimated.pausedChannels == ["apns": 1])
        }
    }
}

/// The value of the sample whose name and labels are exactly `series`, or `nil`.
func sample(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}

/// GET over HTTP/1.1, retried while the listener is not up yet (hang guard 30 s).
func scrape(_ url: String) async throws -> String {
    let deadline = ContinuousClock.now + .seconds(30)
    while true {
        do {
            var request = URLRequest(url: URL(string: url)!)
            request.timeoutInterval = 10
            let (data, response) = try await URLSession.shared.data(for: request)
            let http = try #require(response as? HTTPURLResponse)
            #expect(http.statusCode == 200)
            #expect(http.value(forHTTPHeaderField: "Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
            return String(decoding: data, as: UTF8.self)
        } catch {
            if ContinuousClock.now > deadline { throw error }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// Runs `promtool check metrics` on `text` (Debian's `prometheus` package; scripts/install-deps.sh installs it).
func promtoolCheckMetrics(_ text: String) async throws {
    guard let promtool = AlertRulesTests.promtool(for: "promtool check metrics") else { return }
    let (status, output) = try await runTool(promtool, ["check", "metrics"], input: text)
    #expect(status == 0, "promtool check metrics: \(output)")
}

func findExecutable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for directory in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Runs `tool arguments` with `input` on stdin; returns its exit status and stdout + stderr.
func runTool(_ tool: String, _ arguments: [String], input: String = "") async throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    let stdin = Pipe()
    let output = Pipe()
    process.standardInput = stdin
    process.standardOutput = output
    process.standardError = output
    try process.run()
    try stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let text = try await onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    try await onThread { process.waitUntilExit() }
    return (process.terminationStatus, text)
}

/// A TCP socket listening on 127.0.0.1 at `port`, or at a port the kernel chose when it is 0.
func listeningSocket(port: Int = 0) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard fd >= 0, bound else {
        if fd >= 0 { close(fd) }
        throw POSIXError(.EADDRNOTAVAIL)
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

