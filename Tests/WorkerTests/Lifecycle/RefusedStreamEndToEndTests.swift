import Foundation
import Postgres
import Testing

/// A provider that announces 1000 concurrent streams but refuses every stream beyond 5 on a connection
/// (REFUSED_STREAM, RFC 9113 §8.7): the HTTP/2 client lowers the connection's stream limit and resends inside
/// the transport, so the database sees one `sent` per delivery and no `retrying` event.
@Suite("Refused streams end to end", .serialized)
struct RefusedStreamEndToEndTests {
    static let count = 2000

    @Test func streamsRefusedBeyondFiveAreResentInsideTheTransportWithoutADatabaseWrite() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(refuseStreamsBeyond: 5) { emulator in
                try await onThread {
                    let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: Self.count)
                    try seed.notification(target: #"{"all": true}"#)
                }
                // Ten streams in all (two connections of five) carry every push: few requests in flight at once
                // and long deadlines, so a loaded machine slows the run down without timing requests out.
                let worker = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator,
                    environment: [
                        "PUSHIZO_CONCURRENCY": "32", "PUSHIZO_REQUEST_TIMEOUT": "120", "PUSHIZO_LEASE_SECONDS": "600",
                    ])
                try await SmallNotificationEndToEndTests.waitUntilExit(worker.process, limit: 300)
                worker.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(worker.process.terminationStatus == 0)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let row = try await database.query(
                    """
                    SELECT (SELECT count(*) FROM delivery_events WHERE event = 'sent') AS sent,
                           (SELECT count(DISTINCT subscription_id) FROM delivery_events WHERE event = 'sent') AS delivered,
                           (SELECT count(*) FROM delivery_events WHERE event = 'retrying') AS retrying,
                           (SELECT count(*) FROM deliveries) AS left
                    """)[0]
                await database.shutdown()
                #expect(row["sent"] == "\(Self.count)")
                #expect(row["delivered"] == "\(Self.count)")
                #expect(row["retrying"] == "0")
                #expect(row["left"] == "0")
                // Each push reached the provider once, and the provider did refuse streams along the way.
                #expect(emulator.apns.acceptedCount == Self.count)
                #expect((emulator.server?.refusedStreamCount ?? 0) > 0)
            }
        }
    }
}
