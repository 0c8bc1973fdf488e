import Foundation
import Postgres

/// What a claimed batch needs before its sends, read by the claim on its own connection and thread, in the
/// claim's hand-off to the pool (a hand-off of its own would cost two more thread wake-ups per claim): the
/// messages its deliveries use that are not cached at their claimed version, in one round trip
/// (``MessageStore/messages(on:notificationIDs:maximumBytes:)`` into ``MessageCache``). The delivery stage then
/// finds them in memory and holds no connection.
public struct ClaimedBatchPrefetch: Sendable {
    /// Where the messages go (nil: nothing is prefetched, each delivery reads its message itself).
    public var messages: MessageCache?

    public init(messages: MessageCache? = nil) {
        self.messages = messages
    }

    /// Loads what `batch` needs on `connection`. Never throws: the rows are leased and must be sent; what it
    /// could not load is loaded again, or reported, per delivery.
    func load(_ batch: [ClaimedDelivery], on connection: PostgresConnection) {
        guard let messages, !batch.isEmpty else { return }
        messages.prefetch(batch.map { ($0.notificationID, $0.messageVersion) }) { ids in
            try MessageStore.messages(on: connection, notificationIDs: ids, maximumBytes: MessageCache.maximumMessageBytes)
        }
    }
}
