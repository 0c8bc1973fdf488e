import DeliveryCore
import Emulator
import Foundation
import HTTP2
import Postgres
import Providers
import PushCrypto
import Synchronization
import Testing
@testable import Worker

/// ``ClaimedBatchPrefetch``: the claim loads a batch's messages and the fleet's current provider tokens on its own
/// connection, so the delivery stage finds them in memory and reads nothing itself; tokens are only adopted
/// there, never minted, and never one the provider refused.
@Suite("What a claimed batch needs, loaded by the claim", .serialized)
struct ClaimedBatchPrefetchTests {
    struct NoConnection: Error {}

    @Test func aClaimedBatchsMessagesAreReadOnceOnTheClaimsConnectionAndTheDeliveryStageReadsNone() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let deliveryStageReads = Mutex(0)
            let cache = MessageCache(load: { _ in
                deliveryStageReads.withLock { $0 += 1 }
                throw NoConnection()
            })
            let claimed = try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                for _ in 0..<3 { _ = try seed.subscription() }
                _ = try seed.notification(message: #"{"contents": {"en": "one"}}"#, target: #"{"all": true}"#)
                _ = try seed.notification(message: #"{"contents": {"en": "two"}}"#, target: #"{"all": true}"#)
                while try ExpansionStore.expandNext(on: seed.connection) != nil {}
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "A")
                ClaimedBatchPrefetch(messages: cache).load(claimed, on: seed.connection)
                return claimed
            }
            #expect(claimed.count == 6)
            for delivery in claimed {
                guard case .success = await cache.message(for: delivery.notificationID, version: delivery.messageVersion) else {
                    Issue.record("the message of \(delivery.notificationID) was not loaded by the claim")
                    continue
                }
            }
            #expect(deliveryStageReads.withLock { $0 } == 0)
        }
    }

    /// A worker's send stage as the runtime wires it (APNs and FCM senders sharing one ``SharedProviderTokens``),
    /// whose asks of the database for a token (the reader that adopts or mints under the credential's lock)
    /// are counted and then carried out.
    final class TestWorker: Sendable {
        let tokens: SharedProviderTokens
        let apns: APNsSender
        let fcm: FCMSender
        let pipeline: DeliveryPipeline
        let database: PostgresClient
        private let asks = Counter()

        var tokenAsks: Int { asks.value }

        init(url: String, client: HTTP2Client) {
            let database = PostgresClient(connectionString: url, maximumConnections: 2)
            let coordinator = SharedProviderTokens.coordinator(database: database)
            let tokens = SharedProviderTokens(coordinate: { [asks] coordination, mint in
                asks.increment()
                return try await coordinator(coordination, mint)
            }, logger: quietLogger, lockTimeout: .seconds(300))
            self.tokens = tokens
            self.database = database
            apns = APNsSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted,
                bounds: .standard, tokens: tokens)
            fcm = FCMSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted,
                bounds: .standard, tokens: tokens)
            pipeline = DeliveryPipeline(
                senders: [apns, fcm],
                maxAttempts: 3, retryPolicy: RetryPolicy(baseDelay: .seconds(1), maximumDelay: .seconds(10)),
                logger: quietLogger,
                loadMessages: { ids in
                    try await database.withConnection { connection in
                        try MessageStore.messages(
                            on: connection, notificationIDs: ids, maximumBytes: MessageCache.maximumMessageBytes)
                    }
                },
                reserveFrequencyCap: { _ in throw NoConnection() })
        }

        /// Builds the channels of `batch`'s apps into the senders' caches, as a worker that has sent for those
        /// apps before holds them: the claim names the tokens of cached channels only.
        func knowChannels(of batch: [ClaimedDelivery]) {
            for delivery in batch {
                if delivery.platform == "ios" { _ = try? apns.channel(for: delivery) } else { _ = try? fcm.channel(for: delivery) }
            }
        }

        /// What the claim loop loads beside a batch.
        var prefetch: ClaimedBatchPrefetch {
            ClaimedBatchPrefetch(
                messages: pipeline.messages, tokens: tokens, tokenKeys: { [pipeline] in pipeline.sharedTokenKeys(of: $0) })
        }

        /// Claims one notification's deliveries on `url` with ``prefetch``, as the claim loop does.
        func claim(_ url: String, notification: UUID) async throws -> [ClaimedDelivery] {
            let prefetch = self.prefetch
            return try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                let claimed = try ClaimStore.claim(
                    on: connection, limit: 100, lease: .seconds(60), workerID: "A", room: .unbounded,
                    notifications: [notification])
                prefetch.load(claimed, on: connection)
                return claimed
            }
        }

        /// Sends `batch` through the pipeline. - Returns: the outcomes' events.
        func send(_ batch: [ClaimedDelivery]) async -> [String] {
            let events = Mutex<[String]>([])
            await pipeline.process(batch: batch) { _, completion in
                events.withLock { $0.append(completion.event.rawValue + (completion.reason.map { "/\($0)" } ?? "")) }
            }
            return events.withLock { $0 }
        }
    }

    /// An app with an APNs token-based channel and an FCM channel at the emulator, two devices on each, and two
    /// notifications to all of them, expanded. - Returns: the notifications.
    static func seedApp(_ url: String, _ emulator: EmulatorHarness) async throws -> (first: UUID, second: UUID) {
        try await onThread {
            let seed = try Seed(url)
            defer { seed.connection.close() }
            try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
            try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
            for _ in 0..<2 { _ = try seed.subscription() }
            for index in 0..<2 { _ = try seed.subscription(platform: "android", token: "fcm-okay-\(index)") }
            let first = try seed.notification(target: #"{"all": true}"#)
            let second = try seed.notification(target: #"{"all": true}"#)
            while try ExpansionStore.expandNext(on: seed.connection) != nil {}
            return (first, second)
        }
    }

    static func rowGenerations(_ url: String) async throws -> [String: Int64] {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            var generations: [String: Int64] = [:]
            for row in try connection.query("SELECT kind, generation FROM provider_tokens") {
                generations[try row.decode(String.self, "kind")] = try row.decode(Int64.self, "generation")
            }
            return generations
        }
    }

    @Test func aTokenRowAnotherWorkerWroteIsAdoptedByTheClaimAndTheSendStageAsksForNone() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await CacheBoundsTests.withEmulatorClient { emulator, client in
                let notifications = try await Self.seedApp(url, emulator)
                // Another worker sends the first notification: it mints both tokens and writes their rows.
                let other = TestWorker(url: url, client: client)
                let first = try await other.claim(url, notification: notifications.first)
                #expect(await other.send(first) == Array(repeating: "sent", count: 4))
                #expect(other.tokenAsks == 2)
                #expect(try await Self.rowGenerations(url) == ["apns": 1, "fcm": 1])

                let worker = TestWorker(url: url, client: client)
                worker.knowChannels(of: first)
                let second = try await worker.claim(url, notification: notifications.second)
                #expect(worker.tokens.count == 2, "both rows adopted by the claim's read")
                #expect(await worker.send(second) == Array(repeating: "sent", count: 4))
                #expect(worker.tokenAsks == 0, "the send stage neither read nor minted a token")
                // The fleet sent with one token per credential.
                #expect(emulator.apns.distinctProviderTokens(keyID: EmulatorHarness.keyID) == 1)
                #expect(emulator.fcm.tokensIssued(to: EmulatorHarness.fcmClientEmail) == 1)
                #expect(try await Self.rowGenerations(url) == ["apns": 1, "fcm": 1])
                await other.database.shutdown()
                await worker.database.shutdown()
            }
        }
    }

    /// The claim serves every app from one thread: it names the tokens of channels the senders hold already and
    /// never parses an app's credentials itself (the send stage does, once, on the pool).
    @Test func theClaimNamesTokensOfCachedChannelsOnlyAndParsesNoCredentials() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await CacheBoundsTests.withEmulatorClient { emulator, client in
                let notifications = try await Self.seedApp(url, emulator)
                let worker = TestWorker(url: url, client: client)
                let batch = try await worker.claim(url, notification: notifications.first)
                #expect(batch.count == 4)
                #expect(worker.pipeline.sharedTokenKeys(of: batch).isEmpty, "no channel was built to name a key")
                worker.knowChannels(of: batch)
                #expect(worker.pipeline.sharedTokenKeys(of: batch).count == 2)
                await worker.database.shutdown()
            }
        }
    }

    @Test func withoutARowTheClaimMintsNothingAndTheSendStageMintsAsBefore() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await CacheBoundsTests.withEmulatorClient { emulator, client in
                let notifications = try await Self.seedApp(url, emulator)
                let worker = TestWorker(url: url, client: client)
                let batch = try await worker.claim(url, notification: notifications.first)
                #expect(worker.tokens.count == 0)
                #expect(try await Self.rowGenerations(url) == [:], "the claim wrote no row")
                #expect(emulator.fcm.tokensIssued(to: EmulatorHarness.fcmClientEmail) == 0, "the claim minted nothing")
                #expect(await worker.send(batch) == Array(repeating: "sent", count: 4))
                #expect(worker.tokenAsks == 2, "one ask per credential, which minted and shared it")
                #expect(try await Self.rowGenerations(url) == ["apns": 1, "fcm": 1])
                await worker.database.shutdown()
            }
        }
    }

    @Test func aRefusedTokenIsNotRevivedByAReadOfTheSameOrAnOlderRow() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let credential = try SharedProviderTokensTests.credential()
            let key = ProviderTokenKey(credential: credential, policy: .apns())
            // Made 25 minutes ago: past Apple's 20-minute floor, so a refusal replaces them.
            let minter = SharedProviderTokensTests.Minter(age: 1500)
            let (other, otherDatabase) = SharedProviderTokensTests.workers(url, count: 1)[0]
            let first = try await other.token(for: credential, policy: .apns(), mint: minter.mint)
            let database = PostgresClient(connectionString: url, maximumConnections: 2)
            let asks = Counter()
            let databaseAway = Mutex(false)
            let coordinator = SharedProviderTokens.coordinator(database: database)
            // A local token is offered to the database at its next use (no wait), so the claim reads its row again.
            let tokens = SharedProviderTokens(coordinate: { coordination, mint in
                asks.increment()
                if databaseAway.withLock({ $0 }) { throw NoConnection() }
                return try await coordinator(coordination, mint)
            }, logger: quietLogger, lockTimeout: .seconds(300), localRetry: .zero)
            let reads = Counter()
            /// The claim's read of the rows, counted; `stale` stands for a read that began before a replacement.
            @Sendable func claimsRead(stale: SharedProviderToken? = nil) async throws {
                try await onThread {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    tokens.prefetch([key]) { credentials in
                        reads.increment()
                        if let stale { return [credential.fingerprint: stale] }
                        return try ProviderTokenStore.current(on: connection, credentials)
                    }
                }
            }
            func send() async throws -> String { try await tokens.token(for: credential, policy: .apns(), mint: minter.mint) }

            try await claimsRead()
            #expect(try await send() == first)
            #expect(asks.value == 0, "adopted from the claim's read")
            try await claimsRead()
            #expect(reads.value == 1, "nothing read while the token in memory is fresh")
            let firstRow = try #require(try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                return try ProviderTokenStore.read(on: connection, credential).0
            })

            // Refused while the database is away: a token of this worker alone replaces it. The claim then reads
            // the row, still the refused token: it is not taken back; the send offers its own token to the fleet.
            tokens.reportRejected(first, for: credential)
            databaseAway.withLock { $0 = true }
            let local = try await send()
            #expect(local != first)
            databaseAway.withLock { $0 = false }
            try await claimsRead()
            #expect(reads.value == 2)
            let second = try await send()
            #expect(second == local)
            #expect(asks.value == 2)
            #expect(try await SharedProviderTokensTests.row(url, credential).token == local)

            // The shared replacement refused too, and a read that began before it still finds the first row: not
            // taken either (older); the send replaces the refused token under the lock.
            tokens.reportRejected(second, for: credential)
            try await claimsRead(stale: firstRow)
            #expect(reads.value == 3)
            let third = try await send()
            #expect(third != first && third != second)
            #expect(asks.value == 3)
            #expect(minter.count == 3)
            #expect(try await SharedProviderTokensTests.row(url, credential).generation == 3)
            await database.shutdown()
            await otherDatabase.shutdown()
        }
    }
}
