import DeliveryCore
import Foundation
import Postgres

/// Turns one claimed delivery into its completion: checks, rendering, the provider request and the
/// classification of the answer. Never throws: every problem becomes an outcome of that delivery.
public protocol DeliveryProcessing: Sendable {
    /// Called once per claimed batch before its deliveries are processed, on the claim's database connection
    /// and thread, in the claim's own hand-off to the pool: loads data the batch shares in one round trip (the
    /// messages). Must not throw: what it could not load is loaded again, or reported, per delivery.
    func prepare(_ batch: [ClaimedDelivery], on connection: PostgresConnection)
    func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion
    /// Processes a claimed batch (after ``prepare(_:on:)``), calling `completed` once per delivery as soon as its
    /// completion is known, from any task. Returns when every delivery has been completed.
    func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async
}

extension DeliveryProcessing {
    public func prepare(_ batch: [ClaimedDelivery], on connection: PostgresConnection) {}

    /// One task per delivery, each through ``process(_:)``.
    public func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async {
        await withDiscardingTaskGroup { group in
            for delivery in batch {
                group.addTask { completed(delivery, await self.process(delivery)) }
            }
        }
    }
}
