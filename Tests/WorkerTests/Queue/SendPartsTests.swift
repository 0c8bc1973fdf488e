import Foundation
import Testing
@testable import Worker

/// How a claimed batch is split into the parts its sends run as (``Admission/splitByShare(_:app:)``).
@Suite("A claimed batch's send parts")
struct SendPartsTests {
    func deliveries(_ app: UUID, _ count: Int, from first: Int64) -> [ClaimedDelivery] {
        let template = CacheBoundsTests().delivery(app: app, settings: "{}", platform: "ios")
        return (0..<Int64(count)).map { offset in
            var delivery = template
            delivery.id = first + offset
            return delivery
        }
    }

    @Test func oneDevicePushesBesideABroadcastsShareGoFirstAtHighPriority() {
        let broadcast = UUID()
        let probe = UUID()
        let claimed = deliveries(broadcast, 100, from: 1) + deliveries(probe, 1, from: 200) + deliveries(broadcast, 99, from: 101)
        let parts = Admission.splitByShare(claimed, app: \.appID)
        #expect(parts.count == 2)
        #expect(parts[0].deliveries.map(\.id) == [200] && parts[0].priority == .high)
        // The broadcast's deliveries together, in claim order, at the default priority.
        #expect(parts[1].deliveries.map(\.id) == Array(1...199).filter { $0 != 200 }.map(Int64.init) && parts[1].priority == nil)
    }

    @Test func aBatchOfOneKindIsOnePart() {
        let broadcast = UUID()
        #expect(Admission.splitByShare(deliveries(broadcast, 200, from: 1), app: \.appID).count == 1)
        // Many apps with a few deliveries each: all small, one high-priority part.
        let small = (0..<20).flatMap { index in deliveries(UUID(), 3, from: Int64(index * 10)) }
        let parts = Admission.splitByShare(small, app: \.appID)
        #expect(parts.count == 1 && parts[0].priority == .high && parts[0].deliveries.count == 60)
    }
}
