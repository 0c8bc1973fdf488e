import Emulator
import Foundation
import Postgres
import PushCrypto
import Testing
@testable import Worker

/// Faults a fleet meets: tenants sharing key ids, a provider that is down, rows that kill workers, documents
/// too large to ship.
@Suite("Faults end to end", .serialized)
struct FaultTests {
    @Test func tenantsNamingTheSameKeyIDsNeverShareTokens() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                // Tenant B names the emulator's team and key ids but holds another private key.
                let wrongKey = try P256PrivateKey.generate()
                let ids = try await onThread {
                    let good = try Seed(url)
                    try good.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let goodSubscription = try good.subscription()
                    let bad = try Seed(url)
                    let badSettings = emulator.channelSettings.replacingOccurrences(
                        of: try JSONValueEscaped(emulator.signingKey.pkcs8PEM), with: try JSONValueEscaped(wrongKey.pkcs8PEM))
                    try bad.app(channelSettings: badSettings, endpoint: emulator.endpoint)
                    let badSubscription = try bad.subscription()
                    // B's notification first, so a shared token would be minted from B's key.
                    try bad.notification(target: #"{"include_subscription_ids": ["\#(badSubscription)"]}"#)
                    try good.notification(target: #"{"include_subscription_ids": ["\#(goodSubscription)"]}"#)
                    return (goodSubscription, badSubscription, bad.appID)
                }
                let (goodSubscription, badSubscription, badApp) = ids
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                try await runUntil(runtime, "both deliveries have an outcome") {
                    let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "2"
                }
                let events = try await database.query("SELECT subscription_id, event, reason FROM delivery_events")
                for row in events {
                    let subscription = try row.decode(UUID.self, "subscription_id")
                    if subscription == goodSubscription { #expect(row["event"] == "sent") }
                    if subscription == badSubscription {
                        #expect(row["event"] == "retrying")
                        #expect(row["reason"] == "invalid_provider_token")
                    }
                }
                let channels = try await database.query("SELECT app_id, paused_until IS NOT NULL AS paused FROM app_channels")
                for row in channels {
                    #expect(row["paused"] == (try row.decode(UUID.self, "app_id") == badApp ? "t" : "f"))
                }
                await database.shutdown()
            }
        }
    }

    @Test func anUnreachableProviderCostsNoAttempts() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let subscription = try await onThread { try Seed.deliveryToAnUnreachableProvider(url, emulator: emulator) }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_MAX_ATTEMPTS": "2"]),
                    logger: quietLogger)
                try await runUntil(runtime, "four retries were recorded") {
                    let rows = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'retrying'")
                    return try rows[0].decode(Int.self, "n") >= 4
                }
                let events = try await database.query(
                    "SELECT event, reason, attempt FROM delivery_events WHERE subscription_id = $1", [subscription])
                #expect(events.allSatisfy { $0["event"] == "retrying" && $0["reason"] == "provider_unreachable" })
                #expect(events.allSatisfy { $0["attempt"] == "0" })
                let queued = try await database.query("SELECT attempt FROM deliveries")
                #expect(queued.count == 1)
                await database.shutdown()
            }
        }
    }

    @Test func abandonedAndOversizedDeliveriesFailWithoutStoppingOthers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let ids = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let poisoned = try seed.subscription()
                    let other = try seed.subscription()
                    let poison = try seed.notification(
                        message: #"{"contents": {"en": "crashes workers"}}"#,
                        target: #"{"include_subscription_ids": ["\#(poisoned)"]}"#)
                    _ = try ExpansionStore.expandNext(on: seed.connection)
                    // As if ten workers had died holding it: claimed ten times, never completed.
                    _ = try seed.connection.query("UPDATE deliveries SET attempt = 10 WHERE notification_id = $1", [poison])
                    let blob = String(repeating: "z", count: 300_000)
                    let huge = try seed.notification(
                        message: #"{"contents": {"en": "big"}, "data": {"blob": "\#(blob)"}}"#,
                        target: #"{"include_subscription_ids": ["\#(other)"]}"#)
                    let fine = try seed.notification(target: #"{"include_subscription_ids": ["\#(other)", "\#(poisoned)"]}"#)
                    return (poison, huge, fine)
                }
                let (poison, huge, fine) = ids
                try await runUntilDrained(
                    try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger))
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let rows = try await database.query(
                    "SELECT notification_id, event, reason, detail::text AS detail FROM delivery_events ORDER BY id")
                func outcomes(_ notification: UUID) throws -> [String] {
                    try rows.filter { try $0.decode(UUID.self, "notification_id") == notification }
                        .map { "\($0["event"] ?? "")/\($0["reason"] ?? "")" }
                }
                #expect(try outcomes(poison) == ["failed/max_attempts"])
                #expect(try outcomes(huge) == ["failed/payload_too_large"])
                #expect(try outcomes(fine) == ["sent/", "sent/"])
                let hugeDetail = try #require(try rows.first { try $0.decode(UUID.self, "notification_id") == huge }?["detail"])
                #expect(hugeDetail.contains("message_bytes"))
                await database.shutdown()
            }
        }
    }
}

/// `text` as it appears inside a JSON string (JSONSerialization escapes `/` and newlines).
func JSONValueEscaped(_ text: String) throws -> String {
    let data = try JSONSerialization.data(withJSONObject: [text], options: [.sortedKeys])
    let array = String(decoding: data, as: UTF8.self)
    return String(array.dropFirst(2).dropLast(2))
}
