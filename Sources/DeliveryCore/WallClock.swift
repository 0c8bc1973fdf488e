import Foundation

/// Local wall-clock arithmetic in one zone, on whole seconds since 1970 ("local seconds" = the wall-clock
/// reading written as if it were UTC). Only `TimeZone.secondsFromGMT(for:)` is asked, so gaps and overlaps
/// are found from the zone's real offsets and nothing depends on Calendar's own DST adjustment policy.
/// tz database transitions fall on whole seconds, so whole-second arithmetic loses nothing.
struct WallClock: Sendable {
    /// Instants and local times are kept within ±3000 years (about ±9.5e10 s): far inside Int64 and
    /// Double's exact-integer range, so no arithmetic below can overflow.
    static let limit: Double = 95_000_000_000

    let timeZone: TimeZone

    /// UTC offset in seconds at an instant.
    func offset(_ instant: Int64) -> Int64 {
        Int64(timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(instant))))
    }

    /// Local seconds at an instant.
    func local(_ instant: Int64) -> Int64 { instant + offset(instant) }

    /// The earliest instant after `after` whose wall clock reads `target` (local seconds):
    /// - the reading exists once: that instant;
    /// - it exists twice (autumn overlap): the first occurrence, or the second if the first is not after
    ///   `after` (the clock already went past it once and is reading the repeated hour again);
    /// - it does not exist (spring-forward gap, or a skipped day such as Pacific/Apia 2011-12-30): the first
    ///   valid instant after the gap, i.e. the transition itself.
    /// `nil` when no such instant is after `after` (a zone with several transitions in a day could do that;
    /// the caller then sends now rather than defer into the past). Bounded work: a few offset look-ups plus a
    /// binary search of at most 19 steps.
    func firstInstant(ofLocal target: Int64, after: Int64) -> Int64? {
        guard abs(Double(target)) < Self.limit else { return nil }
        // Every offset the zone uses within two days either side is a candidate; real offsets are within
        // ±16 hours and real zones change offset at most a few times a year, so these samples see them all.
        var offsets: Set<Int64> = []
        for hours: Int64 in [-48, -36, -24, -12, 0, 12, 24, 36, 48] {
            offsets.insert(offset(target + hours * 3600))
        }
        var occurrences: [Int64] = []
        for candidateOffset in offsets {
            let instant = target - candidateOffset
            if offset(instant) == candidateOffset { occurrences.append(instant) }
        }
        if !occurrences.isEmpty {
            return occurrences.filter { $0 > after }.min()
        }
        // A gap: find the first instant whose wall clock reads at or past `target`. At `low` the clock is
        // before it (any offset < +48 h), at `high` past it (any offset > -48 h).
        var low = target - 48 * 3600
        var high = target + 48 * 3600
        guard local(low) < target, local(high) >= target else { return nil }
        while high - low > 1 {
            let middle = low + (high - low) / 2
            if local(middle) >= target { high = middle } else { low = middle }
        }
        return high > after ? high : nil
    }
}
