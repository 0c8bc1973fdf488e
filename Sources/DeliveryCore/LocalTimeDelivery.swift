import Foundation

/// The answer of ``LocalTimeDelivery/due(timeOfDay:subscriberZone:appDefaultZone:start:)``.
public struct LocalTimeDue: Sendable, Equatable {
    /// When the delivery becomes due: the first instant at or after the start whose wall clock in `zone` reads
    /// the time of day (gaps and overlaps as in docs/local-time-delivery.md). `nil` when the start cannot be
    /// placed (not finite, or more than ``LocalTimeDelivery/maximumStartSeconds`` from 1970): no local-time
    /// schedule, the delivery is due at once.
    public var dueAt: Date?
    /// The zone name used: the stored name, or `"UTC"`.
    public var zone: String
    /// Where `zone` came from (the same order as quiet hours: subscriber, app default, UTC).
    public var resolution: ZoneResolution
    /// Non-nil zone names that did not resolve, subscriber's first (as ``QuietHoursDecision/unknownZones``).
    public var unknownZones: [String]

    public init(dueAt: Date?, zone: String, resolution: ZoneResolution, unknownZones: [String]) {
        self.dueAt = dueAt
        self.zone = zone
        self.resolution = resolution
        self.unknownZones = unknownZones
    }
}

/// Local-time delivery: a message's `delivery_time_of_day` (`"HH:MM"`, local wall clock) makes each
/// subscriber's delivery due at the next such local time at or after the notification's start
/// (`coalesce(send_after, created_at)`), in the subscriber's zone (docs/local-time-delivery.md).
///
/// Pure: no I/O, no clock, independent of the process's zone. The worker's expansion computes the same rule
/// in PostgreSQL (`pushizo_local_due`, migration 0011), which is the authority for the queue; this function is
/// what `preview` shows and what the tests hold the SQL to.
public enum LocalTimeDelivery {
    /// Starts further than this from 1970, in seconds (about ±2,980 years), get no schedule (due at once);
    /// `pushizo_local_due` uses the same bound. Inside it no arithmetic can overflow (``WallClock``).
    public static let maximumStartSeconds: Double = 94_000_000_000

    /// Seconds before its queued local time a claimed delivery is still sent, in seconds: the claim compares
    /// `run_at` with the database's clock, the decision with the worker's, and hosts' clocks differ a little.
    /// Deferring for such a skew would only write a `deferred` event and claim the delivery again.
    public static let claimClockTolerance: Double = 60

    /// Parses `delivery_time_of_day`: exactly `HH:MM`, two digits each, 00:00 through 23:59 (no seconds, no
    /// `24:00`, no zone suffix, no spaces). `nil` for anything else.
    public static func parseTimeOfDay(_ text: String) -> LocalTime? {
        let bytes = Array(text.utf8)
        guard bytes.count == 5, bytes[2] == UInt8(ascii: ":") else { return nil }
        let digits = [bytes[0], bytes[1], bytes[3], bytes[4]]
        guard digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        let values = digits.map { Int($0 - UInt8(ascii: "0")) }
        return LocalTime(hour: values[0] * 10 + values[1], minute: values[2] * 10 + values[3])
    }

    /// The due instant of one subscriber's delivery.
    ///
    /// - Parameters:
    ///   - timeOfDay: the message's `delivery_time_of_day`.
    ///   - subscriberZone: `subscriptions.timezone`; resolved like quiet hours
    ///     (``QuietHours/resolveZone(subscriberZone:appDefaultZone:)``).
    ///   - appDefaultZone: `apps.default_timezone`.
    ///   - start: `coalesce(send_after, created_at)`.
    /// - Returns: the first instant `>= start` whose local wall clock reads `timeOfDay`, looking at the start's
    ///   local day and the next one. A time that does not exist that day (spring-forward gap, skipped day) is
    ///   moved to the first valid instant after the gap (the transition), as quiet hours move a window's end;
    ///   a time that exists twice (autumn overlap) is its first occurrence, or the second when the start lies
    ///   between them. Never fails: an unknown zone falls back, an unplaceable start gives `dueAt == nil`.
    public static func due(timeOfDay: LocalTime, subscriberZone: String?, appDefaultZone: String?, start: Date)
        -> LocalTimeDue
    {
        let (timeZone, zone, resolution, unknown) = QuietHours.resolveZone(
            subscriberZone: subscriberZone, appDefaultZone: appDefaultZone)
        return LocalTimeDue(
            dueAt: dueAt(timeOfDay: timeOfDay, in: timeZone, start: start), zone: zone, resolution: resolution,
            unknownZones: unknown)
    }

    /// The rule in one resolved zone; see ``due(timeOfDay:subscriberZone:appDefaultZone:start:)``.
    public static func dueAt(timeOfDay: LocalTime, in timeZone: TimeZone, start: Date) -> Date? {
        let seconds = start.timeIntervalSince1970
        guard seconds.isFinite, abs(seconds) < maximumStartSeconds else { return nil }
        let clock = WallClock(timeZone: timeZone)
        // Whole seconds: the first second at or after the start (tz transitions fall on whole seconds).
        let first = Int64(seconds.rounded(.up))
        let day = floorDivide(clock.local(first), 86_400)
        for candidateDay in [day, day + 1] {
            let target = candidateDay * 86_400 + Int64(timeOfDay.secondsOfDay)
            if let instant = clock.firstInstant(ofLocal: target, after: first - 1) {
                return Date(timeIntervalSince1970: Double(instant))
            }
        }
        // Not seen with real tzdata (the next day's time always exists or has a gap after the start).
        return nil
    }
}
