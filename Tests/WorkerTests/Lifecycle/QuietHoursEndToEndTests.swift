import Foundation
import Postgres
import Testing
@testable import Worker

@Suite("Quiet hours end to end")
struct QuietHoursEndToEndTests {
    static func utcTime(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }

    @Test func heldDeliveriesAreDeferredWithoutAnAttemptAndExemptOnesGo() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                // The app's night is now: a window from an hour ago to an hour ahead, in UTC (no zones set).
                let now = Date()
                let end = now.addingTimeInterval(3600)
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query(
                        "UPDATE apps SET quiet_hours_start = $2::time, quiet_hours_end = $3::time WHERE id = $1",
                        [seed.appID, Self.utcTime(now.addingTimeInterval(-3600)), Self.utcTime(end)])
                    let subscription = try seed.subscription()
                    let held = try seed.notification(
                        message: #"{"contents": {"en": "good night"}}"#,
                        target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    let exempt = try seed.notification(
                        message: #"{"contents": {"en": "your code is 1234"}, "quiet_hours_exempt": true}"#,
                        target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    return (held, exempt)
                }
                let (held, exempt) = ids
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_QUIET_HOURS_SPREAD": "0"]),
                    logger: quietLogger)
                try await runUntil(runtime, "both notifications have an event") {
                    let rows = try await database.query("SELECT count(DISTINCT notification_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "2"
                }
                let events = try await database.query(
                    "SELECT notification_id, event, reason, attempt, detail->>'until' AS until FROM delivery_events")
                for row in events {
                    let notification = try row.decode(UUID.self, "notification_id")
                    if notification == exempt { #expect(row["event"] == "sent") }
                    if notification == held {
                        #expect(row["event"] == "deferred")
                        #expect(row["reason"] == "quiet_hours")
                        #expect(row["attempt"] == "0")
                        let until = try #require(ISO8601DateFormatter().date(from: row["until"] ?? ""))
                        #expect(abs(until.timeIntervalSince(end)) < 1.5)
                    }
                }
                let queued = try await database.query(
                    "SELECT attempt, extract(epoch FROM run_at)::float8 AS run_at FROM deliveries WHERE notification_id = $1", [held])
                #expect(queued.count == 1)
                #expect(queued.first?["attempt"] == "0")
                #expect(abs(try queued[0].decode(Double.self, "run_at") - end.timeIntervalSince1970) < 1.5)
                await database.shutdown()
            }
        }
    }
}
