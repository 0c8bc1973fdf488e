/// The results of one submission that finished in the current turn of the event loop, delivered together at
/// its end. Loop thread only.
final class AnswerBurst: @unchecked Sendable {
    private let core: ClientCore
    private let deliver: @Sendable ([HTTP2Answer]) -> Void
    private var pending: [HTTP2Answer] = []

    init(core: ClientCore, deliver: @escaping @Sendable ([HTTP2Answer]) -> Void) {
        self.core = core
        self.deliver = deliver
    }

    func add(_ answer: HTTP2Answer) {
        // Once the loop has stopped, nothing runs at the end of a turn any more: deliver at once.
        if core.isLoopStopped {
            deliver([answer])
            return
        }
        if pending.isEmpty {
            // A read brings a dozen answers or so: one allocation instead of growing 1, 2, 4, 8, 16.
            pending.reserveCapacity(16)
            core.loop.core.runSoon { [self] in flush() }
        }
        pending.append(answer)
    }

    private func flush() {
        let answers = pending
        pending = []
        if !answers.isEmpty { deliver(answers) }
    }
}
