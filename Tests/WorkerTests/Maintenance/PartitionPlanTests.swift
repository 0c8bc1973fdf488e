import Testing
@testable import Worker

/// The partition plan without a database: which days are created, which partitions dropped.
@Suite("Partition plan")
struct PartitionPlanTests {
    static let day = 86_400.0
    /// 2026-12-01 12:00 UTC.
    static let now = 20_423 * day + 43_200
    static let today = 20_423

    static func daily(_ day: Int) -> EventPartition {
        EventPartition(
            name: "delivery_events_p\(day)", lowerBound: Double(day) * Self.day, upperBound: Double(day + 1) * Self.day,
            isDefault: false)
    }

    static let defaultPartition = EventPartition(name: "delivery_events_default", lowerBound: nil, upperBound: nil, isDefault: true)

    @Test func createsTodayAndSevenDaysAheadWhenNothingCoversThem() {
        let plan = PartitionPlan(partitions: [Self.defaultPartition], now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(plan.daysToCreate == Array(Self.today...(Self.today + 7)))
        #expect(plan.partitionsToDrop.isEmpty)
    }

    @Test func skipsCoveredDaysAndFillsOnlyTheMissingOnes() {
        let existing = [Self.daily(Self.today), Self.daily(Self.today + 1), Self.daily(Self.today + 3), Self.defaultPartition]
        let plan = PartitionPlan(partitions: existing, now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(plan.daysToCreate == [Self.today + 2] + Array((Self.today + 4)...(Self.today + 7)))
    }

    @Test func dropsExactlyThePartitionsWholeOlderThanTheRetention() {
        // Retention 30 days: the horizon is 2026-11-01 12:00. The day ending 2026-11-01 00:00 is whole older; the
        // day holding the horizon is not (half of it is younger).
        let horizonDay = Self.today - 30
        let existing = [
            Self.daily(horizonDay - 2), Self.daily(horizonDay - 1), Self.daily(horizonDay), Self.defaultPartition,
        ]
        let plan = PartitionPlan(partitions: existing, now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(plan.partitionsToDrop == ["delivery_events_p\(horizonDay - 2)", "delivery_events_p\(horizonDay - 1)"])
        #expect(!plan.partitionsToDrop.contains("delivery_events_default"))
    }

    @Test func theConvertedLegacyPartitionGoesOnlyWhenItsNewestDayIsPastTheRetention() {
        let legacy = { (upperDay: Int) in
            EventPartition(name: "delivery_events_legacy", lowerBound: nil, upperBound: Double(upperDay) * Self.day, isDefault: false)
        }
        let young = PartitionPlan(partitions: [legacy(Self.today - 29)], now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(young.partitionsToDrop.isEmpty)
        let old = PartitionPlan(partitions: [legacy(Self.today - 30)], now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(old.partitionsToDrop == ["delivery_events_legacy"])
        // Days the legacy partition covers are not created again.
        let covering = PartitionPlan(partitions: [legacy(Self.today + 2)], now: Self.now, retentionSeconds: 30 * Self.day)
        #expect(covering.daysToCreate == Array((Self.today + 2)...(Self.today + 7)))
    }

    @Test func daysWithRowsWaitingInDefaultAreCreatedWithinTheRetentionAndTheWindowOnly() {
        let existing = (Self.today...(Self.today + 7)).map(Self.daily) + [Self.defaultPartition]
        let plan = PartitionPlan(
            partitions: existing, now: Self.now, retentionSeconds: 30 * Self.day,
            daysWithDefaultRows: [Self.today - 40, Self.today - 29, Self.today - 3, Self.today + 5, Self.today + 20])
        // -40 is past the retention (those rows are deleted from DEFAULT instead); +5 is covered; +20 is beyond
        // the window and waits in DEFAULT until its day comes within it.
        #expect(plan.daysToCreate == [Self.today - 29, Self.today - 3])
    }

    @Test func dayNumbersAreUTCDays() {
        #expect(PartitionPlan.day(of: 0) == 0)
        #expect(PartitionPlan.day(of: 86_399.999) == 0)
        #expect(PartitionPlan.day(of: 86_400) == 1)
        #expect(PartitionPlan.day(of: -1) == -1)
    }
}
