import DeliveryCore
import Foundation

/// Turns one claimed delivery into its completion: checks, rendering, the provider request and the
/// classification of the answer. Never throws: every problem becomes an outcome of that delivery.
///
/// It holds no database connection: what a batch shares (its messages, the fleet's provider tokens its requests
/// carry) the claim loaded on its own connection before handing the batch here (``ClaimedBatchPrefetch``); what
/// it still needs from the database goes through narrow closures the store side owns (a message read, a
/// frequency-cap reservation, a provider token missing, due or refused).
public protocol DeliveryProcessing: Sendable {
    /// One delivery's completion.
    func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion
    /// Processes a claimed batch, calling `completed` once per delivery as soon as its completion is known, from
    /// any task. Returns when every delivery has been completed.
    func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async
}

extension DeliveryProcessing {
    /// One task per delivery, each through ``process(_:)``.
    public func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async {
        await withDiscardingTaskGroup { group in
            for delivery in batch {
                group.addTask { completed(delivery, await self.process(delivery)) }
            }
        }
    }
}
