/// A wall-clock time of day, second precision, as PostgreSQL's `time` column holds it (no date, no zone).
public struct LocalTime: Sendable, Equatable, Hashable, Comparable, CustomStringConvertible {
    /// 0...23.
    public var hour: Int
    /// 0...59.
    public var minute: Int
    /// 0...59 (no leap seconds: tzdata and Foundation's calendar have none either).
    public var second: Int

    /// `nil` when a component is out of range (24:00 is not a `LocalTime`; see ``parse(_:)``).
    public init?(hour: Int, minute: Int, second: Int = 0) {
        guard (0...23).contains(hour), (0...59).contains(minute), (0...59).contains(second) else { return nil }
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// Seconds since local midnight, 0..<86400.
    public var secondsOfDay: Int { hour * 3600 + minute * 60 + second }

    /// `HH:MM:SS`, PostgreSQL's own output form.
    public var description: String {
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(two(hour)):\(two(minute)):\(two(second))"
    }

    public static func < (lhs: LocalTime, rhs: LocalTime) -> Bool { lhs.secondsOfDay < rhs.secondsOfDay }

    /// Parses PostgreSQL `time` text: `HH:MM`, `HH:MM:SS` or `HH:MM:SS.ffffff` (1–6 fraction digits,
    /// dropped: the window has second precision). `24:00[:00]`, which PostgreSQL stores for "end of day",
    /// reads as `00:00:00` (midnight is both). Anything else (one-digit hour, a zone suffix such as
    /// `22:00+02`, spaces, `23:59:60`) returns `nil`. Source: PostgreSQL docs, "Date/Time Types", 8.5.1.2.
    public static func parse(_ text: String) -> LocalTime? {
        let bytes = Array(text.utf8)
        guard bytes.count <= 15 else { return nil }
        var i = 0
        func twoDigits() -> Int? {
            guard i + 1 < bytes.count,
                  (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]),
                  (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i + 1]) else { return nil }
            defer { i += 2 }
            return Int(bytes[i] - UInt8(ascii: "0")) * 10 + Int(bytes[i + 1] - UInt8(ascii: "0"))
        }
        func colon() -> Bool {
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return false }
            i += 1
            return true
        }
        guard let hour = twoDigits(), colon(), let minute = twoDigits() else { return nil }
        var second = 0
        if i < bytes.count {
            guard colon(), let s = twoDigits() else { return nil }
            second = s
            if i < bytes.count {
                guard bytes[i] == UInt8(ascii: ".") else { return nil }
                i += 1
                let fractionStart = i
                while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) { i += 1 }
                guard i == bytes.count, (1...6).contains(i - fractionStart) else { return nil }
            }
        }
        if hour == 24 {
            // PostgreSQL allows exactly 24:00:00 (any fraction must be zero as well, but it never prints one).
            guard minute == 0, second == 0 else { return nil }
            return LocalTime(hour: 0, minute: 0, second: 0)
        }
        return LocalTime(hour: hour, minute: minute, second: second)
    }
}

/// Why an app's quiet-hours columns cannot be used. The caller decides what to do (the recommended reading
/// is "quiet hours off for this app, logged once"); nothing here crashes on it.
public struct QuietHoursError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// One bound is set and the other is null.
        public static let missingBound = Code("missingBound")
        /// A bound is not PostgreSQL `time` text (see ``LocalTime/parse(_:)``).
        public static let invalidTime = Code("invalidTime")
        public var description: String { name }
    }

    public var code: Code
    /// The column: `quiet_hours_start` or `quiet_hours_end`.
    public var field: String
    /// What is wrong, in words.
    public var message: String

    public init(code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    /// `` `field`: message ``.
    public var description: String { "`\(field)`: \(message)" }
}

/// An app's quiet-hours window: local wall-clock `start..<end` in the subscriber's zone (docs/quiet-hours.md).
///
/// - `start < end`: a window within one day, e.g. 00:00–08:00.
/// - `start > end`: the window wraps midnight, e.g. 22:00–08:00 is 22:00..<24:00 plus 00:00..<08:00.
/// - `start == end`: an empty window, i.e. quiet hours off. The window is half-open, so `t..<t` holds no
///   time; reading it as "all day" instead would defer every delivery to a window end that is itself inside
///   the window, so nothing would ever be sent (until its ttl expired). See docs/quiet-hours.md.
public struct QuietHoursWindow: Sendable, Equatable, Hashable {
    /// First quiet second (inclusive).
    public var start: LocalTime
    /// First second that is no longer quiet (exclusive); deferred deliveries are released here.
    public var end: LocalTime

    public init(start: LocalTime, end: LocalTime) {
        self.start = start
        self.end = end
    }

    /// From the `apps.quiet_hours_start` / `apps.quiet_hours_end` columns as PostgreSQL `time` text
    /// (`"22:00:00"`, `"22:00"`).
    ///
    /// - Returns: `nil` when both are null (quiet hours off).
    /// - Throws: `QuietHoursError` with code `.missingBound` naming the null column when only one is set, or
    ///   `.invalidTime` naming the column whose text is not a time of day.
    public init?(start: String?, end: String?) throws(QuietHoursError) {
        switch (start, end) {
        case (nil, nil):
            return nil
        case (nil, _):
            throw QuietHoursError(code: .missingBound, field: "quiet_hours_start", message: "is null while quiet_hours_end is set; set both or neither")
        case (_, nil):
            throw QuietHoursError(code: .missingBound, field: "quiet_hours_end", message: "is null while quiet_hours_start is set; set both or neither")
        case (let startText?, let endText?):
            guard let s = LocalTime.parse(startText) else {
                throw QuietHoursError(code: .invalidTime, field: "quiet_hours_start", message: "\(Self.quoted(startText)) is not a time of day like 22:00:00")
            }
            guard let e = LocalTime.parse(endText) else {
                throw QuietHoursError(code: .invalidTime, field: "quiet_hours_end", message: "\(Self.quoted(endText)) is not a time of day like 08:00:00")
            }
            self.init(start: s, end: e)
        }
    }

    /// True when the window holds no time at all (`start == end`): quiet hours are off.
    public var isEmpty: Bool { start == end }

    /// True when `start > end`.
    public var wrapsMidnight: Bool { start > end }

    /// Whether a local time of day (seconds since local midnight, 0..<86400) is quiet: `start <= t < end`,
    /// or for a wrapping window `t >= start || t < end`.
    public func contains(secondsOfDay t: Int) -> Bool {
        let s = start.secondsOfDay, e = end.secondsOfDay
        if s < e { return s <= t && t < e }
        if s > e { return t >= s || t < e }
        return false
    }

    /// Bad text quoted for an error message, cut short so a hostile column cannot flood a log line.
    private static func quoted(_ text: String) -> String {
        let limit = 32
        let shown = text.count > limit ? String(text.prefix(limit)) + "…" : text
        return "\"\(shown)\""
    }
}
