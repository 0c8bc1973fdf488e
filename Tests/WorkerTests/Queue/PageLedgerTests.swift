import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// The completer's count of each leased page's outstanding deliveries (``PageLedger``), without I/O.
@Suite("Page ledger")
struct PageLedgerTests {
    static func completion(page: Int64, fence: Int64 = 1) -> DeliveryCompletion {
        DeliveryCompletion(source: .page(page), fence: fence, event: .sent, reason: nil, detailJSON: "{}", nextRunAt: nil)
    }

    @Test func aPageIsFinishedByTheBatchThatHoldsItsLastOutstandingDeliveries() {
        var ledger = PageLedger()
        ledger.handedOut(page: 1, fence: 1, deliveries: 3)
        ledger.handedOut(page: 2, fence: 1, deliveries: 1)
        let first = [Self.completion(page: 1), Self.completion(page: 2)]
        #expect(ledger.finished(by: first) == [2])
        ledger.written(first)
        // A row's completion and another lease's do not count.
        let rest = [Self.completion(page: 1), Self.completion(page: 1, fence: 2)]
            + [DeliveryCompletion(source: .row(1), fence: 1, event: .sent, reason: nil, detailJSON: "{}", nextRunAt: nil)]
        #expect(ledger.finished(by: rest).isEmpty)
        ledger.written(rest)
        #expect(ledger.finished(by: [Self.completion(page: 1)]) == [1])
        ledger.written([Self.completion(page: 1)])
        #expect(ledger.count == 0)
    }

    @Test func aNewLeaseOfAPageReplacesTheOlderOne() {
        var ledger = PageLedger()
        ledger.handedOut(page: 1, fence: 1, deliveries: 5)
        ledger.handedOut(page: 1, fence: 2, deliveries: 2)
        #expect(ledger.count == 1)
        #expect(ledger.finished(by: [Self.completion(page: 1, fence: 2), Self.completion(page: 1, fence: 2)]) == [1])
        #expect(ledger.finished(by: [Self.completion(page: 1), Self.completion(page: 1)]).isEmpty)
    }
}
