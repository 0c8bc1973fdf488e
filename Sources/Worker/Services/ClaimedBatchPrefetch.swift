import Foundation
import Postgres

/// What a claimed batch needs before its sends, read by the claim on its own connection and thread, in the
/// claim's hand-off to the pool (a hand-off of its own would cost two more thread wake-ups per claim):
/// - the messages its deliveries use that are not cached at their claimed version, in one round trip
///   (``MessageStore/messages(on:notificationIDs:maximumBytes:)`` into ``MessageCache``);
/// - the fleet's current provider tokens its requests will carry (as the senders name them,
///   ``DeliveryPipeline/sharedTokenKeys(of:)``) that are not ready in memory, in one round trip and without a
///   lock (``ProviderTokenStore/current(on:_:)`` into ``SharedProviderTokens/prefetch(_:reading:)``): tokens
///   other workers made are adopted; none is minted or written here, so a slow mint for one app never holds
///   up a claim.
///
/// The delivery stage then finds them in memory and holds no connection; what is still missing (a message not
/// read, a token missing, due or refused) it gets through its own narrow closures.
public struct ClaimedBatchPrefetch: Sendable {
    /// Where the messages go (nil: nothing is prefetched, each delivery reads its message itself).
    public var messages: MessageCache?
    /// Where the tokens go, and which a batch needs (nil: each send gets its token itself).
    var tokens: (shared: SharedProviderTokens, keys: @Sendable ([ClaimedDelivery]) -> [ProviderTokenKey])?

    public init(messages: MessageCache? = nil) {
        self.messages = messages
    }

    /// - Parameters:
    ///   - tokens: the worker's shared provider tokens, which the senders read their tokens from.
    ///   - tokenKeys: the tokens a batch's requests carry (``DeliveryPipeline/sharedTokenKeys(of:)``).
    init(
        messages: MessageCache?, tokens: SharedProviderTokens?,
        tokenKeys: @escaping @Sendable ([ClaimedDelivery]) -> [ProviderTokenKey]
    ) {
        self.messages = messages
        self.tokens = tokens.map { ($0, tokenKeys) }
    }

    /// Loads what `batch` needs on `connection`. Never throws: the rows are leased and must be sent; what it
    /// could not load is loaded again, or reported, per delivery.
    func load(_ batch: [ClaimedDelivery], on connection: PostgresConnection) {
        guard !batch.isEmpty else { return }
        messages?.prefetch(batch.map { ($0.notificationID, $0.messageVersion) }) { ids in
            try MessageStore.messages(on: connection, notificationIDs: ids, maximumBytes: MessageCache.maximumMessageBytes)
        }
        if let tokens {
            tokens.shared.prefetch(tokens.keys(batch)) { credentials in
                try ProviderTokenStore.current(on: connection, credentials)
            }
        }
    }
}
