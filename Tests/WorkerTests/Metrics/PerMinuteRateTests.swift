import Foundation
import Testing
@testable import Worker

/// The heartbeat's rates, driven by instants given as values.
@Suite struct PerMinuteRateTests {
    @Test func theRateIsTheIncreaseOverTheLastMinuteScaledToAMinute() {
        let start = ContinuousClock.now
        var rate = PerMinuteRate()
        #expect(rate.record(0, at: start) == 0)
        // 10 in the first 5 seconds: 120 a minute.
        #expect(rate.record(10, at: start + .seconds(5)) == 120)
        // Every 5 s for two minutes at 1 a second: the window keeps the base a minute back.
        var total = 10.0
        for step in 2...24 {
            total += 5
            let value = rate.record(total, at: start + .seconds(5 * step))
            if step >= 13 { #expect(value == 60, "step \(step)") }
        }
        // Then nothing for a minute and more: 0.
        #expect(rate.record(total, at: start + .seconds(200)) == 0)
    }

    /// In a worker's first minute its claims/min is the rate since its first heartbeat scaled to a minute, not a
    /// count: docs/status.md ("Workers") says so with this example.
    @Test func aYoungWorkersRateIsScaledFromTheTimeItRanAsTheDocSays() throws {
        let start = ContinuousClock.now
        var rate = PerMinuteRate()
        #expect(rate.record(0, at: start) == 0)
        let young = rate.record(326, at: start + .seconds(9))
        #expect(FleetStatusRenderer.rate(young.rounded()) == "2,173")
        let doc = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/status.md")
        let text = try String(contentsOf: doc, encoding: .utf8).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let describesTheFirstMinute = text.contains(
            "a worker that claimed 326 deliveries in the 9 s after its first heartbeat shows 2,173 claims/min")
        #expect(describesTheFirstMinute, "docs/status.md, Workers: the first minute's rate")
    }

    @Test func aShortWindowFollowsTheRecentRate() {
        let start = ContinuousClock.now
        var rate = PerMinuteRate(window: .seconds(1))
        for step in 0..<1000 { _ = rate.record(Double(step), at: start + .milliseconds(100 * step)) }
        // 10 a second: 600 a minute, whatever came before the window.
        #expect(abs(rate.record(1000, at: start + .milliseconds(100_000)) - 600) < 1e-6)
    }
}
