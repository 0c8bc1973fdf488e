import Foundation
import Postgres
import Testing

@testable import Worker

/// `status` under an operator's pause: the due deliveries a pause of the fleet or of their app holds are counted
/// apart as `held`, out of `due` and of the lag, as the metrics' queue sample counts them
/// (`pushizo_queue_deliveries{state="held"}`); a timed fleet pause says when claims resume.
extension StatusCommandTests {
    static let otherApp = "00000000-0000-4000-8000-0000000000b2"

    /// A second app with one due delivery (30 s old) beside ``seed(_:)``'s; returns its `run_at`.
    static func seedOtherApp(_ connection: PostgresConnection) throws -> Date {
        try connection.execute(
            """
            INSERT INTO apps (id) VALUES ('\(otherApp)');
            INSERT INTO subscriptions (id, app_id, platform, token) VALUES
                ('b0000000-0000-4000-8000-000000000001', '\(otherApp)', 'ios', 'h');
            INSERT INTO notifications (id, app_id, message, target, status, targeted_count) VALUES
                ('b0000000-0000-4000-8000-0000000000f1', '\(otherApp)', '{}', '{"all": true}', 'expanded', 1);
            INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at) VALUES
                ('b0000000-0000-4000-8000-0000000000f1', 'b0000000-0000-4000-8000-000000000001', '\(otherApp)',
                 now() - interval '30 seconds');
            """)
        return try connection.query("SELECT run_at FROM deliveries WHERE app_id = '\(otherApp)'")[0]
            .decode(Date.self, "run_at")
    }

    /// The held rows per provider as the metrics' queue sample counts them (``QueueDepthStore``).
    static func sampledHeld(_ url: String) async throws -> [String: Int] {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            let sample = try connection.transaction { try QueueDepthStore.measureQueueDepth(on: $0) }
            return sample.depth.compactMapValues { $0.held == 0 ? nil : $0.held }
        }
    }

    @Test func aFleetPauseHoldsEveryDueDeliveryOutOfDueAndTheLag() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
            }
            let paused = try await OperatorCommandTests.command(["pause", "--fleet"], databaseURL: url)
            #expect(paused.status == 0, "\(paused.errors)")

            let (status, text, errors) = try await Self.status(databaseURL: url)
            #expect(status == 0, "stderr: \(errors)")
            let lines = Self.folded(text)
            for expected in [
                "queue due held deferred leased", "apns 0 2 1 2", "fcm 0 1 0 1", "webpush 0 1 0 0", "other 0 0 1 0",
                "total 0 4 2 3", "held: 4 due, kept from claims by the fleet's operator pause (not in due or the lag)",
                "lag: none (nothing is due)",
            ] {
                #expect(lines.contains(expected), "missing \"\(expected)\" in:\n\(text)")
            }
            #expect(text.contains("no claims until resumed (pushizo-worker resume --fleet)"), "\(text)")

            let (_, json, _) = try await Self.status(["--json"], databaseURL: url)
            let snapshot = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            #expect(snapshot.queue.due == .exact(0) && snapshot.queue.held == .exact(4))
            #expect(snapshot.queue.lagSeconds == nil && snapshot.queue.oldestDueAt == nil)
            #expect(snapshot.queue.providers.map(\.held) == [.exact(2), .exact(1), .exact(1), .exact(0), .exact(0)])
            #expect(snapshot.queue.providers.map(\.due) == [.exact(0), .exact(0), .exact(0), .exact(0), .exact(0)])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            let queue = try #require(object["queue"] as? [String: Any])
            #expect((queue["held"] as? [String: Any])?["value"] as? Int == 4, "\(json)")
            // The same rows the metrics call held (the sample's `other` is `none`).
            #expect(try await Self.sampledHeld(url) == ["apns": 2, "fcm": 1, "webpush": 1])

            let page = FleetStatusPage.html(snapshot, freshness: .init(ageSeconds: 0, refreshSeconds: 10))
            #expect(page.contains("<tr id=\"queue-total\"><th scope=\"row\"><strong>total</strong></th><td>0</td><td>4</td><td>2</td><td>3</td></tr>"), "\(page)")
            #expect(page.contains("<p id=\"held\">"))
            #expect(page.contains("<p id=\"lag\">Lag: none (nothing is due)</p>"))
        }
    }

    @Test func anAppPauseHoldsThatAppsDueDeliveriesOnly() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let otherRunAt = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
                return try Self.seedOtherApp(connection)
            }
            let paused = try await OperatorCommandTests.command(["pause", "--app", Self.app], databaseURL: url)
            #expect(paused.status == 0, "\(paused.errors)")
            let (status, json, errors) = try await Self.status(["--json"], databaseURL: url)
            #expect(status == 0, "stderr: \(errors)")
            let snapshot = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            #expect(snapshot.queue.due == .exact(1) && snapshot.queue.held == .exact(4))
            #expect(snapshot.queue.providers.map(\.due) == [.exact(1), .exact(0), .exact(0), .exact(0), .exact(0)])
            #expect(snapshot.queue.providers.map(\.held) == [.exact(2), .exact(1), .exact(1), .exact(0), .exact(0)])
            // The lag is the other app's delivery, not the paused app's 10-minute-old one.
            // (JSON instants are whole seconds; the paused app's oldest is 10 minutes older.)
            #expect(abs(try #require(snapshot.queue.oldestDueAt).timeIntervalSince(otherRunAt)) < 1)
            #expect(try await Self.sampledHeld(url) == ["apns": 2, "fcm": 1, "webpush": 1])

            let (_, text, _) = try await Self.status(databaseURL: url)
            #expect(Self.folded(text).contains("held: 4 due, kept from claims by their apps' operator pauses (not in due or the lag)"), "\(text)")
            // The STATUS= line's lag leaves the held rows out in the same way.
            let reading = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                return try QueueLagStore.reading(on: connection)
            }
            let lagBound = Date().timeIntervalSince(otherRunAt) + 1
            #expect(reading.seconds >= 30 && reading.seconds <= lagBound, "\(reading)")
            #expect(reading.fleetPausedUntil == nil)
        }
    }

    @Test func pastTheLimitsHeldRowsAreEstimatedLikeDueOnes() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let snapshot = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
                try connection.execute(
                    "UPDATE fleet_settings SET paused_until = 'infinity', paused_reason = 'operator'; ANALYZE deliveries;")
                return try FleetStatusStore.read(
                    on: connection,
                    limits: .init(countLimit: 3, exactSplitLimit: 0, sampleRows: 1_000_000, eventSamples: 1_000_000))
            }
            let queue = snapshot.queue
            // held 4 > 3 counted: the planner's 9 rows x the sample's held share 4/9.
            #expect(queue.held == .estimate(4, countedAtLeast: 3))
            #expect(queue.due == .exact(0))
            #expect(queue.providers.map(\.held) == [.estimate(2), .estimate(1), .estimate(1), .estimate(0), .estimate(0)])
            #expect(queue.providers.map(\.due) == [.exact(0), .exact(0), .exact(0), .exact(0), .exact(0)])
            #expect(queue.lagSeconds == nil)
        }
    }

    @Test func aTimedFleetPauseSaysWhenClaimsResume() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let paused = try await OperatorCommandTests.command(["pause", "--fleet", "--until", "20m"], databaseURL: url)
            #expect(paused.status == 0, "\(paused.errors)")
            let (status, text, errors) = try await Self.status(databaseURL: url)
            #expect(status == 0, "stderr: \(errors)")
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("FLEET PAUSED") }, "\(text)")
            #expect(!line.contains("no claims until resumed"), "\(line)")
            #expect(
                line.contains(#/no claims until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in [^)]+\), when the pause ends by itself, or until resumed sooner \(pushizo-worker resume --fleet\)/#),
                "\(line)")
            let (_, json, _) = try await Self.status(["--json"], databaseURL: url)
            let snapshot = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            let pause = try #require(snapshot.fleetPause)
            let page = FleetStatusPage.html(snapshot, freshness: .init(ageSeconds: 0, refreshSeconds: 10))
            #expect(page.contains(HTMLText.escaped(FleetStatusRenderer.fleetPauseEffect(pause, snapshot.takenAt))), "\(page)")
            #expect(!page.contains("no claims until resumed"))
        }
    }
}
