import DeliveryCore
import Foundation
@testable import Worker

/// A stand-in sender that answers each delivery on its own; its batches are answered one delivery after another.
protocol OneByOneSender: ProviderSender {
    func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome
}

extension OneByOneSender {
    func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        for (index, item) in batch.enumerated() {
            completed(index, await send(item.delivery, message: item.message, now: context.now))
        }
    }
}

extension ProviderSender {
    /// `delivery` sent as a batch of one (as the pipeline sends a delivery of an app with frequency caps), without
    /// a deadline.
    func sendOne(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
        let outcome = OutcomeBox()
        await send(
            batch: [BatchedSend(delivery: delivery, message: message)],
            context: SendBatchContext(now: now, deadline: nil, timeout: .zero)
        ) { _, sent in outcome.set(sent) }
        return outcome.value ?? .retry(reason: .transportError, detail: "the sender reported nothing")
    }
}

/// One outcome, set from whichever thread reports it.
final class OutcomeBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: DeliveryOutcome?

    func set(_ outcome: DeliveryOutcome) { lock.withLock { stored = outcome } }
    var value: DeliveryOutcome? { lock.withLock { stored } }
}
