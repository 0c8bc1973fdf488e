import DeliveryCore
import Foundation
import Synchronization
import Testing
@testable import Worker

/// A claimed batch through ``DeliveryPipeline/process(batch:completed:)``: the deliveries left to send reach a
/// batching sender in one call, what it declines and what belongs to an app with frequency caps go the
/// one-delivery way, and every delivery is completed exactly once.
@Suite("DeliveryPipeline batches")
struct DeliveryPipelineBatchTests {
    /// Takes every delivery but those whose token is `decline`; answers `sent("batched")`, and
    /// `sent("alone")` for one sent through the one-delivery path.
    final class BatchingSender: BatchingProviderSender {
        let provider = Provider.apns
        let batches = Mutex<[(count: Int, deadline: ContinuousClock.Instant?)]>([])
        let alone = Counter()

        func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
            alone.increment()
            return .sent(providerMessageID: "alone")
        }

        func send(
            batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
        ) async -> [Int] {
            batches.withLock { $0.append((batch.count, context.deadline)) }
            var declined: [Int] = []
            for (index, item) in batch.enumerated() {
                if item.delivery.token == "decline" { declined.append(index) } else { completed(index, .sent(providerMessageID: "batched")) }
            }
            return declined
        }
    }

    let checks = DeliveryPipelineTests()

    func pipeline(_ sender: BatchingSender) -> DeliveryPipeline {
        DeliveryPipeline(
            senders: [sender], maxAttempts: 3, retryPolicy: RetryPolicy(baseDelay: .seconds(1), maximumDelay: .seconds(10)),
            logger: Logger(label: "test", minimumLevel: .error), deliveryTimeout: .seconds(30),
            loadMessages: { ids in
                let message = #"{"contents": {"en": "hi"}}"#
                return Dictionary(uniqueKeysWithValues: ids.map { ($0, .init(version: "1", byteCount: message.utf8.count, json: message)) })
            },
            reserveFrequencyCap: { _ in .granted(reused: false) })
    }

    @Test func aBatchReachesTheSenderOnceAndEveryDeliveryCompletesOnce() async {
        let sender = BatchingSender()
        var batch = (0..<5).map { _ in checks.delivery() }
        batch[1].token = "decline"
        batch.append(checks.delivery(caps: #"[{"max": 3, "per_seconds": 86400}]"#))
        batch.append(checks.delivery(status: "canceled"))
        for index in batch.indices { batch[index].id = Int64(index + 1) }
        let completions = Mutex<[Int64: [DeliveryCompletion]]>([:])
        let pipeline = pipeline(sender)
        let started = ContinuousClock.now
        await pipeline.process(batch: batch) { delivery, completion in
            completions.withLock { $0[delivery.id, default: []].append(completion) }
        }
        let done = completions.withLock { $0 }
        #expect(done.count == batch.count && done.values.allSatisfy { $0.count == 1 })
        #expect(done.allSatisfy { $0.key == $0.value[0].deliveryID })
        let batches = sender.batches.withLock { $0 }
        // The five to send without caps in one call, with the batch's deadline; the one it declines and the capped
        // one alone; the canceled one never reaches the sender.
        #expect(batches.map(\.count) == [5])
        if let deadline = batches.first?.deadline {
            #expect(deadline > started + .seconds(29) && deadline <= .now + .seconds(30))
        } else {
            Issue.record("no deadline")
        }
        #expect(sender.alone.value == 2)
        func detail(_ id: Int64) -> String { done[id]?.first?.detailJSON ?? "" }
        #expect(detail(2).contains("alone") && detail(6).contains("alone"))
        for id: Int64 in [1, 3, 4, 5] { #expect(detail(id).contains("batched")) }
        #expect(done[7]?.first?.event == .skipped && done[7]?.first?.reason == DeliveryReason.canceled)
    }
}
