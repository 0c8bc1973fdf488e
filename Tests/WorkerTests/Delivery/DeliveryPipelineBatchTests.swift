import DeliveryCore
import Foundation
import Synchronization
import Testing
@testable import Worker

/// A claimed batch through ``DeliveryPipeline/process(batch:completed:)``: the deliveries left to send reach the
/// sender in one call, one that belongs to an app with frequency caps as a batch of one, and every delivery is
/// completed exactly once, also when the sender leaves some unreported.
@Suite("DeliveryPipeline batches")
struct DeliveryPipelineBatchTests {
    /// Answers `sent("batched")` for every delivery of a batch of more than one, `sent("alone")` for a batch of
    /// one; leaves those whose token is `forget` unreported, and reports those whose token is `twice` twice.
    final class BatchingSender: ProviderSender {
        let provider = Provider.apns
        let batches = Mutex<[(count: Int, deadline: ContinuousClock.Instant?)]>([])

        func send(
            batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
        ) async {
            batches.withLock { $0.append((batch.count, context.deadline)) }
            for (index, item) in batch.enumerated() where item.delivery.token != "forget" {
                completed(index, .sent(providerMessageID: batch.count == 1 ? "alone" : "batched"))
                if item.delivery.token == "twice" { completed(index, .sent(providerMessageID: "again")) }
            }
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
        batch[1].token = "forget"
        batch[2].token = "twice"
        batch.append(checks.delivery(caps: #"[{"max": 3, "per_seconds": 86400}]"#))
        batch.append(checks.delivery(status: "canceled"))
        for index in batch.indices { batch[index].source = .row(Int64(index + 1)) }
        let completions = Mutex<[DeliverySource: [DeliveryCompletion]]>([:])
        let pipeline = pipeline(sender)
        let started = ContinuousClock.now
        await pipeline.process(batch: batch) { delivery, completion in
            completions.withLock { $0[delivery.source, default: []].append(completion) }
        }
        let done = completions.withLock { $0 }
        #expect(done.count == batch.count && done.values.allSatisfy { $0.count == 1 })
        #expect(done.allSatisfy { $0.key == $0.value[0].source })
        let batches = sender.batches.withLock { $0 }
        // The five to send without caps in one call, with the batch's deadline; the capped one as a batch of one;
        // the canceled one never reaches the sender.
        #expect(batches.map(\.count).sorted() == [1, 5])
        if let deadline = batches.first(where: { $0.count == 5 })?.deadline {
            #expect(deadline > started + .seconds(29) && deadline <= .now + .seconds(30))
        } else {
            Issue.record("no deadline")
        }
        func detail(_ id: Int64) -> String { done[.row(id)]?.first?.detailJSON ?? "" }
        #expect(detail(6).contains("alone"))
        for id: Int64 in [1, 3, 4, 5] { #expect(detail(id).contains("batched")) }
        // Left unreported: ended by the pipeline as past its deadline, never lost.
        #expect(done[.row(2)]?.first?.reason == DeliveryReason.deadlineExceeded)
        #expect(done[.row(7)]?.first?.event == .skipped && done[.row(7)]?.first?.reason == DeliveryReason.canceled)
    }
}
