import Foundation
import Postgres
import Providers
import PushCrypto
import Synchronization
import Testing
@testable import Worker

/// ``SharedProviderTokens`` against the real PostgreSQL: several instances, each with its own connection pool,
/// stand for several workers sharing one database.
@Suite("Provider tokens shared through the database", .serialized)
struct SharedProviderTokensTests {
    /// Counts mints and makes distinct tokens, as a provider would.
    final class Minter: Sendable {
        private let minted = Mutex(0)
        let age: Double
        init(age: Double = 0) { self.age = age }
        var count: Int { minted.withLock { $0 } }
        func mint() async throws -> MintedProviderToken {
            let index = minted.withLock { count in
                count += 1
                return count
            }
            // A slow provider: the others must wait for this mint, not make their own.
            try await Task.sleep(for: .milliseconds(50))
            let issued = Date().addingTimeInterval(-age)
            return MintedProviderToken(token: "token-\(index)-\(UUID())", issuedAt: issued, expiresAt: issued.addingTimeInterval(3600))
        }
    }

    static func credential(_ key: P256PrivateKey? = nil) throws -> ProviderTokenCredential {
        try ProviderTokenCredential(apns: APNsCredentials(
            teamID: "TEAM123456", keyID: "KEY1234567", privateKey: key ?? (try P256PrivateKey.generate()), topic: "t"))
    }

    /// `count` workers, each with its own pool of 2 connections.
    ///
    /// They wait up to 300 s for another worker's mint: the mint runs on the cooperative pool, which the whole
    /// test process shares, and in a full run on 2 cores it waited over 10 s for a thread; every worker then
    /// fell back to a token of its own (the documented fallback, not the single flight these tests check).
    static func workers(_ url: String, count: Int) -> [(SharedProviderTokens, PostgresClient)] {
        (0..<count).map { _ in
            let database = PostgresClient(connectionString: url, maximumConnections: 2)
            return (SharedProviderTokens(database: database, logger: quietLogger, lockTimeout: .seconds(300)), database)
        }
    }

    static func row(_ url: String, _ credential: ProviderTokenCredential) async throws -> (generation: Int64, token: String?) {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            let (token, generation) = try ProviderTokenStore.read(on: connection, credential)
            return (generation, token?.token)
        }
    }

    /// Every worker asks `times` times at once; the distinct tokens they got.
    static func askTogether(
        _ workers: [(SharedProviderTokens, PostgresClient)], times: Int,
        _ ask: @escaping @Sendable (SharedProviderTokens) async throws -> String
    ) async throws -> Set<String> {
        try await withThrowingTaskGroup(of: String.self) { group in
            for (tokens, _) in workers {
                for _ in 0..<times { group.addTask { try await ask(tokens) } }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
    }

    @Test func manyWorkersAskingAtOnceMintOneToken() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try Self.credential()
            let minter = Minter()
            let workers = Self.workers(url, count: 5)
            let tokens = try await Self.askTogether(workers, times: 10) {
                try await $0.token(for: credential, policy: .apns(), mint: minter.mint)
            }
            #expect(minter.count == 1)
            #expect(tokens.count == 1)
            let row = try await Self.row(url, credential)
            #expect(row.generation == 1)
            #expect(row.token == tokens.first)
            for (_, database) in workers { await database.shutdown() }
        }
    }

    @Test func fiftyRefusalsOfOneTokenAcrossTheFleetReplaceItOnce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try Self.credential()
            // Made 25 minutes ago: past Apple's 20-minute floor, so a refusal may replace it.
            let minter = Minter(age: 1500)
            let workers = Self.workers(url, count: 5)
            let first = try await workers[0].0.token(for: credential, policy: .apns(), mint: minter.mint)
            for (tokens, _) in workers {
                #expect(try await tokens.token(for: credential, policy: .apns(), mint: minter.mint) == first)
            }
            #expect(minter.count == 1)
            let replacements = try await Self.askTogether(workers, times: 10) { tokens in
                tokens.reportRejected(first, for: credential)
                return try await tokens.token(for: credential, policy: .apns(), mint: minter.mint)
            }
            #expect(minter.count == 2)
            #expect(replacements.count == 1)
            #expect(!replacements.contains(first))
            #expect(try await Self.row(url, credential).generation == 2)
            for (_, database) in workers { await database.shutdown() }
        }
    }

    @Test func aRefusedTokenYoungerThan20MinutesIsKept() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try Self.credential()
            let minter = Minter()
            let workers = Self.workers(url, count: 2)
            let first = try await workers[0].0.token(for: credential, policy: .apns(), mint: minter.mint)
            workers[0].0.reportRejected(first, for: credential)
            #expect(try await workers[0].0.token(for: credential, policy: .apns(), mint: minter.mint) == first)
            #expect(try await workers[1].0.token(for: credential, policy: .apns(), mint: minter.mint) == first)
            #expect(minter.count == 1)
            for (_, database) in workers { await database.shutdown() }
        }
    }

    @Test func aDueTokenIsReplacedOnceAheadOfItsExpiry() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try Self.credential()
            // 55 minutes old: due (50) but not expired (60).
            let old = Minter(age: 3300)
            let workers = Self.workers(url, count: 5)
            let first = try await workers[0].0.token(for: credential, policy: .apns(), mint: old.mint)
            let minter = Minter()
            let tokens = try await Self.askTogether(workers, times: 5) {
                try await $0.token(for: credential, policy: .apns(), mint: minter.mint)
            }
            #expect(minter.count == 1)
            #expect(tokens.count == 1)
            #expect(!tokens.contains(first))
            #expect(try await Self.row(url, credential).generation == 2)
            for (_, database) in workers { await database.shutdown() }
        }
    }

    @Test func aRowSealedForAnotherKeyUnderTheSameKeyIDIsNotAdopted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let old = try Self.credential()
            let current = try Self.credential()
            // The old key's token copied under the current key's fingerprint (or left by a tool that did so).
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                _ = try connection.query(
                    """
                    INSERT INTO provider_tokens (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                    VALUES ($1, 'apns', $2, 7, now(), now() + interval '1 hour')
                    """, [current.fingerprint, try old.seal("old-key-token")])
            }
            let minter = Minter()
            let (tokens, database) = Self.workers(url, count: 1)[0]
            let token = try await tokens.token(for: current, policy: .apns(), mint: minter.mint)
            #expect(token != "old-key-token")
            #expect(minter.count == 1)
            let row = try await Self.row(url, current)
            #expect(row.generation == 8)
            #expect(row.token == token)
            await database.shutdown()
        }
    }

    @Test func withoutTheDatabaseAWorkerMintsItsOwnTokenOnceAndKeepsSending() async throws {
        // Nothing listens on this port: every database call fails to connect.
        let database = PostgresClient(
            connectionString: "host=127.0.0.1 port=1 dbname=none connect_timeout=2", maximumConnections: 1)
        let tokens = SharedProviderTokens(database: database, logger: quietLogger, localRetry: .seconds(3600))
        let credential = try Self.credential()
        let minter = Minter()
        let first = try await tokens.token(for: credential, policy: .apns(), mint: minter.mint)
        for _ in 0..<5 {
            #expect(try await tokens.token(for: credential, policy: .apns(), mint: minter.mint) == first)
        }
        #expect(minter.count == 1)
        await database.shutdown()
    }

    @Test func aFailedMintKeepsTheUnexpiredTokenAndTriesAgainNextTime() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try Self.credential()
            let (tokens, database) = Self.workers(url, count: 1)[0]
            // 55 minutes old: due, still accepted.
            let first = try await tokens.token(for: credential, policy: .apns(), mint: Minter(age: 3300).mint)
            struct Refused: Error {}
            let again = try await tokens.token(for: credential, policy: .apns()) { throw Refused() }
            #expect(again == first)
            let minter = Minter()
            let next = try await tokens.token(for: credential, policy: .apns(), mint: minter.mint)
            #expect(next != first)
            #expect(minter.count == 1)
            await database.shutdown()
        }
    }
}
