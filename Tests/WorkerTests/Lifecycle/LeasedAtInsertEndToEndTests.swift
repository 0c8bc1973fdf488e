import Foundation
import Postgres
import Testing
@testable import Worker

/// Deliveries leased at insert (docs/performance.md, "Deliveries leased at insert") through the real executable
/// and the APNs emulator: a broadcast the expanding worker has room for is sent without a single claim, and rows
/// leased to a worker that never sends them are claimed by another once the lease ends and sent once.
@Suite("Deliveries leased at insert end to end", .serialized)
struct LeasedAtInsertEndToEndTests {
    static let count = 1_500

    /// Counts claims of `deliveries` rows exactly: updates that move a row's fence (a claim bumps it; a lease
    /// renewal or a rescheduled retry does not), and among them first claims (from fence 0: a row inserted
    /// leased starts at fence 1, so only a claim again, after a withdrawal or an expired lease, moves it).
    static func countClaims(_ connection: PostgresConnection) throws {
        _ = try connection.query("CREATE TABLE test_claims (n bigint NOT NULL, first bigint NOT NULL)")
        _ = try connection.query("INSERT INTO test_claims VALUES (0, 0)")
        _ = try connection.query(
            """
            CREATE FUNCTION test_count_claims() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE test_claims
                SET n = n + (SELECT count(*) FROM new_rows r JOIN old_rows o ON o.id = r.id WHERE r.fence <> o.fence),
                    first = first + (SELECT count(*) FROM new_rows r JOIN old_rows o ON o.id = r.id
                                     WHERE r.fence <> o.fence AND o.fence = 0);
                RETURN NULL;
            END;
            $$
            """)
        _ = try connection.query(
            """
            CREATE TRIGGER test_count_claims AFTER UPDATE ON deliveries
                REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION test_count_claims()
            """)
    }

    /// `sent` events per attempt, subscriptions sent to, deliveries left, claims and first claims counted.
    static func outcome(_ url: String) async throws
        -> (sentByAttempt: [Int: Int], subscriptions: Int, left: Int, claims: Int, firstClaims: Int)
    {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
            var sent: [Int: Int] = [:]
            for row in try connection.query(
                "SELECT attempt, count(*) AS n FROM delivery_events WHERE event = 'sent' GROUP BY attempt")
            {
                sent[try row.decode(Int.self, "attempt")] = try row.decode(Int.self, "n")
            }
            let row = try connection.query(
                """
                SELECT (SELECT count(DISTINCT subscription_id) FROM delivery_events WHERE event = 'sent') AS subscriptions,
                       (SELECT count(*) FROM deliveries) AS left,
                       (SELECT n FROM test_claims) AS claims, (SELECT first FROM test_claims) AS first_claims
                """)[0]
            return (
                sent, try row.decode(Int.self, "subscriptions"), try row.decode(Int.self, "left"),
                try row.decode(Int.self, "claims"), try row.decode(Int.self, "first_claims")
            )
        }
    }

    /// Runs one worker with `environment` until it has drained the queue and exited 0; expects `count` devices each
    /// sent once, nothing left, and no delivery claimed for its first send.
    /// - Returns: the outcome, for further expectations.
    static func drainExpectingNoFirstClaim(
        _ url: String, _ emulator: EmulatorHarness, environment: [String: String], count: Int, limit: Double = 60
    ) async throws -> (sentByAttempt: [Int: Int], subscriptions: Int, left: Int, claims: Int, firstClaims: Int) {
        let worker = try SmallNotificationEndToEndTests.startWorker(url, emulator, environment: environment)
        try await SmallNotificationEndToEndTests.waitUntilExit(worker.process, limit: limit)
        worker.pipe.fileHandleForReading.readabilityHandler = nil
        #expect(worker.process.terminationStatus == 0)
        let outcome = try await Self.outcome(url)
        #expect(outcome.sentByAttempt.values.reduce(0, +) == count)
        #expect(outcome.subscriptions == count)
        #expect(outcome.left == 0)
        // Claimed for its first send, every delivery would be one.
        #expect(outcome.firstClaims == 0)
        return outcome
    }

    /// A broadcast of `count` subscriptions expanded by one worker with room for all of them
    /// (`PUSHIZO_CONCURRENCY` 2,048: a lone app may hold 1,792): every delivery is leased as it is inserted and
    /// sent once, and none is claimed for its first send. (On a starved machine a request that waits 2 s for a
    /// stream is withdrawn, `origin_busy`, and claimed again later: those claims are counted, and allowed.)
    @Test func aBroadcastTheWorkerHasRoomForIsSentWithoutAClaim() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: Self.count)
                    try Self.countClaims(seed.connection)
                    try seed.notification(message: #"{"contents": {"en": "Sale today"}}"#, target: #"{"all": true}"#)
                }
                let outcome = try await Self.drainExpectingNoFirstClaim(
                    url, emulator, environment: ["PUSHIZO_CONCURRENCY": "2048"], count: Self.count)
                #expect(outcome.claims < Self.count)
                #expect(emulator.apns.acceptedCount == Self.count)
            }
        }
    }

    /// A broadcast to 200 devices whose one chunk a worker leased (as rows, or as a page with `leasesPages`) and
    /// never sent (killed right after its chunk committed, lease 2 s), then drained by a new worker.
    static func leaseToAWorkerThatNeverSends(_ url: String, _ emulator: EmulatorHarness, leasesPages: Bool) async throws
        -> (sentByAttempt: [Int: Int], subscriptions: Int, left: Int, claims: Int, firstClaims: Int)
    {
        let leased = try await onThread {
            let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: 200)
            try Self.countClaims(seed.connection)
            try seed.notification(message: #"{"contents": {"en": "Sale today"}}"#, target: #"{"all": true}"#)
            var suspects = ExpansionSuspects()
            var leased = LeasedRows.none
            _ = try ExpansionStore.expandNext(
                on: seed.connection, suspects: &suspects,
                lease: ExpansionStore.InsertLease(workerID: "killed-worker", lease: .seconds(2), leasesPages: leasesPages) {
                    _, upTo in upTo
                },
                leased: &leased)
            return leased.count
        }
        #expect(leased == 200)
        let worker = try SmallNotificationEndToEndTests.startWorker(url, emulator, environment: [:])
        try await SmallNotificationEndToEndTests.waitUntilExit(worker.process)
        worker.pipe.fileHandleForReading.readabilityHandler = nil
        #expect(worker.process.terminationStatus == 0)
        return try await Self.outcome(url)
    }

    /// Rows a chunk leased to a worker that then never sent them (killed right after its chunk committed): a new
    /// worker claims them once the lease ends and sends each once, as their second attempt.
    @Test func rowsLeasedToAWorkerThatNeverSendsAreClaimedAndSentByAnother() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let outcome = try await Self.leaseToAWorkerThatNeverSends(url, emulator, leasesPages: false)
                // Each sent once, by a claim after the lease (attempt 2 or, withdrawn on a starved machine, later).
                #expect(outcome.sentByAttempt.values.reduce(0, +) == 200)
                #expect(outcome.sentByAttempt[1] == nil)
                #expect(outcome.subscriptions == 200)
                #expect(outcome.left == 0)
                #expect(outcome.firstClaims == 0)
                #expect(outcome.claims >= 200)
                #expect(emulator.apns.acceptedCount == 200)
            }
        }
    }
}
