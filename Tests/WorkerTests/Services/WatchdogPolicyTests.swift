import Foundation
import Testing
import Worker

/// When the worker may tell systemd `WATCHDOG=1`, and what its `STATUS=` lines say; no sockets, no clock.
@Suite("Watchdog policy and status lines")
struct WatchdogPolicyTests {
    static let start = ContinuousClock.now
    let policy = WatchdogPolicy(interval: .seconds(10))

    func at(_ seconds: Double) -> ContinuousClock.Instant { Self.start + .seconds(seconds) }

    @Test func pingsAtHalfTheInterval() {
        #expect(policy.tick == .seconds(5))
    }

    @Test func everyLoopWaitingOrWorkingBrieflyPings() {
        let loops: [(name: String, activity: LoopActivity)] = [
            ("claim loop", .working(since: at(1))), ("completer", .waiting(until: at(2))),
            ("HTTP/2 I/O thread", .waiting(until: nil)), ("done", .finished),
        ]
        #expect(policy.verdict(loops, now: at(10.9)) == .ping)
    }

    @Test func oneIterationLongerThanTheIntervalWithholds() {
        let loops: [(name: String, activity: LoopActivity)] = [
            ("claim loop", .working(since: at(0))), ("completer", .waiting(until: at(100))),
        ]
        #expect(policy.verdict(loops, now: at(9.9)) == .ping)
        #expect(
            policy.verdict(loops, now: at(12))
                == .withhold(stuck: [WatchdogPolicy.Stuck(name: "claim loop", overdue: .seconds(12))]))
    }

    /// An idle loop is alive only until its own wait's bound plus the interval: a wake-up that never comes
    /// back (a starved scheduler) stops the pings too.
    @Test func aWaitOverrunningItsBoundByTheIntervalWithholds() {
        let loops: [(name: String, activity: LoopActivity)] = [("completer", .waiting(until: at(1)))]
        #expect(policy.verdict(loops, now: at(10.5)) == .ping)
        #expect(
            policy.verdict(loops, now: at(11))
                == .withhold(stuck: [WatchdogPolicy.Stuck(name: "completer", overdue: .seconds(10))]))
    }

    @Test func everyStuckLoopIsNamed() {
        let loops: [(name: String, activity: LoopActivity)] = [
            ("claim loop", .working(since: at(0))), ("completer", .waiting(until: at(5))),
            ("HTTP/2 I/O thread", .working(since: at(0))),
        ]
        guard case .withhold(let stuck) = policy.verdict(loops, now: at(20)) else {
            Issue.record("pinged with three stuck loops")
            return
        }
        #expect(stuck.map(\.name) == ["claim loop", "completer", "HTTP/2 I/O thread"])
    }

    @Test func aProbeStillOutstandingKeepsItsStartTime() {
        let heartbeat = LoopHeartbeat(name: "HTTP/2 I/O thread")
        #expect(heartbeat.workingUnlessAlready(now: at(0)))
        #expect(!heartbeat.workingUnlessAlready(now: at(5)))
        #expect(heartbeat.activity == .working(since: at(0)))
        heartbeat.waiting(for: nil, now: at(6))
        #expect(heartbeat.workingUnlessAlready(now: at(7)))
        #expect(heartbeat.activity == .working(since: at(7)))
        heartbeat.waiting(for: .seconds(2), now: at(8))
        #expect(heartbeat.activity == .waiting(until: at(10)))
    }

    @Test func statusLinesCarryRateLagAndInFlight() {
        let rate = SystemdStatusLine.rate(from: (100, at(0)), to: (4_162, at(5)))
        #expect(SystemdStatusLine(settledPerSecond: rate, queueLagSeconds: 2.06, inFlight: 301).text
            == "STATUS=sending 812.4/s, queue lag 2.1 s, 301 in flight")
        #expect(SystemdStatusLine(settledPerSecond: nil, queueLagSeconds: nil, inFlight: 0).text
            == "STATUS=sending ?/s, queue lag unknown, 0 in flight")
        #expect(SystemdStatusLine.rate(from: (5, at(1)), to: (5, at(1))) == 0)
    }

    /// While an operator pauses the fleet the line says so (the lag then leaves the held rows out: 0 when every
    /// due row is held), with the pause's end when it has one.
    @Test func aFleetPauseLeadsTheStatusLine() {
        #expect(SystemdStatusLine(settledPerSecond: 0, queueLagSeconds: 0, inFlight: 0, fleetPausedUntil: .distantFuture).text
            == "STATUS=fleet paused by an operator until resumed; sending 0.0/s, queue lag 0.0 s, 0 in flight")
        let end = Date(timeIntervalSince1970: 1_796_661_600)  // 2026-12-07 16:40:00 UTC
        #expect(SystemdStatusLine(settledPerSecond: 1.5, queueLagSeconds: 0, inFlight: 2, fleetPausedUntil: end).text
            == "STATUS=fleet paused by an operator until 2026-12-07 16:40:00 UTC; sending 1.5/s, queue lag 0.0 s, 2 in flight")
    }

    @Test func aWithheldWatchdogLeadsTheStatusLine() {
        let line = SystemdStatusLine(
            settledPerSecond: 0, queueLagSeconds: 80.24, inFlight: 12,
            stuck: [WatchdogPolicy.Stuck(name: "claim loop", overdue: .milliseconds(75_040))])
        #expect(line.text == "STATUS=watchdog withheld: claim loop stuck for 75.0 s; sending 0.0/s, queue lag 80.2 s, 12 in flight")
    }
}
