import Foundation
import Postgres
import Testing
@testable import Worker

/// FCM project quotas through the worker and the FCM emulator (docs/fcm.md, "Project quota"): two apps on one
/// Firebase project with a small quota are held back together by the project's bucket, the held sends waiting
/// without an attempt or an event; a third app on another project and the first app's APNs deliveries are never
/// held; every delivery is sent once; the metrics count the holds under their reason and `status` shows the held
/// project (for the fleet and for its apps, not for the third app). The bucket's arithmetic itself is
/// `FCMProjectQuotaStoreTests`' (a driven clock); here nothing is timed.
@Suite("FCM project quota end to end", .serialized)
struct FCMProjectQuotaEndToEndTests {
    /// The emulator's service account naming `project` instead of its own project ID.
    static func settings(_ emulator: EmulatorHarness, project: String, quota: Int?) -> String {
        settings(emulator, project: project, quotaJSON: quota.map(String.init))
    }

    /// As ``settings(_:project:quota:)``, the quota written as the JSON text `quotaJSON`.
    static func settings(_ emulator: EmulatorHarness, project: String, quotaJSON: String?) -> String {
        let account = emulator.serviceAccountJSON.replacingOccurrences(
            of: #""project_id":"\#(EmulatorHarness.fcmProjectID)""#, with: #""project_id":"\#(project)""#)
        return #"{"service_account": \#(account)\#(quotaJSON.map { #", "project_quota_per_minute": \#($0)"# } ?? "")}"#
    }

    /// A quota that is no whole number of 1 ... 1,000,000,000 fails its own app's channel as
    /// `invalid_channel_settings` naming the key (it would otherwise send at Firebase's default while its settings
    /// say something else); another app on the same project sends as usual, and nothing else stops.
    @Test func aBadQuotaFailsItsOwnChannelOnly() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let badQuotas = [#""fast""#, "1e400", "0", "2.5", "true"]
                let seeded = try await onThread {
                    var bad: [UUID] = []
                    for quota in badQuotas {
                        let seed = try Seed(url)
                        defer { seed.connection.close() }
                        try seed.app()
                        try seed.fcmChannel(
                            settings: Self.settings(emulator, project: "shared-proj", quotaJSON: quota), endpoint: emulator.endpoint)
                        bad.append(try seed.subscription(platform: "android", token: "fcm-ok-" + UUID().uuidString))
                        _ = try seed.notification(target: #"{"all": true}"#)
                    }
                    let seed = try Seed(url)
                    defer { seed.connection.close() }
                    try seed.app()
                    try seed.fcmChannel(settings: Self.settings(emulator, project: "shared-proj", quota: 6100), endpoint: emulator.endpoint)
                    let good = try seed.subscription(platform: "android", token: "fcm-ok-" + UUID().uuidString)
                    _ = try seed.notification(target: #"{"all": true}"#)
                    return (bad, good)
                }
                let (bad, good) = seeded
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                let subscriptions = badQuotas.count + 1
                try await runUntil(runtime, "every subscription has an event") {
                    try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")[0]["n"]
                        == "\(subscriptions)"
                }
                for (quota, subscription) in zip(badQuotas, bad) {
                    let events = try await database.query(
                        "SELECT event || '/' || coalesce(reason, '') AS e, detail::text AS d FROM delivery_events WHERE subscription_id = $1",
                        [subscription])
                    #expect(events.map { $0["e"] ?? "" } == ["retrying/invalid_channel_settings"], "quota \(quota)")
                    #expect(events.first?["d"]?.contains("project_quota_per_minute") == true, "quota \(quota): \(events)")
                    #expect(events.first?["d"]?.contains("PRIVATE KEY") == false)
                }
                let sent = try await database.query(
                    "SELECT event || coalesce('/' || reason, '') AS e FROM delivery_events WHERE subscription_id = $1", [good])
                #expect(sent.map { $0["e"] ?? "" } == ["sent"])
                // The refused channels are paused (their subscribers untouched); the good one is not.
                let paused = try await database.query(
                    "SELECT count(*) FILTER (WHERE paused_until > now())::int AS paused, count(*)::int AS channels FROM app_channels")
                #expect(paused.first?["paused"] == "\(badQuotas.count)" && paused.first?["channels"] == "\(subscriptions)")
                let statuses = try await database.query("SELECT DISTINCT status FROM subscriptions")
                #expect(statuses.map { $0["status"] ?? "" } == ["active"])
                await database.shutdown()
            }
        }
    }

    @Test func appsOnOneProjectWaitTogetherAndNothingElseWaits() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let apps = try await onThread {
                    // 610 a minute: 10 permits a second, at most 10 in the bucket, for the 30 sends of the first
                    // two apps; the third app's project has Firebase's default.
                    var apps: [UUID] = []
                    for (project, quota, android, ios) in [
                        ("shared-proj", 610, 15, 10), ("shared-proj", 1220, 15, 0), ("other-proj", nil, 30, 0),
                    ] as [(String, Int?, Int, Int)] {
                        let seed = try Seed(url)
                        defer { seed.connection.close() }
                        try seed.app(channelSettings: ios > 0 ? emulator.channelSettings : nil, endpoint: emulator.endpoint)
                        try seed.fcmChannel(settings: Self.settings(emulator, project: project, quota: quota), endpoint: emulator.endpoint)
                        for _ in 0..<android { try seed.subscription(platform: "android", token: "fcm-ok-" + UUID().uuidString) }
                        for _ in 0..<ios { try seed.subscription() }
                        _ = try seed.notification(target: #"{"all": true}"#)
                        apps.append(seed.appID)
                    }
                    return apps
                }
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                let metrics = runtime.metrics.registry.render()
                #expect(metrics.contains(#"pushizo_deliveries_total{provider="fcm",event="retrying",reason="fcm_project_quota"}"#), "\(metrics)")
                #expect(!metrics.contains("shared-proj"))

                try await onThread {
                    let c = try PostgresConnection(connectionString: url)
                    defer { c.close() }
                    // Every delivery sent once, on its first attempt, and no retry written: the held sends spent
                    // nothing.
                    let events = try c.query(
                        """
                        SELECT s.app_id, s.platform, count(*) FILTER (WHERE e.event = 'sent' AND e.attempt = 1)::int AS first_sent,
                               count(*) FILTER (WHERE e.event <> 'sent')::int AS other, count(DISTINCT s.id)::int AS subscriptions
                        FROM subscriptions s LEFT JOIN delivery_events e ON e.subscription_id = s.id
                        GROUP BY 1, 2 ORDER BY 1, 2
                        """)
                    #expect(events.count == 4)
                    for row in events {
                        #expect(row["first_sent"] == row["subscriptions"], "\(row["app_id"] ?? "") \(row["platform"] ?? "")")
                        #expect(row["other"] == "0", "\(row["app_id"] ?? "") \(row["platform"] ?? "")")
                    }
                    #expect(try c.query("SELECT count(*)::int AS n FROM deliveries")[0]["n"] == "0")
                    // The shared project's bucket, at the smaller size, held sends back; the other never did.
                    let buckets = try c.query(
                        "SELECT project_id, per_minute::int AS q, held_deliveries AS held FROM fcm_project_buckets ORDER BY 1"
                    ).map { "\($0["project_id"] ?? "") \($0["q"] ?? "") \(($0["held"].flatMap(Int.init) ?? 0) > 0 ? "held" : "never held")" }
                    #expect(buckets == ["other-proj 600000 never held", "shared-proj 610 held"])
                    // status: held within the last minute (the drain just ended).
                    let fleet = try FleetStatusStore.read(on: c)
                    #expect(fleet.heldProjects.map(\.project) == ["shared-proj"])
                    #expect(fleet.heldProjects.first?.quotaPerMinute == 610)
                    #expect(try FleetStatusStore.read(on: c, app: apps[1]).heldProjects.map(\.project) == ["shared-proj"])
                    #expect(try FleetStatusStore.read(on: c, app: apps[2]).heldProjects.isEmpty)
                    let text = FleetStatusRenderer.text(fleet)
                    #expect(text.contains("fcm projects held by their quota") && text.contains("project shared-proj"), "\(text)")
                }
            }
        }
    }
}
