/// One partition of `delivery_events` as the catalog describes it (`pushizo_event_partitions()`, migration 0006).
public struct EventPartition: Sendable, Equatable {
    public var name: String
    /// Inclusive lower bound, seconds since 1970 (UTC); `nil` = `MINVALUE` (the converted legacy table).
    public var lowerBound: Double?
    /// Exclusive upper bound, seconds since 1970 (UTC); `nil` only for the DEFAULT partition.
    public var upperBound: Double?
    public var isDefault: Bool

    public init(name: String, lowerBound: Double?, upperBound: Double?, isDefault: Bool) {
        self.name = name
        self.lowerBound = lowerBound
        self.upperBound = upperBound
        self.isDefault = isDefault
    }
}

/// What the maintenance does to the partitions of `delivery_events`, decided without I/O from the catalog's
/// partitions, the database's clock and the retention (docs/data-lifecycle.md):
///
/// - **create** one partition per UTC day from today to ``daysAhead`` days ahead that no partition covers yet,
///   and for each earlier day still within the retention whose events wait in the DEFAULT partition (written
///   while no partition covered them; creating the day's partition moves them in);
/// - **drop** every range partition whose upper bound is at or before `now - retention`: every event in it is
///   older than the retention. The DEFAULT partition is never dropped.
///
/// A day is a UTC day number (days since 1970-01-01), so partition bounds never depend on a time zone.
public struct PartitionPlan: Sendable, Equatable {
    /// Days created ahead of today: inserts never lack a partition while maintenance runs at least this often.
    public static let daysAhead = 7
    static let secondsPerDay = 86_400.0

    /// UTC day numbers to create, oldest first.
    public var daysToCreate: [Int]
    /// Partition names to drop, oldest first.
    public var partitionsToDrop: [String]

    /// - Parameters:
    ///   - partitions: the current partitions.
    ///   - now: the database's `now()`, seconds since 1970.
    ///   - retentionSeconds: events older than this may go.
    ///   - daysWithDefaultRows: UTC days that have rows in the DEFAULT partition.
    public init(
        partitions: [EventPartition], now: Double, retentionSeconds: Double, daysWithDefaultRows: [Int] = [],
        daysAhead: Int = PartitionPlan.daysAhead
    ) {
        let horizon = now - retentionSeconds
        let ranges = partitions.filter { !$0.isDefault }
        let dropped = ranges.filter { ($0.upperBound ?? .infinity) <= horizon }.map(\.name)
        let kept = ranges.filter { !dropped.contains($0.name) }
        let today = Self.day(of: now)
        let wanted = Set(Array(today...(today + daysAhead)) + daysWithDefaultRows.filter { $0 <= today + daysAhead })
        daysToCreate = wanted.sorted().filter { day in
            let start = Double(day) * Self.secondsPerDay
            let end = start + Self.secondsPerDay
            // Already over: its partition would be dropped at once (its rows are removed from DEFAULT instead).
            guard end > horizon else { return false }
            return !kept.contains { ($0.lowerBound ?? -.infinity) < end && ($0.upperBound ?? .infinity) > start }
        }
        partitionsToDrop = dropped
    }

    /// The UTC day number of an instant.
    public static func day(of seconds: Double) -> Int {
        Int((seconds / secondsPerDay).rounded(.down))
    }
}
