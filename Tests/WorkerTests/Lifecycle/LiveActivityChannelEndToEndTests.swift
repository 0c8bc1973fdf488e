import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// Live Activity broadcast channels through the real `pushizo-worker run` process, PostgreSQL and the emulator
/// (docs/live-activity-channels.md): producers' `live_activity_channels` rows are created and deleted at APNs's
/// channel management API, a notification targeting a channel goes as one broadcast request with its
/// `apns-channel-id` and one `delivery_events` row, a send to a deleted or unknown channel fails only that
/// notification, and a channel row whose app cannot reach APNs fails only its own reconciliation. The first two
/// rounds run in this process, so that its metrics count the reconciliations and the sends; `status` and the queue
/// sample show the rows' states and the sends.
@Suite("Live Activity channels end to end", .serialized)
struct LiveActivityChannelEndToEndTests {
    static let update = #"""
        {"apns_push_type": "liveactivity", "contents": {"en": "Goal!"},
         "live_activity": {"event": "update", "timestamp": 1764590400, "content_state": {"home": 1, "away": 0}}}
        """#

    @Test func channelsAreCreatedUsedAndDeletedAndBadOnesFailAlone() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let bundleID = "dev.pushizo.test"
                let (appID, badAppID) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    // Another app without an APNs channel: its channel row cannot be created.
                    let bad = UUID()
                    _ = try seed.connection.query("INSERT INTO apps (id) VALUES ($1)", [bad])
                    for (app, name, policy) in [(seed.appID, "match-1", 1), (seed.appID, "match-2", 0), (bad, "orphan", 0)] {
                        _ = try seed.connection.query(
                            "INSERT INTO live_activity_channels (app_id, name, message_storage_policy) VALUES ($1, $2, $3)",
                            [app, name, policy])
                    }
                    return (seed.appID, bad)
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                defer { Task { await database.shutdown() } }
                func channels() async throws -> [String: (state: String, id: String?, reason: String?)] {
                    var result: [String: (String, String?, String?)] = [:]
                    for row in try await database.query(
                        "SELECT name, state, apple_channel_id, error_reason FROM live_activity_channels")
                    {
                        result[row["name"] ?? "?"] = (row["state"] ?? "?", row["apple_channel_id"], row["error_reason"])
                    }
                    return result
                }
                func run() async throws {
                    let process = try await emulator.runWorkerUntilDrained(databaseURL: url)
                    #expect(process.terminationStatus == 0)
                }
                /// One round in this process: its metrics' text.
                func runHere() async throws -> String {
                    let runtime = try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                    try await runUntilDrained(runtime)
                    return runtime.metrics.registry.render()
                }

                // 1. Created at APNs; the bad app's row fails alone.
                let reconciled = try await runHere()
                #expect(reconciled.contains(#"pushizo_live_activity_channel_changes_total{result="active",reason=""} 2"#), "\(reconciled)")
                #expect(reconciled.contains(#"pushizo_live_activity_channel_changes_total{result="failed",reason="no_channel"} 1"#))
                // The fleet's counts: status, and the queue sample the metrics show.
                let (reconciledStatus, sample) = try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    return (try FleetStatusStore.read(on: connection), try QueueDepthStore.measureQueueDepth(on: connection))
                }
                let channelStatus = try #require(reconciledStatus.liveActivityChannels)
                #expect(channelStatus.pending == 0 && channelStatus.failed == 1 && channelStatus.active == 2)
                #expect(channelStatus.failedChannels.map(\.name) == ["orphan"] && channelStatus.failedChannels.first?.reason == "no_channel")
                let statusText = FleetStatusRenderer.text(reconciledStatus)
                #expect(statusText.contains("live activity channels: 0 pending (a change not yet made at APNs), 1 failed, 2 active"), "\(statusText)")
                #expect(statusText.contains("failed: app \(badAppID.uuidString.lowercased()) channel orphan: no_channel"), "\(statusText)")
                let reconciledJSON = try FleetStatusRenderer.json(reconciledStatus)
                #expect(reconciledJSON.contains(#""live_activity_channels" : {"#) && reconciledJSON.contains(#""failed_channels" : ["#))
                let decoded = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(reconciledJSON.utf8))
                #expect(decoded.liveActivityChannels?.failedChannels.map(\.name) == ["orphan"])
                #expect(sample.liveActivityChannels?.failed == 1 && sample.liveActivityChannels?.pending == 0)
                let sampled = WorkerMetrics()
                sampled.record(sample)
                #expect(sampled.registry.render().contains(#"pushizo_live_activity_channels{state="failed"} 1"#))
                var rows = try await channels()
                #expect(rows["match-1"]?.state == "active" && rows["match-2"]?.state == "active")
                #expect(rows["orphan"]?.state == "failed" && rows["orphan"]?.reason == "no_channel")
                let first = try #require(rows["match-1"]?.id)
                let second = try #require(rows["match-2"]?.id)
                #expect(emulator.apns.broadcastChannels.channels(of: bundleID) == [first: 1, second: 0])

                // 2. A notification on a channel is one broadcast; an unknown channel and a message that is not a Live
                // Activity push fail only their own notification.
                let (sent, unknown, notLive) = try await onThread {
                    let seed = try Seed(url, appID: appID)
                    return (
                        try seed.notification(message: Self.update, target: #"{"live_activity_channel": "match-1"}"#),
                        try seed.notification(message: Self.update, target: #"{"live_activity_channel": "no-such"}"#),
                        try seed.notification(message: #"{"contents": {"en": "x"}}"#, target: #"{"live_activity_channel": "match-1"}"#))
                }
                let sentHere = try await runHere()
                #expect(sentHere.contains(#"pushizo_live_activity_channel_sends_total{event="sent",reason=""} 1"#), "\(sentHere)")
                #expect(sentHere.contains(#"pushizo_live_activity_channel_sends_total{event="failed",reason="unknown_channel"} 1"#))
                #expect(!sentHere.contains(#"pushizo_deliveries_total{provider="apns",event="sent""#), "a channel send is no device's delivery")
                let afterSends = try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    return try FleetStatusStore.read(on: connection)
                }
                let widest = try #require(afterSends.events.last)
                #expect(widest.channelSent == .exact(1) && widest.channelFailed == .exact(1), "\(widest)")
                let sendsText = FleetStatusRenderer.text(afterSends)
                #expect(sendsText.contains("  channel sent ") && sendsText.contains("  channel failed "), "\(sendsText)")
                #expect(try FleetStatusRenderer.json(afterSends).contains(#""live_activity_channel_sent" : {"#))
                let broadcasts = emulator.apns.broadcastChannels.acceptedBroadcasts
                #expect(broadcasts.count == 1)
                let broadcast = try #require(broadcasts.first)
                #expect(broadcast.channelID == first && broadcast.bundleID == bundleID)
                #expect(String(decoding: broadcast.payload, as: UTF8.self)
                    == #"{"aps":{"alert":{"body":"Goal!"},"content-state":{"away":0,"home":1},"event":"update","timestamp":1764590400}}"#)
                func events(_ id: UUID) async throws -> [String] {
                    try await database.query(
                        "SELECT event, reason, subscription_id FROM delivery_events WHERE notification_id = $1 ORDER BY id", [id]
                    ).map { "\($0["event"] ?? "")/\($0["reason"] ?? "-")/\($0["subscription_id"] ?? "none")" }
                }
                #expect(try await events(sent) == ["sent/-/none"])
                #expect(try await events(unknown) == ["failed/unknown_channel/none"])
                let refused = try await database.query("SELECT status, status_reason FROM notifications WHERE id = $1", [notLive])
                #expect(refused.first?["status"] == "failed")
                #expect(refused.first?["status_reason"]?.hasPrefix("invalid_message: apns_push_type must be liveactivity") == true)

                // 3. A channel the producer no longer wants is deleted at APNs.
                _ = try await database.query("UPDATE live_activity_channels SET desired_state = 'absent' WHERE name = 'match-2'")
                try await run()
                rows = try await channels()
                #expect(rows["match-2"]?.state == "deleted")
                #expect(emulator.apns.broadcastChannels.channels(of: bundleID) == [first: 1])
                #expect(emulator.apns.broadcastChannels.deletedCount == 1)

                // 4. Sends to the deleted channel, and to one deleted at APNs behind the worker's back (Apple answers
                // ChannelNotRegistered), fail alone; a device push of the same app goes on and nothing is paused.
                emulator.apns.broadcastChannels.deleteOutOfBand(first, of: bundleID)
                let (toDeleted, toGone, device) = try await onThread {
                    let seed = try Seed(url, appID: appID)
                    let user = try seed.user("ann")
                    let subscription = try seed.subscription(user: user, token: Seed.token())
                    return (
                        try seed.notification(message: Self.update, target: #"{"live_activity_channel": "match-2"}"#),
                        try seed.notification(message: Self.update, target: #"{"live_activity_channel": "match-1"}"#),
                        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#))
                }
                try await run()
                #expect(try await events(toDeleted) == ["failed/channel_deleted/none"])
                #expect(try await events(toGone) == ["failed/channel_not_registered/none"])
                #expect(try await events(device).first?.hasPrefix("sent/-/") == true)
                let paused = try await database.query(
                    "SELECT count(*)::int AS n FROM app_channels WHERE paused_until IS NOT NULL")
                #expect(paused.first?["n"] == "0")
                let badRow = try await database.query(
                    "SELECT state FROM live_activity_channels WHERE app_id = $1", [badAppID])
                #expect(badRow.first?["state"] == "failed")
            }
        }
    }
}
