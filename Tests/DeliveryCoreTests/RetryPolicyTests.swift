import DeliveryCore
import Foundation
import Testing

@Suite("RetryPolicy backoff")
struct RetryPolicyTests {
    let policy = RetryPolicy(baseDelay: .seconds(2), maximumDelay: .seconds(60))
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func delayDoublesWithinJitterBounds() {
        // attempt n: ceiling = min(60, 2 * 2^(n-1)); delay in [ceiling/2, ceiling).
        for (attempt, ceiling) in [(1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0), (6, 60.0), (30, 60.0)] {
            let low = policy.nextAttempt(after: attempt, now: now, unitRandom: 0).timeIntervalSince(now)
            let high = policy.nextAttempt(after: attempt, now: now, unitRandom: 0.999_999_9).timeIntervalSince(now)
            #expect(abs(low - ceiling / 2) < 1e-9)
            #expect(high < ceiling && high > ceiling * 0.99)
        }
    }

    @Test func retryAfterIsAFloor() {
        let later = now.addingTimeInterval(600)
        #expect(policy.nextAttempt(after: 1, now: now, unitRandom: 0.5, notBefore: later) == later)
        let earlier = now.addingTimeInterval(0.1)
        #expect(policy.nextAttempt(after: 1, now: now, unitRandom: 0.5, notBefore: earlier) > earlier)
    }
}
