import DeliveryCore
import Foundation
import Testing

@Suite("Pacing of deliveries withdrawn from a busy origin")
struct OriginPacingTests {
    static let start = Date(timeIntervalSinceReferenceDate: 800_000_000)
    static func at(_ seconds: Double) -> Date { start.addingTimeInterval(seconds) }

    @Test func withdrawalsGetTicketsSpacedByTheOriginsAnswerRate() {
        var pacing = OriginPacing()
        // 20 answers a second for 10 s.
        for tenth in 0..<200 { pacing.answered("https://slow.example", now: Self.at(Double(tenth) / 20)) }
        let tickets = (0..<100).map { _ in pacing.withdrawn("https://slow.example", now: Self.at(10), unitRandom: 0) }
        #expect(tickets[0] == Self.at(10.5))  // never sooner than half a second
        // Each one a twentieth of a second after the one before: the hundredth five seconds on.
        let spacing = tickets[99].timeIntervalSince(tickets[0]) / 99
        #expect(abs(spacing - 0.05) < 0.01)
        // Another origin is paced on its own.
        #expect(pacing.withdrawn("https://other.example", now: Self.at(10), unitRandom: 0) == Self.at(10.5))
    }

    @Test func anOriginThatAnswersNothingIsPacedAtTheMinimumRateUpToTheMaximumDelay() {
        var pacing = OriginPacing()
        let draws = [0.0, 0.5, 0.999]
        let tickets = (0..<2_000).map { index in
            pacing.withdrawn("https://black-hole.example", now: Self.at(0), unitRandom: draws[index % 3])
        }
        #expect(tickets[1].timeIntervalSince(tickets[0]) == 1 / pacing.minimumRate)
        // A second apart up to the maximum delay; those beyond it drawn from its last half, never past it.
        #expect(tickets[599] == Self.at(599.5))
        let beyond = tickets[600...].map { $0.timeIntervalSince(Self.at(0)) }
        #expect(beyond.allSatisfy { $0 >= OriginPacing.maximumDelay.inSeconds / 2 && $0 <= OriginPacing.maximumDelay.inSeconds })
        #expect(Set(beyond).count == 3)
        // A minute later the paced tickets go on from where they stopped, a second apart.
        #expect(pacing.withdrawn("https://black-hole.example", now: Self.at(60), unitRandom: 0) == Self.at(600.5))
        #expect(pacing.withdrawn("https://black-hole.example", now: Self.at(60), unitRandom: 0) == Self.at(601.5))
    }

    @Test func theRateAssumedBeforeAnyAnswerIsTheFloorGiven() {
        // 256 streams over a 30 s request timeout: about 8.5 a second.
        var pacing = OriginPacing(minimumRate: 256.0 / 30)
        let tickets = (0..<100).map { _ in pacing.withdrawn("https://push.example", now: Self.at(0), unitRandom: 0) }
        #expect(abs(tickets[99].timeIntervalSince(tickets[0]) - 99 * 30 / 256) < 0.001)
        #expect(OriginPacing(minimumRate: .nan).minimumRate == 1 && OriginPacing(minimumRate: -1).minimumRate == 1)
    }

    @Test func ticketsFromAnEndedBusySpellDoNotDelayTheNextOne() {
        var pacing = OriginPacing()
        for _ in 0..<30 { _ = pacing.withdrawn("https://push.example", now: Self.at(0), unitRandom: 0) }
        // An hour later the spell is long over: the first withdrawal comes back at the minimum delay.
        #expect(pacing.withdrawn("https://push.example", now: Self.at(3_600), unitRandom: 0) == Self.at(3_600.5))
    }

    @Test func rememberedOriginsAreBounded() {
        var pacing = OriginPacing()
        for index in 0..<(OriginPacing.maximumOrigins + 10) {
            pacing.answered("https://push\(index).example", now: Self.at(Double(index)))
        }
        #expect(pacing.originCount == OriginPacing.maximumOrigins)
    }
}
