import DeliveryCore
import Testing
@testable import Worker

/// The per-delivery deadline: one sweeper for every exchange in flight cancels exactly the ones past their
/// deadline, leaves the others alone, and lets the caller's own cancellation through.
@Suite("Per-delivery deadlines")
struct DeliveryDeadlinesTests {
    /// An exchange that never ends on its own: `sent` if nothing cancelled it (it cannot end without one),
    /// `transport_error` once cancelled, as the HTTP/2 client answers a cancelled request.
    @Sendable static func hanging() async -> DeliveryOutcome {
        try? await Task.sleep(for: .seconds(600))
        return Task.isCancelled ? .retry(reason: "transport_error") : .sent(providerMessageID: nil)
    }

    static func isDeadlineExceeded(_ outcome: DeliveryOutcome) -> Bool {
        if case .retry(DeliveryReason.deadlineExceeded.rawValue, let detail, _) = outcome { return detail["deadline_s"] != nil }
        return false
    }

    @Test func aSendOverrunningItsDeadlineIsCancelled() async {
        let deadlines = DeliveryDeadlines(seconds: 0.05)
        let outcome = await deadlines.run(Self.hanging)
        #expect(Self.isDeadlineExceeded(outcome))
        let quick = await DeliveryDeadlines(seconds: 600).run { .sent(providerMessageID: "x") }
        #expect(quick == .sent(providerMessageID: "x"))
    }

    /// Hanging exchanges started first, quick ones after (so with later deadlines): every hanging one ends as
    /// `deadline_exceeded`, every quick one with its own outcome (a quick one is judged when its `send`
    /// returns, however late its caller resumes); a second round after the sweeper has found nothing left to
    /// watch is served by a new one. The deadline is long because a quick exchange is judged against it from the
    /// moment it was started: on a loaded 2-core machine, running beside the other suites, this test's tasks have
    /// waited over 3 s for a thread, and a quick exchange that late is rightly `deadline_exceeded`.
    @Test func onlyTheExchangesPastTheirDeadlineAreCancelled() async {
        let deadlines = DeliveryDeadlines(seconds: 15)
        for _ in 0..<2 {
            let outcomes = await withTaskGroup(of: (Bool, DeliveryOutcome).self) { group in
                for _ in 0..<50 { group.addTask { (true, await deadlines.run(Self.hanging)) } }
                for index in 0..<200 {
                    group.addTask { (false, await deadlines.run { .sent(providerMessageID: "\(index)") }) }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let hung = outcomes.filter { $0.0 }.map(\.1)
            let quick = outcomes.filter { !$0.0 }.map(\.1)
            #expect(hung.count == 50 && hung.allSatisfy(Self.isDeadlineExceeded))
            #expect(Set(quick.compactMap { if case .sent(let id) = $0 { id } else { nil } }).count == 200)
            #expect(deadlines.inFlight == 0)
        }
    }

    /// A caller cancelled (the worker shutting down) cancels its exchange at once; that is not the deadline.
    @Test func theCallersCancellationReachesTheExchange() async {
        let deadlines = DeliveryDeadlines(seconds: 600)
        let caller = Task { await deadlines.run(Self.hanging) }
        caller.cancel()
        let outcome = await caller.value
        #expect(outcome == .retry(reason: "transport_error"))
        #expect(deadlines.inFlight == 0)
    }
}
