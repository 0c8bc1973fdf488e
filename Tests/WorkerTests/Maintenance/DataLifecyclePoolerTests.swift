import Foundation
import Postgres
import Testing
@testable import Worker

/// The maintenance behind a transaction-mode pooler (``PostgresPoolerMode/transaction``): its lock lives only as
/// long as each transaction that does work.
@Suite("Data lifecycle behind a transaction-mode pooler")
struct DataLifecyclePoolerTests {
    static let settings = MaintenanceSettings(eventRetention: .seconds(30 * 86_400), notificationRetention: .seconds(90 * 86_400))

    static func advisoryLocks(_ connection: PostgresConnection) throws -> Int {
        try connection.query(
            """
            SELECT count(*) AS n FROM pg_locks
            WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)[0].decode(Int.self, "n")
    }

    @Test func aRunLeavesNoLockAndTheScheduleSkipsWhileAnotherRunsATransaction() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let pooled = try PostgresConnection(connectionString: url, poolerMode: .transaction)
                defer { pooled.close() }
                _ = try pooled.query(
                    """
                    INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                    VALUES ('expired', 'apns', '\\x00', 1, now() - interval '3 days', now() - interval '2 days')
                    """)
                let report = try #require(try DataLifecycle.maintain(on: pooled, settings: Self.settings, waitForLock: false))
                #expect(report.problems.isEmpty)
                #expect(report.prunedProviderTokens == 1)
                #expect(try Self.advisoryLocks(pooled) == 0)

                // Another worker's maintenance transaction in progress: the schedule's try skips the round.
                let other = try PostgresConnection(connectionString: url, poolerMode: .transaction)
                defer { other.close() }
                try other.execute("BEGIN")
                _ = try other.query("SELECT pg_advisory_xact_lock($1)", [DataLifecycle.advisoryLockKey])
                #expect(try DataLifecycle.maintain(on: pooled, settings: Self.settings, waitForLock: false) == nil)
                try other.execute("COMMIT")
                #expect(try DataLifecycle.maintain(on: pooled, settings: Self.settings, waitForLock: false) != nil)
                #expect(try Self.advisoryLocks(pooled) == 0)
            }
        }
    }
}
