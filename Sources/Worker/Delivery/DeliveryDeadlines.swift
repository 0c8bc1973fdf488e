import DeliveryCore
import Synchronization

/// The per-delivery deadline of ``DeliveryPipeline`` for a delivery sent as a batch of one (an app with
/// frequency caps): its whole provider exchange (token fetch, send, a refresh and its resend) runs in a task of
/// its own that is cancelled once it has run for `timeout`, so a delivery never outlives its lease, whatever the
/// sender does. A cancelled exchange becomes a counted retry, `deadline_exceeded` (the request may have reached
/// the provider). Larger batches are held to the same deadline by the sender itself (``SendBatchContext``).
///
/// One sweeping task serves every exchange in flight instead of a sleeping timer per delivery: all exchanges
/// get the same timeout, so the order they start in is the order their deadlines fall in, and the sweeper only
/// ever sleeps until the oldest unfinished one's deadline. It runs while exchanges are in flight and ends when
/// none is left (the next exchange starts it again).
final class DeliveryDeadlines: Sendable {
    /// How long one exchange may take, from the moment ``run(_:)`` starts it.
    let timeout: Duration

    private struct Exchange {
        var id: UInt64
        var deadline: ContinuousClock.Instant
    }

    /// Where an exchange is: registered before its task handle is known, running, or past its deadline (the
    /// sweeper's mark; the exchange's task reads it when `send` returns).
    private enum Slot {
        case starting
        case running(Task<DeliveryOutcome, Never>)
        case expired
    }

    private struct State {
        /// Exchanges whose `send` has not returned yet. An exchange removes its own slot the moment `send`
        /// returns, so whether it beat its deadline is decided then, not when its caller gets a thread back.
        var slots: [UInt64: Slot] = [:]
        /// Every exchange started since the sweeper last emptied it, in deadline order from `head` on. Finished
        /// ones are dropped lazily (by the sweeper, or when they outnumber the unfinished ones).
        var order: [Exchange] = []
        var head = 0
        var nextID: UInt64 = 0
        var sweeping = false

        /// Whether `id` is an exchange still within its deadline (running or starting).
        func isUnexpired(_ id: UInt64) -> Bool {
            switch slots[id] {
            case .starting?, .running?: true
            case .expired?, nil: false
            }
        }
    }

    private let state = Mutex(State())

    /// - Parameter timeout: the deadline of each exchange, more than zero.
    init(timeout: Duration) {
        self.timeout = timeout
    }

    /// Exchanges whose `send` has not returned yet (for tests).
    var inFlight: Int { state.withLock { $0.slots.count } }

    /// Runs `send` in a task of its own, cancelled after ``timeout`` or when the caller's task is cancelled.
    /// - Returns: what `send` returned, or `retry` / `deadline_exceeded` (with `deadline_s`) when `send` had not
    ///   returned by the deadline (it was cancelled, and has returned since: nothing of the exchange is left
    ///   running).
    func run(_ send: @escaping @Sendable () async -> DeliveryOutcome) async -> DeliveryOutcome {
        let (id, startSweeper) = state.withLock { state in
            let id = state.nextID
            state.nextID &+= 1
            state.slots[id] = .starting
            state.order.append(Exchange(id: id, deadline: .now + timeout))
            Self.compact(&state)
            let start = !state.sweeping
            state.sweeping = true
            return (id, start)
        }
        let deadlineOutcome = DeliveryOutcome.deadlineExceeded(after: timeout)
        let task = Task {
            let outcome = await send()
            let expired = self.state.withLock { state -> Bool in
                guard case .expired? = state.slots.removeValue(forKey: id) else { return false }
                return true
            }
            return expired ? deadlineOutcome : outcome
        }
        let expiredAlready = state.withLock { state -> Bool in
            switch state.slots[id] {
            case .starting?: state.slots[id] = .running(task)
            case .expired?: return true
            case .running?, nil: break  // finished already
            }
            return false
        }
        if expiredAlready { task.cancel() }
        if startSweeper { Task { await self.sweep() } }
        return await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
    }

    /// Runs `body` and cancels it at `deadline`: for the few exchanges of a batch that do not start with it
    /// (a provider token fetched once for the batch, a resend with a replaced token), which must still end by
    /// the batch's deadline. Costs a task pair per call, so it is not for every delivery.
    /// - Returns: what `body` returned, or `nil` when the deadline came first (`body` has been cancelled and
    ///   has returned since: nothing of it is left running).
    /// - Throws: what `body` throws, or `CancellationError` when the calling task is cancelled.
    static func value<T: Sendable>(
        by deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T? {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    /// Drops finished and expired exchanges from `order` once they are most of it, so it stays within about
    /// twice the exchanges in flight however long the timeout (amortised: each drop at least halves it).
    private static func compact(_ state: inout State) {
        let pending = state.order.count - state.head
        guard pending > 1024, pending > 2 * state.slots.count else { return }
        state.order = state.order[state.head...].filter { state.isUnexpired($0.id) }
        state.head = 0
    }

    /// Cancels the exchanges past their deadline, then sleeps until the oldest unfinished one's; returns when
    /// none is left.
    private func sweep() async {
        while true {
            let (due, next): ([Task<DeliveryOutcome, Never>], ContinuousClock.Instant?) = state.withLock { state in
                let now = ContinuousClock.now
                var due: [Task<DeliveryOutcome, Never>] = []
                while state.head < state.order.count {
                    let exchange = state.order[state.head]
                    guard state.isUnexpired(exchange.id) else {
                        state.head += 1  // finished, or expired already
                        continue
                    }
                    if exchange.deadline > now { break }
                    // A slot still starting is cancelled by its `run` once it sees the mark.
                    if case .running(let task)? = state.slots[exchange.id] { due.append(task) }
                    state.slots[exchange.id] = .expired
                    state.head += 1
                }
                if state.head == state.order.count {
                    state.order.removeAll(keepingCapacity: state.order.count <= 4096)
                    state.head = 0
                    state.sweeping = false
                    return (due, nil)
                }
                return (due, state.order[state.head].deadline)
            }
            // Outside the lock: cancellation runs the exchange's handlers (an HTTP/2 stream reset, …).
            for task in due { task.cancel() }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
        }
    }
}

