import DeliveryCore
import Synchronization
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
        return Task.isCancelled ? .retry(reason: .transportError) : .sent(providerMessageID: nil)
    }

    static func isDeadlineExceeded(_ outcome: DeliveryOutcome) -> Bool {
        if case .retry(DeliveryReason.deadlineExceeded, let detail, _) = outcome { return detail["deadline_s"] != nil }
        return false
    }

    @Test func aSendOverrunningItsDeadlineIsCancelled() async {
        let deadlines = DeliveryDeadlines(timeout: .milliseconds(50))
        let outcome = await deadlines.run(Self.hanging)
        #expect(Self.isDeadlineExceeded(outcome))
        let quick = await DeliveryDeadlines(timeout: .seconds(600)).run { .sent(providerMessageID: "x") }
        #expect(quick == .sent(providerMessageID: "x"))
    }

    /// Hanging exchanges started first, quick ones after (so with later deadlines): every hanging one ends as
    /// `deadline_exceeded`, and every quick one is judged by when its `send` returned, however late its caller
    /// resumes; a second round after the sweeper has found nothing left to watch is served by a new one.
    ///
    /// The test does not assume the quick ones get a thread in time: on a loaded 2-core machine, beside the
    /// other suites, tasks have waited longer than any deadline short enough to test. Each quick send records
    /// when it returned, against a start taken before `run` was called (so no later than the deadline's own);
    /// one that returned a margin before that deadline must keep its own outcome. One that returned after it
    /// may go either way: it is cancelled only if the sweeper, which may itself be waiting for a thread, got
    /// there first.
    @Test func onlyTheExchangesPastTheirDeadlineAreCancelled() async {
        let timeout = Duration.seconds(1)
        let deadlines = DeliveryDeadlines(timeout: timeout)
        struct Quick: Sendable {
            var index: Int
            var inTime: Bool
            var outcome: DeliveryOutcome
        }
        for _ in 0..<2 {
            let (hung, quick) = await withTaskGroup(of: (DeliveryOutcome?, Quick?).self) { group in
                for _ in 0..<50 { group.addTask { (await deadlines.run(Self.hanging), nil) } }
                for index in 0..<200 {
                    group.addTask {
                        let started = ContinuousClock.now
                        let returned = Mutex<ContinuousClock.Instant?>(nil)
                        let outcome = await deadlines.run {
                            returned.withLock { $0 = .now }
                            return .sent(providerMessageID: "\(index)")
                        }
                        let elapsed = returned.withLock { $0 }.map { $0 - started }
                        let inTime = elapsed.map { $0 < timeout - .milliseconds(250) } ?? false
                        return (nil, Quick(index: index, inTime: inTime, outcome: outcome))
                    }
                }
                return await group.reduce(into: ([DeliveryOutcome](), [Quick]())) {
                    if let hung = $1.0 { $0.0.append(hung) }
                    if let quick = $1.1 { $0.1.append(quick) }
                }
            }
            #expect(hung.count == 50 && hung.allSatisfy(Self.isDeadlineExceeded))
            #expect(quick.count == 200)
            for exchange in quick where exchange.inTime {
                #expect(exchange.outcome == .sent(providerMessageID: "\(exchange.index)"), "returned in time")
            }
            let kept = Set(quick.compactMap { if case .sent(let id) = $0.outcome { id } else { nil } })
            #expect(kept.count == quick.count { !Self.isDeadlineExceeded($0.outcome) })
            #expect(deadlines.inFlight == 0)
        }
    }

    /// A caller cancelled (the worker shutting down) cancels its exchange at once; that is not the deadline.
    @Test func theCallersCancellationReachesTheExchange() async {
        let deadlines = DeliveryDeadlines(timeout: .seconds(600))
        let caller = Task { await deadlines.run(Self.hanging) }
        caller.cancel()
        let outcome = await caller.value
        #expect(outcome == .retry(reason: .transportError))
        #expect(deadlines.inFlight == 0)
    }
}
