import Foundation
import Postgres
import SocketTestSupport
import Testing

@testable import Worker

/// The pause gauges of a real `pushizo-worker run` (docs/metrics.md, "The queue, fleet-wide"): the operator
/// commands pause the fleet, an app and a channel, and the worker's scrape says so (`pushizo_fleet_paused`,
/// `pushizo_apps_paused`, `pushizo_channels_paused{paused_by="operator"}`, the due deliveries `held`), apart from
/// a provider's pause of another channel; after `resume` the gauges return to 0 and the deliveries go.
@Suite("Operator pauses in the metrics", .serialized)
struct OperatorPauseMetricsTests {
    /// Makes the fleet's queue sample due, so that the worker's next sampler turn measures it (instead of
    /// reading the sample of up to one interval before the command).
    static func sampleDueNow(_ url: String) async throws {
        _ = try await OperatorCommandTests.query(
            url, "UPDATE queue_depth_samples SET sampled_at = sampled_at - interval '1 hour' WHERE name = 'queue' RETURNING name")
    }

    @Test func pausesShowInTheScrapeAndResumeClearsThem() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let app = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    for _ in 0..<3 { try seed.subscription() }
                    // A provider's pause of the app's FCM channel (the FCM token endpoint refused the account).
                    _ = try seed.connection.query(
                        """
                        INSERT INTO app_channels (app_id, provider, settings, paused_until, paused_reason)
                        VALUES ($1, 'fcm', '{}', now() + interval '1 hour', 'credentials_refused: invalid_grant')
                        """, [seed.appID])
                    return seed.appID
                }
                let port = try freePort()
                let process = emulator.workerProcess(databaseURL: url, extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                try process.run()
                defer { if process.isRunning { process.terminate() } }
                let metrics = "http://127.0.0.1:\(port)/metrics"

                for arguments in [
                    ["pause", "--fleet", "--reason", "PostgreSQL upgrade"], ["pause", "--app", app.uuidString],
                    ["pause", "--app", app.uuidString, "--provider", "apns"],
                ] {
                    let paused = try await OperatorCommandTests.command(arguments, databaseURL: url)
                    #expect(paused.status == 0, "\(arguments): \(paused.errors)")
                }
                // Expansion goes on while the fleet is paused: the three deliveries wait in the queue, due and held.
                let notification = try await onThread {
                    try OperatorCommandTests.notification(url, app: app, target: #"{"all": true}"#)
                }
                try await waitUntil("the notification is expanded") {
                    try await OperatorCommandTests.query(
                        url, "SELECT 1 FROM deliveries WHERE notification_id = $1", [notification]).count == 3
                }
                try await Self.sampleDueNow(url)
                var text = ""
                // Hang guard 90 s: the worker samples every 15 s.
                let pausedSeen = try await waitUntil("the scrape shows the pauses", limit: 90) {
                    text = try await scrape(metrics)
                    return sample(text, #"pushizo_queue_deliveries{provider="apns",state="held"}"#) == 3
                }
                #expect(pausedSeen)
                #expect(sample(text, "pushizo_fleet_paused") == 1)
                #expect(sample(text, "pushizo_apps_paused") == 1)
                #expect(sample(text, #"pushizo_channels_paused{provider="apns",paused_by="operator"}"#) == 1)
                #expect(sample(text, #"pushizo_channels_paused{provider="apns",paused_by="provider"}"#) == 0)
                #expect(sample(text, #"pushizo_channels_paused{provider="fcm",paused_by="provider"}"#) == 1)
                #expect(sample(text, #"pushizo_channels_paused{provider="fcm",paused_by="operator"}"#) == 0)
                #expect(sample(text, #"pushizo_queue_deliveries{provider="apns",state="due"}"#) == 0)
                #expect(sample(text, #"pushizo_queue_oldest_due_age_seconds{provider="apns"}"#) == 0)
                #expect(sample(text, "pushizo_claimed_deliveries_total") == 0)

                for arguments in [
                    ["resume", "--fleet"], ["resume", "--app", app.uuidString],
                    ["resume", "--app", app.uuidString, "--provider", "apns"],
                ] {
                    let resumed = try await OperatorCommandTests.command(arguments, databaseURL: url)
                    #expect(resumed.status == 0, "\(arguments): \(resumed.errors)")
                    #expect(resumed.json["already_so"] as? Bool == false, "\(arguments)")
                }
                try await waitUntil("the three deliveries are sent") {
                    try await OperatorCommandTests.query(
                        url, "SELECT 1 FROM delivery_events WHERE notification_id = $1 AND event = 'sent'", [notification]).count == 3
                }
                try await Self.sampleDueNow(url)
                let resumedSeen = try await waitUntil("the scrape shows no operator's pause", limit: 90) {
                    text = try await scrape(metrics)
                    return sample(text, "pushizo_fleet_paused") == 0 && sample(text, "pushizo_apps_paused") == 0
                        && sample(text, #"pushizo_channels_paused{provider="apns",paused_by="operator"}"#) == 0
                }
                #expect(resumedSeen)
                #expect(sample(text, #"pushizo_queue_deliveries{provider="apns",state="held"}"#) == 0)
                // `resume` leaves the provider's pause alone.
                #expect(sample(text, #"pushizo_channels_paused{provider="fcm",paused_by="provider"}"#) == 1)
                // Claimed at least once each (a claim while the channel was still paused puts one back, and it is
                // claimed again after the channel's resume).
                #expect((sample(text, "pushizo_claimed_deliveries_total") ?? 0) >= 3)
                try await promtoolCheckMetrics(text)

                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
            }
        }
    }
}
