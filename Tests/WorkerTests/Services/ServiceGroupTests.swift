import Synchronization
import Testing
@testable import Worker

/// ``ServiceGroup``'s shutdown order, with services that only record what happens (no database, no clock).
@Suite("The worker's services and their shutdown order")
struct ServiceGroupTests {
    final class Journal: Sendable {
        private let entries = Mutex<[String]>([])
        func note(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    /// Runs until its wake-up is signalled, noting its start and end.
    struct WaitingService: Service {
        let name: String
        let journal: Journal
        let stop: WakeSignal
        func run() async {
            journal.note("\(name) started")
            while !(await stop.wait(timeout: .seconds(3600))) {}
            journal.note("\(name) returned")
        }
    }

    struct FailingService: Service {
        struct Failure: Error {}
        func run() async throws { throw Failure() }
    }

    @Test func theStepsAfterTheLeadRunInOrderOnceItReturnsAndTheGroupWaitsForEveryService() async {
        let journal = Journal()
        let leadStop = WakeSignal()
        let completerStop = WakeSignal()
        let expansionStop = WakeSignal()
        let group = ServiceGroup(
            background: [
                WaitingService(name: "completer", journal: journal, stop: completerStop),
                WaitingService(name: "expansion", journal: journal, stop: expansionStop),
            ],
            lead: WaitingService(name: "claim", journal: journal, stop: leadStop),
            afterLead: [
                { journal.note("listener closed") },
                {
                    journal.note("completer told to flush")
                    completerStop.signal()
                },
                {
                    journal.note("expansion woken")
                    expansionStop.signal()
                },
            ])
        let run = Task {
            await group.run()
            journal.note("group returned")
        }
        // The stop request reaches the lead only.
        leadStop.signal()
        await run.value
        let entries = journal.all
        func position(_ entry: String) -> Int { entries.firstIndex(of: entry) ?? -1 }
        #expect(Set(entries).count == entries.count && entries.count == 10)
        #expect(position("claim returned") < position("listener closed"))
        #expect(position("listener closed") < position("completer told to flush"))
        #expect(position("completer told to flush") < position("expansion woken"))
        #expect(position("completer told to flush") < position("completer returned"))
        #expect(position("expansion woken") < position("expansion returned"))
        #expect(entries.last == "group returned")
    }

    @Test func aServiceThatThrowsIsReportedAndTheOthersRunOn() async {
        let journal = Journal()
        let failures = Mutex(0)
        let stop = WakeSignal()
        let group = ServiceGroup(
            background: [FailingService()], lead: WaitingService(name: "claim", journal: journal, stop: stop),
            afterLead: [], failed: { _ in failures.withLock { $0 += 1 } })
        stop.signal()
        await group.run()
        #expect(failures.withLock { $0 } == 1)
        #expect(journal.all == ["claim started", "claim returned"])
    }
}
