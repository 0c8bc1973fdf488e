import Foundation
import Postgres
import SocketTestSupport
import Testing

/// The shipped Grafana dashboard (config/grafana/pushizo-worker.json) and alert rules (config/prometheus/) ask
/// for what a worker exports: every PromQL expression parses (promtool), and every metric it names is in a
/// real scrape of `pushizo-worker run` after a broadcast through the emulator.
@Suite("Dashboard and alert-rule queries against a real scrape", .serialized)
struct DashboardAndAlertQueriesTests {
    static var configDirectory: URL {
        URL(fileURLWithPath: AlertRulesTests.directory).deletingLastPathComponent()
    }

    static func dashboard() throws -> GrafanaDashboardQueries {
        try GrafanaDashboardQueries(contentsOf: configDirectory.appendingPathComponent("grafana/pushizo-worker.json"))
    }

    static func alertExpressions() throws -> [String] {
        let rules = try String(contentsOfFile: "\(AlertRulesTests.directory)/pushizo-worker.rules.yml", encoding: .utf8)
        return RuleFileExpressions.expressions(in: rules)
    }

    /// Every expression of the dashboard (targets and variable selectors, variables replaced) and of the
    /// alert rules.
    static func allExpressions() throws -> [String] {
        let dashboard = try dashboard()
        return dashboard.targetExpressions.map(GrafanaDashboardQueries.substitutingVariables)
            + dashboard.variableSelectors.compactMap { $0 }.map(GrafanaDashboardQueries.substitutingVariables)
            + (try alertExpressions())
    }

    /// Series Prometheus writes for each target itself, not the worker (Prometheus: "Jobs and instances").
    static let seriesOfTheScrape: Set<String> = [
        "up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
    ]

    /// Families a short run leaves without a sample because nothing happened to them: a certificate channel's
    /// expiry, a channel paused, a grown table analyzed. Their families are declared all the same.
    static let familiesWithoutTheirEvent: Set<String> = [
        "pushizo_credential_expiry_timestamp_seconds", "pushizo_channel_pauses_total",
        "pushizo_planner_statistics_refreshes_total",
    ]

    /// Expressions and the metric names in them: label lists, matchers, strings, ranges, comments, numbers,
    /// durations and keywords in any case are not names.
    static let scannedExpressions: [(String, Set<String>)] = [
        (#"sum by (provider) (rate(pushizo_deliveries_total{event=~"failed|retrying", reason!="a}b"}[10m]))"#,
         ["pushizo_deliveries_total"]),
        (#"histogram_quantile(0.99, sum by (provider, le) (rate(x_bucket{job="$job"}[5m])))"#, ["x_bucket"]),
        ("sum(increase(a_total[10m])) == 0\nand on ()\nmax(b{state=\"due\"}) > 0", ["a_total", "b"]),
        ("a / ignoring(provider) group_left(kind) b offset 1h", ["a", "b"]),
        ("SUM(rate(x[5m:1m])) BY (instance) UNLESS y @ 100", ["x", "y"]),
        ("min by (kind) (ts) - time() < 14 * 86400", ["ts"]),
        (#"absent(up{job="pushizo-worker"} == 1)"#, ["up"]),
        ("count(up == 0) or vector(0)", ["up"]),
        (#"label_replace(a, "dst", "$1 x", 'src', `(.*)`) # b c"#, ["a"]),
        ("1e3 + 0x1f + .5 + inf + NaN + 5m", []),
        ("sum without (le) (c:recorded:rate5m) * bool d", ["c:recorded:rate5m", "d"]),
        (#"topk by (x) (5, a) + count_values without (y) ("v", b) + avg(c) by (z)"#, ["a", "b", "c"]),
    ]

    @Test(arguments: scannedExpressions)
    func theScanFindsMetricNamesOnly(expression: String, names: Set<String>) {
        #expect(PromQLMetricNames.names(in: expression) == names)
    }

    @Test func theRuleReaderFindsEveryRulesExpression() throws {
        let rules = try String(contentsOfFile: "\(AlertRulesTests.directory)/pushizo-worker.rules.yml", encoding: .utf8)
        let expressions = RuleFileExpressions.expressions(in: rules)
        let ruleCount = rules.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.hasPrefix("- alert:") || $0.hasPrefix("- record:") }.count
        #expect(expressions.count == ruleCount)
        #expect(expressions.contains(#"absent(up{job="pushizo-worker"} == 1)"#))
        #expect(expressions.contains(
            """
            sum by (provider) (rate(pushizo_deliveries_total{event=~"failed|retrying",reason!~"channel_paused|fcm_project_quota"}[10m]))
            / sum by (provider) (rate(pushizo_deliveries_total{event=~"sent|failed|retrying",reason!~"channel_paused|fcm_project_quota"}[10m]))
            > 0.1
            """))
        let quoted = """
              - record: r
                expr: 'a{b=''c''}'
              - record: s
                expr: "d{e=\\"f\\"}"
            """
        #expect(RuleFileExpressions.expressions(in: quoted) == ["a{b='c'}", #"d{e="f"}"#])
    }

    @Test func grafanaVariablesAreReplacedForParsing() {
        let instance = GrafanaDashboardQueries.substitutingVariables(
            #"rate(a{job="$job", instance=~"${instance}"}[$__rate_interval])"#)
        #expect(instance == #"rate(a{job=".+", instance=~".+"}[5m])"#)
        let range = GrafanaDashboardQueries.substitutingVariables("sum_over_time(a[${__range}]) by ([[group]])")
        #expect(range == "sum_over_time(a[5m]) by (.+)")
    }

    /// A dashboard that imports as it is: one Prometheus data source variable that every panel and query
    /// variable uses, and `job` and `instance` variables that every target filters on (no metric has an `app`
    /// label: labels never carry ids, so per-app figures come from `pushizo-worker status --app`).
    @Test func theDashboardUsesItsDatasourceAndInstanceVariables() throws {
        let dashboard = try Self.dashboard()
        let names = dashboard.variables.compactMap { $0["name"] as? String }
        #expect(names == ["DS_PROMETHEUS", "job", "instance"])
        #expect(dashboard.variables.first?["type"] as? String == "datasource")
        #expect(dashboard.variables.first?["query"] as? String == "prometheus")
        #expect(dashboard.model["uid"] as? String == "pushizo-worker")
        #expect((dashboard.model["schemaVersion"] as? Int ?? 0) >= 36)
        let panels = GrafanaDashboardQueries.panels(in: dashboard.model)
        #expect(Set(panels.compactMap { $0["id"] as? Int }).count == panels.count, "panel ids are unique")
        for panel in panels where panel["type"] as? String != "row" {
            let title = panel["title"] as? String ?? "?"
            let datasource = panel["datasource"] as? [String: Any]
            #expect(datasource?["uid"] as? String == "${DS_PROMETHEUS}", "\(title)")
            let targets = panel["targets"] as? [[String: Any]] ?? []
            #expect(!targets.isEmpty, "\(title)")
            for target in targets {
                let expression = target["expr"] as? String ?? ""
                #expect((target["datasource"] as? [String: Any])?["uid"] as? String == "${DS_PROMETHEUS}", "\(title)")
                #expect(expression.contains(#"job="$job", instance=~"$instance""#), "\(title): \(expression)")
            }
        }
    }

    /// promtool parses each expression as the rule of a temporary rules file (`promtool check rules` runs
    /// Prometheus's own PromQL parser on every `expr`).
    @Test func promtoolParsesEveryExpression() async throws {
        guard let promtool = AlertRulesTests.promtool(for: "promtool check rules (dashboard queries)") else { return }
        let dashboard = try Self.dashboard()
        let selectors = dashboard.variableSelectors
        #expect(!selectors.contains(nil), "a variable query that is not label_values(selector, label)")
        let expressions = try Self.allExpressions()
        #expect(expressions.count >= 40)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-queries-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var rules = "groups:\n  - name: queries\n    rules:\n"
        for (index, expression) in expressions.enumerated() {
            // A JSON string is a YAML double-quoted scalar.
            let json = try JSONSerialization.data(
                withJSONObject: expression, options: [.fragmentsAllowed, .withoutEscapingSlashes])
            let quoted = String(decoding: json, as: UTF8.self)
            rules += "      - record: query_\(index)\n        expr: \(quoted)\n"
        }
        let file = directory.appendingPathComponent("queries.yml").path
        try rules.write(toFile: file, atomically: true, encoding: .utf8)
        let (status, output) = try await runTool(promtool, ["check", "rules", file])
        #expect(status == 0, "\(output)")
        #expect(output.contains("SUCCESS: \(expressions.count) rules found"), "\(output)")
    }

    /// The names a scrape declares (`# TYPE`: a histogram's `_bucket`, `_sum` and `_count`, a summary's
    /// quantiles, `_sum` and `_count`) and those it has a sample of.
    static func exposedNames(_ text: String) -> (declared: Set<String>, sampled: Set<String>) {
        var declared = Set<String>()
        var sampled = Set<String>()
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let fields = line.split(separator: " ")
                guard fields.count == 4 else { continue }
                let name = String(fields[2])
                switch fields[3] {
                case "histogram": declared.formUnion([name + "_bucket", name + "_sum", name + "_count"])
                case "summary": declared.formUnion([name, name + "_sum", name + "_count"])
                default: declared.insert(name)
                }
            } else if !line.hasPrefix("#") {
                sampled.insert(String(line.prefix { $0 != "{" && $0 != " " }))
            }
        }
        return (declared, sampled)
    }

    @Test func declaredAndSampledNamesOfAScrape() {
        let text = """
            # HELP a_total A.
            # TYPE a_total counter
            a_total{x="1"} 2
            # TYPE h_seconds histogram
            h_seconds_bucket{le="+Inf"} 1
            h_seconds_sum 0.5
            h_seconds_count 1
            # TYPE g gauge
            """
        let names = Self.exposedNames(text)
        #expect(names.declared == ["a_total", "h_seconds_bucket", "h_seconds_sum", "h_seconds_count", "g"])
        #expect(names.sampled == ["a_total", "h_seconds_bucket", "h_seconds_sum", "h_seconds_count"])
    }

    /// A real worker sends a broadcast to APNs, FCM and Web Push subscriptions (one of them gone); its scrape
    /// then declares every metric the dashboard and the rules name and has a sample of each, except those
    /// only their own event creates.
    @Test func everyMetricQueriedIsInARealScrape() async throws {
        let queried = try Self.allExpressions().reduce(into: Set<String>()) { $0.formUnion(PromQLMetricNames.names(in: $1)) }
        #expect(queried.count >= 30)
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let subscriptions = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    for _ in 0..<3 { try seed.subscription() }
                    try seed.subscription(token: Seed.token(prefix: "0410"))
                    for index in 0..<2 { try seed.subscription(platform: "android", token: "fcm-okay-\(index)") }
                    for index in 0..<2 {
                        try seed.webSubscription(try emulator.webSubscription("okay-\(index)"), origin: emulator.endpoint)
                    }
                    try seed.notification(target: #"{"all": true}"#)
                    return 8
                }
                let port = try freePort()
                let process = emulator.workerProcess(databaseURL: url, extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                try process.run()
                defer { if process.isRunning { process.terminate() } }

                // Hang guard 60 s: until every delivery has its terminal event and the worker has counted the
                // expansion's end.
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let settled = try await waitUntil("every delivery sent or failed") {
                    try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event IN ('sent', 'failed')")[0].decode(Int.self, "n")
                        == subscriptions
                }
                #expect(settled)
                var text = ""
                _ = try await waitUntil("the scrape counts the completions") {
                    text = try await scrape("http://127.0.0.1:\(port)/metrics")
                    return sample(text, "pushizo_completions_written_total") == Double(subscriptions)
                }
                await database.shutdown()

                let exposed = Self.exposedNames(text)
                #expect(exposed.sampled.isSubset(of: exposed.declared), "\(exposed.sampled.subtracting(exposed.declared))")
                let undeclared = queried.subtracting(exposed.declared).subtracting(Self.seriesOfTheScrape)
                #expect(undeclared.isEmpty, "queried but not exported: \(undeclared.sorted())")
                let unsampled = queried.subtracting(exposed.sampled).subtracting(Self.seriesOfTheScrape)
                #expect(
                    unsampled == Self.familiesWithoutTheirEvent.intersection(queried),
                    "no sample after a broadcast: \(unsampled.sorted())")
                for provider in ["apns", "fcm", "webpush"] {
                    let sent = sample(text, #"pushizo_deliveries_total{provider="\#(provider)",event="sent",reason=""}"#)
                    #expect(sent ?? 0 >= 1, "\(provider)")
                }
                try await promtoolCheckMetrics(text)

                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
            }
        }
    }
}
