import Foundation
import Synchronization

/// A sticky wake-up flag for one waiting task: `signal()` from anywhere wakes the waiter, or the next
/// `wait(timeout:)` if nobody is waiting yet, so a NOTIFY that arrives while the loop is busy is not lost.
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Bool, Never>?
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Wakes the waiter now, or makes the next wait return at once.
    func signal() {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { state in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume(returning: true)
    }

    /// Returns on a signal, after `timeout`, or on task cancellation, whichever comes first.
    /// Only one task may wait at a time.
    /// - Returns: `true` when a signal ended the wait (or one was pending), `false` on the timeout or cancellation.
    @discardableResult
    func wait(timeout: Duration) async -> Bool {
        let generation: UInt64? = state.withLock { state in
            if state.pending {
                state.pending = false
                return nil
            }
            state.generation &+= 1
            return state.generation
        }
        guard let generation else { return true }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.fire(generation: generation)
        }
        let signalled = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let resumeNow: Bool? = state.withLock { state in
                    // A signal or timeout between the two locks already happened: don't wait.
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    if state.generation != generation { return false }
                    state.waiter = continuation
                    return nil
                }
                if let resumeNow { continuation.resume(returning: resumeNow) }
            }
        } onCancel: {
            self.fire(generation: generation)
        }
        timer.cancel()
        return signalled
    }

    private func fire(generation: UInt64) {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { state in
            guard state.generation == generation else { return nil }
            state.generation &+= 1
            let waiter = state.waiter
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: false)
    }
}
