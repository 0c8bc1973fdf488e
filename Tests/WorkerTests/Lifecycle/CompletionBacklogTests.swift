import Emulator
import Foundation
import Postgres
import Testing

/// The real executable while `delivery_events` refuses inserts (a producer's trigger, a full disk, a bad
/// migration): completions back up. A push the provider accepted must never be sent again while the worker
/// lives, claiming must stop while completions wait, one refused row must not hold back the others, and
/// SIGTERM must still end the process within the shutdown timeout.
@Suite("Completion backlog of pushizo-worker run", .serialized)
struct CompletionBacklogTests {
    /// A trigger that refuses every `delivery_events` insert, or only those of one subscription.
    static func installRefusingTrigger(on connection: PostgresConnection, onlyFor subscription: UUID? = nil) throws {
        let condition = subscription.map { "NEW.subscription_id = '\($0.uuidString.lowercased())'" } ?? "true"
        try connection.execute(
            """
            CREATE FUNCTION refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF \(condition) THEN RAISE EXCEPTION 'delivery_events is refusing inserts'; END IF;
                RETURN NEW;
            END;
            $$;
            CREATE TRIGGER refuse_events BEFORE INSERT ON delivery_events
                FOR EACH ROW EXECUTE FUNCTION refuse_events();
            """)
    }

    /// Seeds `count` iOS subscriptions and one notification to all of them; returns the subscription ids.
    static func seed(_ url: String, emulator: EmulatorHarness, count: Int) throws -> [UUID] {
        let seed = try Seed(url)
        try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
        let subscriptions = try (0..<count).map { _ in try seed.subscription() }
        let list = subscriptions.map { "\"\($0.uuidString.lowercased())\"" }.joined(separator: ", ")
        try seed.notification(target: #"{"include_subscription_ids": [\#(list)]}"#)
        return subscriptions
    }

    /// Starts `pushizo-worker run` with a `leaseSeconds` lease and short timeouts; stderr goes to `log`. The
    /// request timeout is the longest the lease allows (half of it): a request that times out is sent again
    /// by design (its outcome is unknown), so a short one makes a busy machine's slow emulator answers look
    /// like duplicate sends.
    static func startWorker(
        url: String, emulator: EmulatorHarness, log: String, leaseSeconds: Int = 10, extra: [String] = []
    ) throws -> Process {
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments =
            [
                "run", "--lease-seconds", "\(leaseSeconds)", "--request-timeout", "\(leaseSeconds / 2)",
                "--shutdown-timeout", "2",
                "--poll-interval", "0.05", "--retry-base", "0.05", "--retry-max", "1",
            ] + extra
        process.environment = [
            "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "notice",
            // The emulator listens on 127.0.0.1, which the egress policy refuses by default.
            "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        process.standardError = FileHandle(forWritingAtPath: log)
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Sends SIGTERM and waits (hang guard: `limit` seconds, then SIGKILL and a recorded issue).
    static func stop(_ process: Process, limit: Double = 20) async throws -> Bool {
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(limit)
        while process.isRunning && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            try await onThread { process.waitUntilExit() }
            return false
        }
        return true
    }

    /// Waits until `condition` holds (hang guard `limit` seconds); returns whether it did.
    static func wait(limit: Double = 20, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(limit)
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test func refusedEventInsertsNeverResendAcceptedPushesAndSigtermStillEndsTheProcess() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try Self.installRefusingTrigger(on: seed.connection)
                }
                _ = try await onThread { try Self.seed(url, emulator: emulator, count: 6) }
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("backlog-\(UUID()).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                // Two slots: the two accepted pushes whose completions cannot be written hold them.
                let process = try Self.startWorker(url: url, emulator: emulator, log: log, extra: ["--concurrency", "2"])
                #expect(try await Self.wait { emulator.apns.acceptedCount >= 2 })
                // Past a lease's lifetime (10 s): without lease upkeep the same pushes would be claimed and sent again.
                try await Task.sleep(for: .seconds(13))
                let accepted = emulator.apns.acceptedNotifications.map(\.apnsID)
                #expect(accepted.count == 2, "accepted: \(accepted)")
                #expect(Set(accepted).count == accepted.count, "the same push was accepted twice")
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                // Their leases are still held: no other worker may claim them.
                let held = try await database.query(
                    "SELECT count(*) AS n FROM deliveries WHERE leased_by IS NOT NULL AND run_at > now()")
                #expect(held[0]["n"] == "2")
                await database.shutdown()

                #expect(try await Self.stop(process), "the worker did not exit after SIGTERM")
                #expect(process.terminationStatus != 0)
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                #expect(text.contains("completions not written"), "log: \(text.suffix(2000))")
            }
        }
    }

    @Test func oneRefusedCompletionIsSetAsideTheOthersAreWrittenAndItIsWrittenOnceItCanBe() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let subscriptions = try await onThread { try Self.seed(url, emulator: emulator, count: 5) }
                let refused = subscriptions[2]
                try await onThread { try Self.installRefusingTrigger(on: try Seed(url).connection, onlyFor: refused) }
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("backlog-\(UUID()).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                // No lease expiry matters here: a long lease and request timeout keep a loaded machine from
                // turning a slow answer into a second send.
                let process = try Self.startWorker(url: url, emulator: emulator, log: log, leaseSeconds: 40)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                #expect(try await Self.wait {
                    let rows = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")
                    return rows[0]["n"] == "4"
                })
                // The refused completion may reach the completer after the other four: drop the trigger only
                // once the worker has said it set that one aside.
                #expect(try await Self.wait {
                    ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("completion refused")
                })
                _ = try await database.query("DROP TRIGGER refuse_events ON delivery_events")
                #expect(try await Self.wait {
                    let rows = try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent' AND subscription_id = $1", [refused])
                    return rows[0]["n"] == "1"
                })
                #expect(emulator.apns.acceptedCount == 5)
                #expect(try await Self.stop(process))
                #expect(process.terminationStatus == 0)
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                #expect(text.contains("completion refused"), "log: \(text.suffix(2000))")
                await database.shutdown()
            }
        }
    }

    @Test func whenLeasesCannotBeRenewedEitherTheWorkersOwnNewClaimIsNotSentAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let connection = try Seed(url).connection
                    try Self.installRefusingTrigger(on: connection)
                    // Renewals keep the fence; claims bump it: only renewals are refused.
                    try connection.execute(
                        """
                        CREATE FUNCTION refuse_renewals() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN
                            IF NEW.fence = OLD.fence THEN RAISE EXCEPTION 'deliveries refuses lease renewals'; END IF;
                            RETURN NEW;
                        END;
                        $$;
                        CREATE TRIGGER refuse_renewals BEFORE UPDATE ON deliveries
                            FOR EACH ROW EXECUTE FUNCTION refuse_renewals();
                        """)
                }
                _ = try await onThread { try Self.seed(url, emulator: emulator, count: 2) }
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("backlog-\(UUID()).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                // Room to claim while the two completions wait, so the expired leases are claimed again.
                let process = try Self.startWorker(url: url, emulator: emulator, log: log, extra: ["--concurrency", "4"])
                #expect(try await Self.wait { emulator.apns.acceptedCount >= 2 })
                // The leases run out (10 s) before the worker's own claim finds them again.
                #expect(try await Self.wait(limit: 45) {
                    ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("not sending them again")
                })
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                _ = try await database.query("DROP TRIGGER refuse_events ON delivery_events")
                _ = try await database.query("DROP TRIGGER refuse_renewals ON deliveries")
                #expect(try await Self.wait {
                    let rows = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")
                    return rows[0]["n"] == "2"
                })
                #expect(emulator.apns.acceptedCount == 2)
                #expect(try await database.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                #expect(try await Self.stop(process))
                #expect(process.terminationStatus == 0)
                await database.shutdown()
            }
        }
    }
}
