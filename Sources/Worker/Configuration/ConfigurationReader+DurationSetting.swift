import Foundation

extension ConfigurationReader {
    /// A duration written with a unit, `30d`, `12h`, `90m`, `45s`, or as bare seconds (`3600`, `0.5`), or `nil`
    /// for `off` when `allowingOff` (also `0`). Unset gives `fallback`. Days are 86,400 s (UTC days).
    /// - Throws: ``ConfigurationError`` naming the key for anything else, or a value outside `range`.
    public func durationSetting(
        _ key: ConfigurationKey, default fallback: Duration?, in range: ClosedRange<Duration>, allowingOff: Bool = false
    ) throws -> Duration? {
        guard let raw = string(key) else { return fallback }
        let text = raw.trimmingCharacters(in: .whitespaces).lowercased()
        if allowingOff, text == "off" || text == "0" { return nil }
        let units: [(suffix: String, seconds: Double)] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]
        let unit = units.first { text.hasSuffix($0.suffix) }
        let number = unit.map { String(text.dropLast($0.suffix.count)) } ?? text
        let describe = { (range: ClosedRange<Duration>) in
            "\"\(raw)\" is not a duration in \(Self.describe(range.lowerBound))...\(Self.describe(range.upperBound))"
                + " (a number with d, h, m or s, or seconds\(allowingOff ? ", or off" : ""))"
        }
        guard let value = Double(number.trimmingCharacters(in: .whitespaces)), value.isFinite, value >= 0 else {
            throw ConfigurationError(key: key.name, problem: describe(range))
        }
        let duration = Duration.milliseconds(Int64((value * (unit?.seconds ?? 1) * 1000).rounded()))
        guard range.contains(duration) else { throw ConfigurationError(key: key.name, problem: describe(range)) }
        return duration
    }

    /// `86400 s` as `1d`, `3600 s` as `1h`, otherwise seconds.
    static func describe(_ duration: Duration) -> String {
        let seconds = duration.components.seconds
        if seconds % 86_400 == 0 { return "\(seconds / 86_400)d" }
        if seconds % 3_600 == 0 { return "\(seconds / 3_600)h" }
        return "\(seconds)s"
    }
}
