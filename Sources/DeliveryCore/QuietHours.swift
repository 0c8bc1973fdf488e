import Foundation

/// Which time zone a quiet-hours decision used (docs/quiet-hours.md: subscriber's zone, else the app's
/// `default_timezone`, else UTC).
public enum ZoneResolution: Sendable, Equatable, Hashable {
    /// `subscriptions.timezone`, exactly as stored.
    case subscriber(String)
    /// `apps.default_timezone`, exactly as stored (the subscriber's was null or unknown).
    case appDefault(String)
    /// Neither name was set and known.
    case utc
}

/// The answer of ``QuietHours/decide(window:subscriberZone:appDefaultZone:at:spreadSeconds:spreadKey:)``.
public struct QuietHoursDecision: Sendable, Equatable {
    /// When to run the delivery again (window end plus spread), always later than the decision's instant;
    /// `nil` = send now (outside the window, or quiet hours off).
    public var deferUntil: Date?
    /// The window's end as an absolute instant, before spread (`nil` when `deferUntil` is).
    public var windowEnd: Date?
    /// The zone name the decision used: the stored name, or `"UTC"`.
    public var zone: String
    /// Where `zone` came from.
    public var resolution: ZoneResolution
    /// Non-nil zone names that did not resolve (empty text, `Etc/Unknown`, `Americas/Vancouver`), subscriber's
    /// first. The caller logs each name once per process and counts every occurrence.
    public var unknownZones: [String]

    public init(deferUntil: Date?, windowEnd: Date?, zone: String, resolution: ZoneResolution, unknownZones: [String]) {
        self.deferUntil = deferUntil
        self.windowEnd = windowEnd
        self.zone = zone
        self.resolution = resolution
        self.unknownZones = unknownZones
    }

    /// True when the delivery is deferred and the notification expires before it would be released:
    /// `expiresAt < deferUntil`. The worker then skips it with reason `expired` instead of deferring
    /// (docs/quiet-hours.md). Uses the worker's own rule that a notification is expired once `expiresAt < now`.
    public func expiresBeforeRelease(_ expiresAt: Date?) -> Bool {
        guard let deferUntil, let expiresAt else { return false }
        return expiresAt < deferUntil
    }
}

/// Quiet hours: whether a delivery falls inside the app's quiet window in the subscriber's local wall-clock
/// time, and if so until when it waits (docs/quiet-hours.md). Pure: no I/O, no clock, no
/// dependence on the process's own time zone; the tz database is read through Foundation's `TimeZone`.
/// Semantics, with the DST rules, are in docs/quiet-hours.md.
public enum QuietHours {
    /// The largest spread honoured, in seconds (one day); larger values are clamped to it.
    public static let maximumSpreadSeconds = 86_400

    /// Decides quiet hours for one attempt.
    ///
    /// - Parameters:
    ///   - window: the app's window; `nil` or empty (`start == end`) = off.
    ///   - subscriberZone: `subscriptions.timezone`, an IANA name such as `Asia/Kathmandu`.
    ///   - appDefaultZone: `apps.default_timezone`, used when the subscriber's is null or unknown.
    ///   - instant: the attempt's time.
    ///   - spreadSeconds: deferred deliveries are released over `[end, end + spreadSeconds)` seconds,
    ///     `0` (the default) = all at the window's end; clamped to 0...``maximumSpreadSeconds``.
    ///   - spreadKey: the subscription id; the same id always gets the same offset (FNV-1a of its 16 bytes
    ///     modulo `spreadSeconds`). `nil` = no spread.
    /// - Returns: the decision; it never fails: unknown zones fall back and are listed in `unknownZones`, and
    ///   an instant or zone the arithmetic cannot place (non-finite or beyond ±3000 years) sends now.
    public static func decide(
        window: QuietHoursWindow?,
        subscriberZone: String?,
        appDefaultZone: String?,
        at instant: Date,
        spreadSeconds: Int = 0,
        spreadKey: UUID? = nil
    ) -> QuietHoursDecision {
        let (timeZone, zone, resolution, unknown) = resolveZone(subscriberZone: subscriberZone, appDefaultZone: appDefaultZone)
        var decision = QuietHoursDecision(deferUntil: nil, windowEnd: nil, zone: zone, resolution: resolution, unknownZones: unknown)
        guard let window, !window.isEmpty else { return decision }
        let clock = WallClock(timeZone: timeZone)
        let seconds = instant.timeIntervalSince1970
        guard seconds.isFinite, abs(seconds) < WallClock.limit else { return decision }
        let now = Int64(seconds.rounded(.down))

        // The "inside" test uses the real local wall clock at the instant.
        let local = clock.local(now)
        let day = floorDivide(local, 86_400)
        let timeOfDay = Int(local - day * 86_400)
        guard window.contains(secondsOfDay: timeOfDay) else { return decision }

        // The end is today, unless the window wraps and we are in its evening part.
        let endDay = window.wrapsMidnight && timeOfDay >= window.start.secondsOfDay ? day + 1 : day
        let target = endDay * 86_400 + Int64(window.end.secondsOfDay)
        guard let end = clock.firstInstant(ofLocal: target, after: now) else { return decision }

        let spread = min(max(spreadSeconds, 0), maximumSpreadSeconds)
        var offset: Int64 = 0
        if spread > 0, let spreadKey { offset = Int64(fnv1a(spreadKey) % UInt64(spread)) }
        decision.windowEnd = Date(timeIntervalSince1970: Double(end))
        decision.deferUntil = Date(timeIntervalSince1970: Double(end + offset))
        return decision
    }

    /// The zone to use and the names that failed: subscriber's, else app default's, else UTC.
    /// A name resolves when `TimeZone(identifier:)` knows it (Foundation reads the system tz database; an
    /// unknown name gives `nil`). Names are used exactly as stored: no trimming, no case folding.
    public static func resolveZone(subscriberZone: String?, appDefaultZone: String?) -> (timeZone: TimeZone, zone: String, resolution: ZoneResolution, unknownZones: [String]) {
        var unknown: [String] = []
        if let name = subscriberZone {
            if let tz = timeZone(named: name) { return (tz, name, .subscriber(name), unknown) }
            unknown.append(name)
        }
        if let name = appDefaultZone {
            if let tz = timeZone(named: name) { return (tz, name, .appDefault(name), unknown) }
            unknown.append(name)
        }
        return (TimeZone.gmt, "UTC", .utc, unknown)
    }

    private static func timeZone(named name: String) -> TimeZone? {
        // Bound the text handed to Foundation; real IANA names are far shorter (longest ~32 bytes).
        guard !name.isEmpty, name.utf8.count <= 64 else { return nil }
        return TimeZone(identifier: name)
    }

    /// FNV-1a, 64-bit, over the UUID's 16 bytes in order: stable across processes, hosts and Swift versions
    /// (unlike `Hasher`, which is seeded per process). Source: Fowler–Noll–Vo, draft-eastlake-fnv.
    static func fnv1a(_ id: UUID) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        withUnsafeBytes(of: id.uuid) { bytes in
            for byte in bytes {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
        }
        return hash
    }
}

/// Floor division (Swift's `/` truncates toward zero, wrong for instants before 1970).
func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}
