import Foundation
import Postgres
import Testing
@testable import Worker

@Suite("Expand-only workers")
struct ExpandOnlyWorkerTests {
    @Test func anExpandOnlyWorkerCreatesDeliveriesAndSendsNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    for _ in 0..<5 { try seed.subscription() }
                    try seed.notification(target: #"{"all": true}"#)
                }
                try await runUntilDrained(
                    try WorkerRuntime(
                        configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_ROLES": "expand"]),
                        logger: quietLogger))
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let row = try await database.query(
                    "SELECT (SELECT count(*) FROM deliveries WHERE attempt = 0) AS queued, (SELECT count(*) FROM delivery_events) AS events, (SELECT status FROM notifications) AS status")[0]
                await database.shutdown()
                #expect(row["queued"] == "5")
                #expect(row["events"] == "0")
                #expect(row["status"] == "expanded")
                #expect(emulator.apns.acceptedCount == 0)
            }
        }
    }
}
