import DeliveryCore
import Foundation
import Synchronization
import Testing
@testable import Worker

/// ``ClaimedBatchPrefetch``: the claim loads a batch's messages on its own connection, so the delivery stage finds
/// them in memory and reads nothing itself.
@Suite("What a claimed batch needs, loaded by the claim")
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
}
