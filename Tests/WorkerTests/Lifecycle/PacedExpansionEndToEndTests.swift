import Foundation
import Postgres
import Testing
@testable import Worker

/// A broadcast many times larger than a worker's room, expanded by workers that send (docs/performance.md,
/// "Deliveries leased at insert"), through the real executable and the APNs emulator: its expansion is paced by
/// the sends, so every delivery is inserted leased and none is claimed for its first send; a second worker takes
/// part; a worker killed with SIGKILL mid-broadcast leaves the rest to another, and every device gets one event.
@Suite("Paced expansion end to end", .serialized)
struct PacedExpansionEndToEndTests {
    static let count = 3_000

    /// 64 slots and claim batches of 16: a lone app may hold 56 of them (the reserve of 8 left to small apps).
    /// Each answer held back 0.1 s, so one worker alone would take some seconds.
    static let environment = ["PUSHIZO_CONCURRENCY": "64", "PUSHIZO_CLAIM_BATCH": "16"]
    static let latency = 0.1

    /// Counts the deliveries completed (deleted from the queue) by the worker that held them.
    static func countCompletionsByWorker(_ connection: PostgresConnection) throws {
        _ = try connection.query("CREATE TABLE test_done_by (worker text NOT NULL, n bigint NOT NULL)")
        _ = try connection.query(
            """
            CREATE FUNCTION test_count_done_by() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO test_done_by SELECT coalesce(leased_by, '-'), count(*) FROM old_rows GROUP BY 1;
                RETURN NULL;
            END;
            $$
            """)
        _ = try connection.query(
            """
            CREATE TRIGGER test_count_done_by AFTER DELETE ON deliveries
                REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION test_count_done_by()
            """)
        // A leased page is deleted by the completion of its last delivery: each counts the deliveries it handed out.
        _ = try connection.query(
            """
            CREATE FUNCTION test_count_pages_done_by() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO test_done_by SELECT leased_by, sum(deliveries) FROM old_pages GROUP BY 1;
                RETURN NULL;
            END;
            $$
            """)
        _ = try connection.query(
            """
            CREATE TRIGGER test_count_pages_done_by AFTER DELETE ON delivery_pages
                REFERENCING OLD TABLE AS old_pages FOR EACH STATEMENT EXECUTE FUNCTION test_count_pages_done_by()
            """)
    }

    /// The broadcast to ``count`` devices at the emulator, with claims and completions by worker counted.
    static func seedBroadcast(_ url: String, _ emulator: EmulatorHarness) async throws {
        try await onThread {
            let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: Self.count)
            try LeasedAtInsertEndToEndTests.countClaims(seed.connection)
            try Self.countCompletionsByWorker(seed.connection)
            try seed.notification(message: #"{"contents": {"en": "Sale today"}}"#, target: #"{"all": true}"#)
        }
    }

    /// A sample of the run: deliveries sent, deliveries in the queue (its rows, and those of leased pages without
    /// an outcome yet), the notification's `targeted_count`.
    static func sample(_ connection: PostgresConnection) throws -> (sent: Int, queued: Int, targeted: Int) {
        let row = try connection.query(
            """
            SELECT (SELECT count(*) FROM delivery_events WHERE event = 'sent') AS sent,
                   (SELECT count(*) FROM deliveries)
                       + (SELECT coalesce(sum(p.deliveries - (
                              SELECT count(*) FROM delivery_events e
                              WHERE e.notification_id = p.notification_id AND e.subscription_id <= p.up_to
                                AND (p.after_id IS NULL OR e.subscription_id > p.after_id)
                                AND e.event IN ('sent', 'failed', 'skipped'))), 0)
                          FROM delivery_pages p) AS queued,
                   (SELECT coalesce(max(targeted_count), 0) FROM notifications) AS targeted
            """)[0]
        return (try row.decode(Int.self, "sent"), try row.decode(Int.self, "queued"), try row.decode(Int.self, "targeted"))
    }

    /// Waits until `sent` deliveries were sent while `process` runs, sampling the queue on the way.
    /// - Returns: the most rows the queue held at a sample.
    static func waitForSent(_ sent: Int, url: String, while process: Process) async throws -> Int {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
            var mostQueued = 0
            let deadline = ContinuousClock.now + .seconds(120)  // a hang guard, not a timing assertion
            while process.isRunning && ContinuousClock.now < deadline {
                let sample = try Self.sample(connection)
                mostQueued = max(mostQueued, sample.queued)
                if sample.sent >= sent { break }
                Thread.sleep(forTimeInterval: 0.02)
            }
            return mostQueued
        }
    }

    /// Events per subscription: how many subscriptions have exactly one, and the events in all.
    static func eventsPerDevice(_ url: String) async throws -> (once: Int, events: Int, doneBy: [String: Int]) {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
            let row = try connection.query(
                """
                SELECT (SELECT count(*) FROM (SELECT subscription_id FROM delivery_events
                                              GROUP BY 1 HAVING count(*) = 1) x) AS once,
                       (SELECT count(*) FROM delivery_events) AS events
                """)[0]
            var doneBy: [String: Int] = [:]
            for row in try connection.query("SELECT worker, sum(n)::bigint AS n FROM test_done_by GROUP BY 1") {
                doneBy[try row.decode(String.self, "worker")] = try row.decode(Int.self, "n")
            }
            return (try row.decode(Int.self, "once"), try row.decode(Int.self, "events"), doneBy)
        }
    }

    /// One worker with 64 slots expands a broadcast of 3,000 as it sends it: the queue never holds more than its
    /// slots; a second worker started once 300 are sent takes part. Every device is sent once, and no delivery is
    /// claimed for its first send (on a starved machine a request withdrawn after waiting for a stream,
    /// `origin_busy`, is claimed again: those claims are allowed).
    @Test func aBroadcastLargerThanTheRoomIsSentWithoutAClaimAndTheFleetTakesPart() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: Self.latency) { emulator in
                try await Self.seedBroadcast(url, emulator)
                let first = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: Self.environment.merging(["PUSHIZO_WORKER_ID": "first"]) { $1 })
                let mostQueued = try await Self.waitForSent(300, url: url, while: first.process)
                // Paced: only what the worker leased is in the queue, never more than its slots.
                #expect(mostQueued <= 64)
                let second = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: Self.environment.merging(["PUSHIZO_WORKER_ID": "second"]) { $1 })
                try await SmallNotificationEndToEndTests.waitUntilExit(first.process, limit: 120)
                try await SmallNotificationEndToEndTests.waitUntilExit(second.process, limit: 120)
                first.pipe.fileHandleForReading.readabilityHandler = nil
                second.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(first.process.terminationStatus == 0)
                #expect(second.process.terminationStatus == 0)
                let outcome = try await LeasedAtInsertEndToEndTests.outcome(url)
                #expect(outcome.sentByAttempt.values.reduce(0, +) == Self.count)
                #expect(outcome.subscriptions == Self.count)
                #expect(outcome.left == 0)
                // Claimed for its first send, every delivery after the first room's worth would be one.
                #expect(outcome.firstClaims == 0)
                #expect(outcome.claims < Self.count)
                let events = try await Self.eventsPerDevice(url)
                #expect(events.once == Self.count)
                #expect(events.events == Self.count)
                #expect(events.doneBy["first", default: 0] > 0)
                #expect(events.doneBy["second", default: 0] > 0)
                #expect(events.doneBy.values.reduce(0, +) == Self.count)
                let targeted = try await onThread {
                    let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                    return try connection.query("SELECT targeted_count FROM notifications")[0]
                        .decode(Int.self, "targeted_count")
                }
                #expect(targeted == Self.count)
            }
        }
    }

    /// Two apps' broadcasts, each larger than its share of one worker's room, paced at once: each waits for its
    /// own app's room (the other's notification is picked meanwhile), both drain, every device is sent once, and
    /// none is claimed for its first send.
    @Test func twoAppsBroadcastsArePacedSideBySide() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: Self.latency) { emulator in
                let apps = try await onThread {
                    let seeds = try (0..<2).map { _ in
                        try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: Self.count / 2)
                    }
                    try LeasedAtInsertEndToEndTests.countClaims(seeds[0].connection)
                    for seed in seeds {
                        try seed.notification(message: #"{"contents": {"en": "Sale today"}}"#, target: #"{"all": true}"#)
                    }
                    return seeds.map(\.appID)
                }
                _ = try await LeasedAtInsertEndToEndTests.drainExpectingNoFirstClaim(
                    url, emulator, environment: Self.environment, count: Self.count, limit: 120)
                let perApp = try await onThread {
                    let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                    return try connection.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent' AND app_id = ANY($1::uuid[]) GROUP BY app_id",
                        [apps]
                    ).map { try $0.decode(Int.self, "n") }
                }
                #expect(perApp == [Self.count / 2, Self.count / 2])
            }
        }
    }

    /// A worker killed with SIGKILL mid-broadcast: the rest of the broadcast was never inserted ahead; another
    /// worker expands and sends it, and claims what the killed one had leased once its lease ends (5 s). Every
    /// device gets exactly one event, and no delivery is claimed for its first send.
    @Test func aWorkerKilledMidBroadcastLeavesTheRestToAnother() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: Self.latency) { emulator in
                try await Self.seedBroadcast(url, emulator)
                let killed = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator,
                    environment: Self.environment.merging([
                        "PUSHIZO_WORKER_ID": "killed", "PUSHIZO_LEASE_SECONDS": "5", "PUSHIZO_REQUEST_TIMEOUT": "2",
                    ]) {
                        $1
                    })
                _ = try await Self.waitForSent(300, url: url, while: killed.process)
                #expect(killed.process.isRunning)
                kill(killed.process.processIdentifier, SIGKILL)
                killed.process.waitUntilExit()
                killed.pipe.fileHandleForReading.readabilityHandler = nil
                let atKill = try await onThread {
                    try Self.sample(try PostgresConnection(connectionString: url, applicationName: "pushizo-test"))
                }
                // The rest was not inserted ahead: at most the killed worker's slots beyond what it had answered.
                #expect(atKill.targeted < Self.count)
                #expect(atKill.queued <= 64)

                let rescuer = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: Self.environment.merging(["PUSHIZO_WORKER_ID": "rescuer"]) { $1 })
                try await SmallNotificationEndToEndTests.waitUntilExit(rescuer.process, limit: 120)
                rescuer.pipe.fileHandleForReading.readabilityHandler = nil
                #expect(rescuer.process.terminationStatus == 0)
                let outcome = try await LeasedAtInsertEndToEndTests.outcome(url)
                #expect(outcome.subscriptions == Self.count)
                #expect(outcome.left == 0)
                #expect(outcome.firstClaims == 0)
                let events = try await Self.eventsPerDevice(url)
                #expect(events.once == Self.count)
                #expect(events.events == Self.count)
                #expect(events.doneBy["rescuer", default: 0] > 0)
                // What the killed worker held leased is taken again (its rows claimed from fence 1, its pages rescued)
                // and settled by the rescuer, never claimed for a first send.
                #expect(events.doneBy["rescuer", default: 0] >= atKill.queued)
            }
        }
    }
}
