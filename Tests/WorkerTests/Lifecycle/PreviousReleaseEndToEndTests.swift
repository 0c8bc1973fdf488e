import Foundation
import Postgres
import Testing

/// The compatibility window with the real previous release (docs/operations.md, "Upgrade: migrations first"): the worker binary of
/// the commit in compat/previous-release, built from this repository's history by
/// scripts/previous-release-build.sh (`PUSHIZO_TEST_PREVIOUS_WORKER`, set by scripts/run-tests.sh), runs against
/// the current migrations under load — a broadcast to thousands of devices through the APNs emulator and
/// one-device notifications — and delivers each exactly once, with no failure of any kind.
@Suite("previous release against the current migrations")
struct PreviousReleaseEndToEndTests {
    static let previousWorker = ProcessInfo.processInfo.environment["PUSHIZO_TEST_PREVIOUS_WORKER"].flatMap { $0.isEmpty ? nil : $0 }
    static let devices = 3000
    static let oneDeviceNotifications = 200

    @Test(.enabled(
        if: previousWorker != nil,
        "PUSHIZO_TEST_PREVIOUS_WORKER is not set: scripts/run-tests.sh builds the previous release and sets it (it says why when the clone's history lacks the commit)"))
    func thePreviousWorkerDeliversEverythingOnTheCurrentSchema() async throws {
        let executable = try #require(Self.previousWorker)
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let appID = try await onThread {
                    let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: Self.devices)
                    try seed.notification(message: #"{"contents": {"en": "Everyone"}}"#, target: #"{"all": true}"#)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target)
                        SELECT $1, '{"contents": {"en": "Just you"}}', jsonb_build_object('include_subscription_ids', jsonb_build_array(id))
                        FROM (SELECT id FROM subscriptions WHERE app_id = $1 ORDER BY id LIMIT $2) s
                        """, [seed.appID, Self.oneDeviceNotifications])
                    return seed.appID
                }

                let process = emulator.workerProcess(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "true"])
                process.executableURL = URL(fileURLWithPath: executable)
                let output = Pipe()
                process.standardError = output
                process.standardOutput = output
                try process.run()
                // Hang guard (not a timing assertion): a worker that stops making progress is ended.
                let guardKill = Task {
                    try await Task.sleep(for: .seconds(600))
                    process.terminate()
                }
                // Read as it comes: a statement the schema refuses (a column, table or function the old worker
                // expects and does not find; a constraint it does not fill) ends the run at once, since the worker
                // would only retry it until the guard.
                let schemaErrors = ["SQLSTATE 42703", "SQLSTATE 42P01", "SQLSTATE 42883", "SQLSTATE 42804", "SQLSTATE 23502", "SQLSTATE 23514"]
                let text = try await onThread {
                    var text = ""
                    while case let chunk = output.fileHandleForReading.availableData, !chunk.isEmpty {
                        text += String(decoding: chunk, as: UTF8.self)
                        if schemaErrors.contains(where: text.contains), process.isRunning { process.terminate() }
                    }
                    return text
                }
                try await onThread { process.waitUntilExit() }
                guardKill.cancel()
                #expect(process.terminationStatus == 0, "\(text.suffix(4000))")
                for sqlState in schemaErrors {
                    #expect(!text.contains(sqlState), "\(sqlState) in: \(text.suffix(4000))")
                }

                let row = try await onThread {
                    let c = try PostgresConnection(connectionString: url)
                    defer { c.close() }
                    return try c.query(
                        """
                        SELECT (SELECT count(*) FROM notifications WHERE app_id = $1 AND status = 'expanded') AS expanded,
                               (SELECT count(*) FROM notifications WHERE app_id = $1) AS notifications,
                               (SELECT count(*) FROM deliveries) AS left,
                               (SELECT count(*) FROM delivery_events WHERE event = 'sent') AS sent,
                               (SELECT count(*) FROM delivery_events WHERE event <> 'sent') AS other,
                               (SELECT count(*) FROM (SELECT 1 FROM delivery_events GROUP BY notification_id, subscription_id
                                                      HAVING count(*) FILTER (WHERE event = 'sent') <> 1) d) AS not_once,
                               (SELECT count(DISTINCT subscription_id) FROM delivery_events WHERE event = 'sent') AS devices
                        """, [appID])[0]
                }
                #expect(row["notifications"] == "\(1 + Self.oneDeviceNotifications)")
                #expect(row["expanded"] == row["notifications"])
                #expect(row["left"] == "0")
                #expect(row["sent"] == "\(Self.devices + Self.oneDeviceNotifications)")
                #expect(row["other"] == "0")
                #expect(row["not_once"] == "0")
                #expect(row["devices"] == "\(Self.devices)")
            }
        }
    }
}
