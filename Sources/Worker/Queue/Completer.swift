import Foundation
import Postgres
import Synchronization

/// Collects completions from concurrent sends and writes them in batches (one transaction per batch), so
/// writing events costs a round trip per batch rather than per delivery. A failed write keeps its batch and
/// tries again with backoff: a completion is never dropped while the process lives (and if it dies, the
/// lease expires and the delivery is sent again with the same `apns-id`).
final class Completer: Sendable {
    private struct State {
        var buffer: [DeliveryCompletion] = []
        var finishing = false
    }

    private let state = Mutex(State())
    private let wake = WakeSignal()
    private let drainedSignal = WakeSignal()
    private let database: PostgresClient
    private let logger: Logger
    private let batchSize: Int
    /// Seconds a completion may wait for companions before its batch is written.
    private let maximumDelay: Double
    private let settledCount = Atomic<Int>(0)
    private let lostLeaseCount = Atomic<Int>(0)

    init(database: PostgresClient, logger: Logger, batchSize: Int = 500, maximumDelay: Double = 0.005) {
        self.database = database
        self.logger = logger
        self.batchSize = batchSize
        self.maximumDelay = maximumDelay
    }

    /// Completions written so far.
    var settled: Int { settledCount.load(ordering: .relaxed) }
    /// Completions ignored because the delivery had been claimed again (fence mismatch).
    var lostLeases: Int { lostLeaseCount.load(ordering: .relaxed) }
    /// Completions waiting to be written.
    var pending: Int { state.withLock { $0.buffer.count } }

    /// Queues one completion; it is written within about `maximumDelay` seconds.
    func add(_ completion: DeliveryCompletion) {
        let count = state.withLock { state in
            state.buffer.append(completion)
            return state.buffer.count
        }
        if count == 1 || count >= batchSize { wake.signal() }
    }

    /// Asks ``run()`` to write what is left and return.
    func finish() {
        state.withLock { $0.finishing = true }
        wake.signal()
    }

    /// The write loop; returns after ``finish()`` once the buffer is empty.
    func run() async {
        var failures = 0
        while true {
            let (batch, finishing): ([DeliveryCompletion], Bool) = state.withLock { state in
                let take = min(state.buffer.count, batchSize)
                let batch = Array(state.buffer.prefix(take))
                state.buffer.removeFirst(take)
                return (batch, state.finishing)
            }
            if batch.isEmpty {
                if finishing { return }
                await wake.wait(timeout: 1)
                continue
            }
            // Give concurrent sends a moment to join a small batch.
            if batch.count < batchSize && !finishing && maximumDelay > 0 {
                try? await Task.sleep(for: .seconds(maximumDelay))
                let more: [DeliveryCompletion] = state.withLock { state in
                    let take = min(state.buffer.count, batchSize - batch.count)
                    let more = Array(state.buffer.prefix(take))
                    state.buffer.removeFirst(take)
                    return more
                }
                await write(batch + more, failures: &failures)
            } else {
                await write(batch, failures: &failures)
            }
        }
    }

    private func write(_ batch: [DeliveryCompletion], failures: inout Int) async {
        do {
            let applied = try await database.withConnection { connection in
                try QueueStore.complete(on: connection, batch)
            }
            failures = 0
            settledCount.add(applied, ordering: .relaxed)
            if applied < batch.count {
                lostLeaseCount.add(batch.count - applied, ordering: .relaxed)
                logger.warning(
                    "completions ignored: their deliveries were claimed again after the lease expired",
                    ["count": "\(batch.count - applied)"])
            }
        } catch {
            failures += 1
            let delay = min(5.0, 0.1 * pow(2, Double(min(failures, 6))))
            logger.error(
                "writing completions failed; keeping them and retrying",
                ["count": "\(batch.count)", "error": "\(error)", "retry_in_s": String(format: "%.1f", delay)])
            state.withLock { $0.buffer.insert(contentsOf: batch, at: 0) }
            try? await Task.sleep(for: .seconds(delay))
        }
    }
}
