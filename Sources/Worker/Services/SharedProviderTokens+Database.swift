import Foundation
import Postgres
import Providers
import Synchronization

/// The fleet's tokens through PostgreSQL: the narrow closure ``SharedProviderTokens`` asks when a credential's
/// token is due, carried out by ``ProviderTokenStore`` on a pooled connection.
extension SharedProviderTokens {
    /// Tokens shared through `database`'s `provider_tokens` (``coordinator(database:)``); nil keeps every token
    /// in this process. See ``init(coordinate:logger:capacity:lockTimeout:localRetry:now:metrics:)``.
    convenience init(
        database: PostgresClient?, logger: Logger, capacity: Int = 4096, lockTimeout: Duration = .seconds(35), localRetry: Duration = .seconds(30),
        now: @escaping @Sendable () -> Date = Date.init, metrics: WorkerMetrics? = nil
    ) {
        self.init(
            coordinate: database.map(Self.coordinator(database:)), logger: logger, capacity: capacity,
            lockTimeout: lockTimeout, localRetry: localRetry, now: now, metrics: metrics)
    }

    /// The fleet's token coordination: each refresh on a pooled connection of `database`
    /// (``ProviderTokenStore/coordinate(on:credential:policy:rejected:offered:lockTimeout:now:mint:)``).
    static func coordinator(database: PostgresClient) -> Coordinate {
        { coordination, mint in
            try await database.withConnection { connection in
                try ProviderTokenStore.coordinate(
                    on: connection, credential: coordination.credential, policy: coordination.policy,
                    rejected: coordination.rejected, offered: coordination.offered,
                    lockTimeout: coordination.lockTimeout, now: coordination.now, mint: { try waitFor(mint) })
            }
        }
    }

    /// Runs `body` and waits for it on the calling thread: only called on a database connection's own thread
    /// (never on Swift's cooperative pool), which holds the credential's lock while a mint runs, so the mint
    /// (an FCM token request over HTTP/2) happens once for the fleet.
    private static func waitFor(_ body: @escaping Mint) throws -> MintedProviderToken {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<Result<MintedProviderToken, any Error>?>(nil)
        Task {
            let outcome: Result<MintedProviderToken, any Error>
            do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }
}
