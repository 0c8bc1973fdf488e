import Foundation
import Postgres
import SocketTestSupport
import Testing

/// Deliveries rescued from the leases of a worker killed with SIGKILL: the worker that claims them counts them
/// (`pushizo_deliveries_rescued_total`) and logs one line per claimed batch naming the dead worker, and each is
/// sent once.
@Suite("Rescued leases end to end", .serialized)
struct RescuedLeasesEndToEndTests {
    static let count = 20

    @Test func aWorkerKilledHoldingLeasesHasItsDeliveriesCountedAsRescuedOnceEach() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            // The first worker's provider holds every answer for a minute, so its sends stay in flight and their
            // leases held until it is killed; the second worker's answers at once.
            try await EmulatorHarness.with(latency: 60) { slow in
            try await EmulatorHarness.with { emulator in
                let appID = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: slow.channelSettings, endpoint: slow.endpoint)
                    for _ in 0..<Self.count { try seed.subscription() }
                    _ = try seed.connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target)
                        SELECT $1, '{"contents": {"en": "rescued"}}', jsonb_build_object('include_subscription_ids', jsonb_agg(id))
                        FROM subscriptions
                        """, [seed.appID])
                    return seed.appID
                }
                let doomed = slow.workerProcess(
                    databaseURL: url,
                    extra: [
                        "PUSHIZO_WORKER_ID": "w-doomed", "PUSHIZO_LEASE_SECONDS": "600", "PUSHIZO_REQUEST_TIMEOUT": "120",
                    ])
                doomed.standardError = FileHandle.nullDevice
                try doomed.run()
                defer { if doomed.isRunning { kill(doomed.processIdentifier, SIGKILL) } }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(60)  // a hang guard, not a timing assertion
                var held = 0
                while held < Self.count && ContinuousClock.now < deadline {
                    held = try await database.query(
                        "SELECT count(*) AS n FROM deliveries WHERE leased_by = 'w-doomed' AND run_at > now()"
                    )[0].decode(Int.self, "n")
                    if held < Self.count { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(held == Self.count)
                kill(doomed.processIdentifier, SIGKILL)
                try await onThread { doomed.waitUntilExit() }
                // The leases' end brought forward instead of waited for (run_at is the lease's expiry), the app's
                // claim turn with them, and the channel pointed at a provider that answers.
                _ = try await database.query("UPDATE deliveries SET run_at = now() WHERE leased_by = 'w-doomed'")
                _ = try await database.query("UPDATE app_claim_turns SET turn_at = now() WHERE app_id = $1", [appID])
                _ = try await database.query(
                    "UPDATE app_channels SET endpoint = $1, settings = $2::jsonb WHERE app_id = $3",
                    [emulator.endpoint, emulator.channelSettings, appID])

                let port = try freePort()
                let rescuer = emulator.workerProcess(
                    databaseURL: url,
                    extra: ["PUSHIZO_WORKER_ID": "w-rescuer", "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                let output = ExpansionStallTests.Output()
                let pipe = Pipe()
                pipe.fileHandleForReading.readabilityHandler = { output.append($0.availableData) }
                rescuer.standardError = pipe
                try rescuer.run()
                defer { if rescuer.isRunning { kill(rescuer.processIdentifier, SIGKILL) } }
                var sent = 0
                while sent < Self.count && ContinuousClock.now < deadline + .seconds(60) {
                    sent = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")[0]
                        .decode(Int.self, "n")
                    if sent < Self.count { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(sent == Self.count)
                let text = try await scrape("http://127.0.0.1:\(port)/metrics")
                #expect(sample(text, #"pushizo_deliveries_rescued_total{provider="apns"}"#) == Double(Self.count), "\(text)")
                #expect(sample(text, #"pushizo_deliveries_rescued_total{provider="fcm"}"#) == 0)
                rescuer.terminate()
                try await onThread { rescuer.waitUntilExit() }
                pipe.fileHandleForReading.readabilityHandler = nil
                #expect(rescuer.terminationStatus == 0)

                // One line per claimed batch with rescued rows, never one per row; together they name every one.
                let lines = output.lines.filter { $0.contains("leases ran out without a completion") }
                #expect(!lines.isEmpty && lines.count < Self.count, "\(output.lines)")
                var rescued = 0
                for line in lines {
                    #expect(line.contains("from=w-doomed"), "\(line)")
                    let range = try #require(line.range(of: "rescued="))
                    rescued += Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0
                }
                #expect(rescued == Self.count)
                // Each sent once by the rescuer; the killed worker's requests were never answered.
                #expect(emulator.apns.acceptedCount == Self.count)
                let duplicates = try await database.query(
                    "SELECT count(*) AS n FROM (SELECT subscription_id FROM delivery_events WHERE event = 'sent' GROUP BY 1 HAVING count(*) > 1) d"
                )[0].decode(Int.self, "n")
                #expect(duplicates == 0)
                await database.shutdown()
            }
            }
        }
    }
}
