import Emulator
import Foundation
import Postgres
import Providers
import PushCrypto
import Testing
@testable import Worker

/// Six `pushizo-worker run` processes on one database against the emulators: one APNs provider token, one FCM
/// access token and one Huawei access token for the whole fleet, and one replacement each after the provider
/// refuses them.
///
/// The run is seconds, not the two minutes of a fleet's first refresh check: with Apple's and Google's
/// intervals nothing falls due within two minutes (50 minutes; `expires_in` less 5 minutes), so a longer run
/// only repeats the in-memory freshness check on every send. What the fleet must get right (six processes,
/// each with its own connections to the emulator, all asking for the first token at once, then all refused
/// at once) happens in the first second; the refresh ahead of expiry is covered by
/// `SharedProviderTokensTests.aDueTokenIsReplacedOnceAheadOfItsExpiry` with real intervals on rows made old.
@Suite("One provider token per credential across worker processes", .serialized)
struct ProviderTokenFleetTests {
    /// A `pushizo-worker run` child process logging to a file.
    final class WorkerProcess: @unchecked Sendable {
        let process: Process
        let logPath: String

        init(index: Int, url: String, emulator: EmulatorHarness, directory: String) throws {
            logPath = "\(directory)/worker-\(index).log"
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
            process.arguments = ["run", "--concurrency", "4", "--claim-batch", "2", "--poll-interval", "0.05"]
            process.environment = [
                "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "info",
                "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true", "PUSHIZO_WORKER_ID": "fleet-\(index)",
                "PUSHIZO_RETRY_BASE": "0.05", "PUSHIZO_RETRY_MAX": "1",
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            ]
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
            process.standardError = log
            process.standardOutput = log
            try process.run()
            self.process = process
        }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        /// Deliveries it claimed, from its `worker stopped` line.
        var claimed: Int? {
            guard let line = log.split(separator: "\n").first(where: { $0.contains("worker stopped") }),
                  let field = line.split(separator: " ").first(where: { $0.hasPrefix("claimed=") })
            else { return nil }
            return Int(field.dropFirst("claimed=".count))
        }
    }

    /// Starts `count` workers and waits (hang guard 30 s) until each has reached the database; runs `body`;
    /// stops them with SIGTERM and checks they exit 0.
    static func withFleet(
        _ count: Int, url: String, emulator: EmulatorHarness, _ body: @Sendable ([WorkerProcess]) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-fleet-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let workers = try (0..<count).map { try WorkerProcess(index: $0, url: url, emulator: emulator, directory: directory) }
        defer { for worker in workers where worker.process.isRunning { worker.process.terminate() } }
        let deadline = ContinuousClock.now + .seconds(30)
        while workers.contains(where: { !$0.log.contains("database reached") }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        try await body(workers)
        for worker in workers { worker.process.terminate() }
        for worker in workers {
            try await onThread { worker.process.waitUntilExit() }
            #expect(worker.process.terminationStatus == 0, "\(worker.log)")
            // Each process took part: a worker that sent nothing would prove nothing about sharing.
            #expect((worker.claimed ?? 0) > 0, "\(worker.log)")
        }
    }

    /// Seeds `apns` APNs and `fcm` FCM subscriptions of two apps (the emulator's key and service account)
    /// and one notification to each app's subscriptions.
    static func seedWave(_ url: String, _ emulator: EmulatorHarness, wave: String, apns: Int, fcm: Int) async throws {
        try await onThread {
            let apple = try Seed(url)
            try apple.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
            let google = try Seed(url)
            try google.app()
            try google.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
            _ = try apple.connection.query(
                """
                INSERT INTO subscriptions (app_id, platform, token, apns_environment)
                SELECT $1, 'ios', 'a0' || md5($2::text || n) || substr(md5('y' || $2::text || n), 1, 30), 'production'
                FROM generate_series(1, $3) n
                """, [apple.appID, wave, apns])
            _ = try google.connection.query(
                "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'android', 'fcm-' || $2::text || '-' || n FROM generate_series(1, $3) n",
                [google.appID, wave, fcm])
            for seed in [apple, google] {
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "fleet"}}', jsonb_build_object('include_subscription_ids', jsonb_agg(id))
                    FROM subscriptions WHERE app_id = $1
                    """, [seed.appID])
            }
        }
    }

    /// Waits (hang guard `timeout`) until `count` subscriptions' deliveries ended (sent or failed).
    static func waitForFinalEvents(_ database: PostgresClient, _ count: Int, timeout: Duration = .seconds(60))
        async throws
    {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let rows = try await database.query(
                "SELECT count(DISTINCT subscription_id) AS n FROM delivery_events WHERE event IN ('sent', 'failed')")
            if try rows[0].decode(Int.self, "n") >= count { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("timed out waiting for \(count) final events")
    }

    /// Subscriptions with a `sent` event, and `failed` events. (On a loaded machine a send may pass its
    /// deadline and go out again: delivery is at least once, so `sent` is counted per subscription.)
    static func outcomes(_ database: PostgresClient) async throws -> (sent: Int, failed: Int) {
        let rows = try await database.query(
            """
            SELECT count(DISTINCT subscription_id) FILTER (WHERE event = 'sent') AS sent,
                   count(*) FILTER (WHERE event = 'failed') AS failed
            FROM delivery_events
            """)
        return (try rows[0].decode(Int.self, "sent"), try rows[0].decode(Int.self, "failed"))
    }

    static func generations(_ database: PostgresClient) async throws -> [String: Int64] {
        let rows = try await database.query("SELECT kind, generation FROM provider_tokens ORDER BY kind")
        return try Dictionary(uniqueKeysWithValues: rows.map { ($0["kind"] ?? "", try $0.decode(Int64.self, "generation")) })
    }

    @Test func sixWorkersMintOneAPNsTokenAndOneFCMAccessToken() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0.02) { emulator in
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await Self.withFleet(6, url: url, emulator: emulator) { workers in
                    for wave in ["one", "two", "three"] {
                        try await Self.seedWave(url, emulator, wave: wave, apns: 40, fcm: 40)
                    }
                    try await Self.waitForFinalEvents(database, 240)
                }
                let outcomes = try await Self.outcomes(database)
                #expect(outcomes.sent == 240 && outcomes.failed == 0, "\(outcomes)")
                #expect(emulator.apns.acceptedCount >= 120)
                #expect(emulator.fcm.acceptedCount >= 120)
                // The emulator saw one provider token and issued one access token, for six processes.
                #expect(emulator.apns.distinctProviderTokens(keyID: EmulatorHarness.keyID) == 1)
                #expect(emulator.fcm.tokensIssued(to: EmulatorHarness.fcmClientEmail) == 1)
                #expect(try await Self.generations(database) == ["apns": 1, "fcm": 1])
                await database.shutdown()
            }
        }
    }

    @Test func aForcedExpiryCausesOneNewTokenFleetWide() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0.02) { emulator in
                // The fleet's APNs token was made 30 minutes ago (past Apple's 20-minute floor, so a refusal
                // may replace it at once; a younger one would be kept).
                let credential = try ProviderTokenCredential(apns: APNsCredentials(
                    teamID: EmulatorHarness.teamID, keyID: EmulatorHarness.keyID, privateKey: emulator.signingKey,
                    topic: "dev.pushizo.test"))
                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    _ = try ProviderTokenStore.coordinate(
                        on: connection, credential: credential, policy: .apns(), rejected: nil, offered: nil, lockTimeout: .seconds(5),
                        now: Date.init
                    ) {
                        let signed = try APNsTokenManager.sign(
                            teamID: EmulatorHarness.teamID, keyID: EmulatorHarness.keyID, privateKey: emulator.signingKey,
                            issuedAt: Date().addingTimeInterval(-1800))
                        return MintedProviderToken(token: signed.token, issuedAt: signed.issuedAt, expiresAt: signed.expiresAt)
                    }
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await Self.withFleet(6, url: url, emulator: emulator) { workers in
                    try await Self.seedWave(url, emulator, wave: "before", apns: 30, fcm: 30)
                    try await Self.waitForFinalEvents(database, 60)
                    // Adopted, not minted: the row's token is the one the emulator saw.
                    #expect(emulator.apns.distinctProviderTokens(keyID: EmulatorHarness.keyID) == 1)
                    #expect(emulator.fcm.tokensIssued(to: EmulatorHarness.fcmClientEmail) == 1)

                    emulator.apns.expireProviderTokens()
                    emulator.fcm.revokeAllTokens()
                    try await Self.seedWave(url, emulator, wave: "after", apns: 90, fcm: 90)
                    try await Self.waitForFinalEvents(database, 240)
                }
                // Every push refused with the old token was sent again once with the new one.
                let outcomes = try await Self.outcomes(database)
                #expect(outcomes.sent == 240 && outcomes.failed == 0, "\(outcomes)")
                #expect((emulator.apns.statusCounts[403] ?? 0) >= 1)
                #expect((emulator.fcm.errorCounts["UNAUTHENTICATED"] ?? 0) >= 1)
                // Six workers saw the refusals; the fleet made one new token of each.
                #expect(emulator.apns.distinctProviderTokens(keyID: EmulatorHarness.keyID) == 2)
                #expect(emulator.fcm.tokensIssued(to: EmulatorHarness.fcmClientEmail) == 2)
                #expect(try await Self.generations(database) == ["apns": 2, "fcm": 2])
                await database.shutdown()
            }
        }
    }

    /// Seeds `count` Huawei subscriptions of a new app (the emulator's client credentials) and one notification to
    /// them.
    static func seedHuaweiWave(_ url: String, _ emulator: EmulatorHarness, wave: String, count: Int) async throws {
        try await onThread {
            let seed = try Seed(url)
            try seed.app()
            try seed.huaweiChannel(settings: emulator.huaweiChannelSettings(), endpoint: emulator.endpoint)
            _ = try seed.connection.query(
                "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'huawei', 'IQAAAACy-' || $2::text || '-' || n FROM generate_series(1, $3) n",
                [seed.appID, wave, count])
            _ = try seed.connection.query(
                """
                INSERT INTO notifications (app_id, message, target)
                SELECT $1, '{"contents": {"en": "fleet"}}', jsonb_build_object('include_subscription_ids', jsonb_agg(id))
                FROM subscriptions WHERE app_id = $1
                """, [seed.appID])
        }
    }

    /// A Huawei push with its token refreshed once for a fleet of several workers: six processes mint one access
    /// token for the client (shared through `provider_tokens`), and after Push Kit refuses it (`80200003`, the
    /// emulator forgetting every token) the fleet mints exactly one more and sends every refused push again.
    @Test func sixWorkersShareOneHuaweiAccessTokenRefreshedOnce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 0.02) { emulator in
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await Self.withFleet(6, url: url, emulator: emulator) { workers in
                    try await Self.seedHuaweiWave(url, emulator, wave: "before", count: 60)
                    try await Self.waitForFinalEvents(database, 60)
                    #expect(emulator.huawei.tokensIssued(to: EmulatorHarness.huaweiAppID) == 1)
                    #expect(try await Self.generations(database) == ["huawei": 1])

                    emulator.huawei.revokeAllTokens()
                    try await Self.seedHuaweiWave(url, emulator, wave: "after", count: 120)
                    try await Self.waitForFinalEvents(database, 180)
                }
                let outcomes = try await Self.outcomes(database)
                #expect(outcomes.sent == 180 && outcomes.failed == 0, "\(outcomes)")
                #expect(emulator.huawei.acceptedCount >= 180)
                #expect((emulator.huawei.errorCounts["80200003"] ?? 0) >= 1)
                // Six workers saw the refusals; the fleet made one new token.
                #expect(emulator.huawei.tokensIssued(to: EmulatorHarness.huaweiAppID) == 2)
                #expect(try await Self.generations(database) == ["huawei": 2])
                // The refused pushes cost no event: each was sent again with the new token.
                let refusedEvents = try await database.query(
                    "SELECT count(*) AS n FROM delivery_events WHERE reason IN ('oauth_token_expired', 'unauthenticated')")
                #expect(refusedEvents[0]["n"] == "0")
                await database.shutdown()
            }
        }
    }

    /// A row left by the previous key of the same team and key id, and the previous key's token copied under
    /// the current key's fingerprint: neither is sent; the worker mints with the current key.
    @Test func aTokenOfAnotherKeyUnderTheSameKeyIDIsNotAdopted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let previousKey = try P256PrivateKey.generate()
                func credential(_ key: P256PrivateKey) throws -> ProviderTokenCredential {
                    try ProviderTokenCredential(apns: APNsCredentials(
                        teamID: EmulatorHarness.teamID, keyID: EmulatorHarness.keyID, privateKey: key, topic: "dev.pushizo.test"))
                }
                let previous = try credential(previousKey)
                let current = try credential(emulator.signingKey)
                #expect(previous.fingerprint != current.fingerprint)
                let previousToken = try APNsTokenManager.sign(
                    teamID: EmulatorHarness.teamID, keyID: EmulatorHarness.keyID, privateKey: previousKey, issuedAt: Date()).token
                try await onThread {
                    let seed = try Seed(url)
                    for (fingerprint, generation) in [(previous.fingerprint, 1), (current.fingerprint, 4)] {
                        _ = try seed.connection.query(
                            """
                            INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                            VALUES ($1, 'apns', $2, $3, now(), now() + interval '1 hour')
                            """, [fingerprint, try previous.seal(previousToken), generation])
                    }
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    for _ in 0..<5 { try seed.subscription() }
                    try seed.notification(target: #"{"all": true}"#)
                }
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                #expect(emulator.apns.acceptedCount == 5)
                #expect(emulator.apns.statusCounts[403] == nil)
                #expect(emulator.apns.distinctProviderTokens(keyID: EmulatorHarness.keyID) == 1)
                let rows = try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    return try connection.query("SELECT fingerprint, generation FROM provider_tokens").map {
                        ($0["fingerprint"] ?? "", try $0.decode(Int64.self, "generation"))
                    }
                }
                // The previous key's row is left alone; the current key's row was replaced (4 -> 5).
                #expect(Dictionary(uniqueKeysWithValues: rows) == [previous.fingerprint: 1, current.fingerprint: 5])
            }
        }
    }
}
