import Foundation
import Testing
@testable import Worker

/// The loops' wake-up flag. Each test asserts what ended a wait (its result), not how long it took, except
/// that a timed-out wait lasts its timeout.
@Suite struct WakeSignalTests {
    /// A signal given while nobody waits is kept for the next wait, which then returns at once, and only once.
    @Test func aSignalBeforeTheWaitIsKeptForOneWait() async {
        let wake = WakeSignal()
        wake.signal()
        wake.signal()
        #expect(await wake.wait(timeout: .seconds(600)))
        #expect(await wake.wait(timeout: .milliseconds(10)) == false)
    }

    /// A waiter is woken by a signal from another task, not by its timeout.
    @Test func aSignalWakesTheWaiter() async {
        let wake = WakeSignal()
        async let signalled = wake.wait(timeout: .seconds(600))
        try? await Task.sleep(for: .milliseconds(20))
        wake.signal()
        #expect(await signalled)
    }

    /// Without a signal the wait ends at its timeout, not before; the timer of an earlier wait that a signal
    /// ended does not end a later wait.
    @Test func theTimeoutEndsTheWaitAndAnOldTimerDoesNot() async {
        let wake = WakeSignal()
        var started = ContinuousClock.now
        #expect(await wake.wait(timeout: .milliseconds(10)) == false)
        #expect(ContinuousClock.now - started >= .milliseconds(10))
        async let first = wake.wait(timeout: .milliseconds(100))
        try? await Task.sleep(for: .milliseconds(5))
        wake.signal()
        _ = await first
        started = ContinuousClock.now
        #expect(await wake.wait(timeout: .milliseconds(300)) == false)
        #expect(ContinuousClock.now - started >= .milliseconds(300))
    }

    /// Cancelling the waiting task ends the wait (as not signalled).
    @Test func cancellationEndsTheWait() async {
        let wake = WakeSignal()
        let waiter = Task { await wake.wait(timeout: .seconds(600)) }
        try? await Task.sleep(for: .milliseconds(20))
        waiter.cancel()
        #expect(await waiter.value == false)
    }
}
