import Foundation

extension ConfigurationReader {
    /// A duration setting that can be turned off: `off` (or `0`) gives `nil` when `allowingOff`; anything else is
    /// read by ``DurationText`` like every duration key (`30d`, `12h`, `90m`, `45s`, `500ms`, bare seconds).
    /// Unset gives `fallback`.
    /// - Throws: ``ConfigurationError`` naming the key for text that is not a duration or lies outside `range`.
    public func durationSetting(
        _ key: ConfigurationKey, default fallback: Duration?, in range: ClosedRange<Duration>, allowingOff: Bool = false
    ) throws -> Duration? {
        guard let raw = string(key) else { return fallback }
        let text = raw.trimmingCharacters(in: .whitespaces).lowercased()
        if allowingOff, text == "off" || text == "0" { return nil }
        guard let value = DurationText.parse(text), range.contains(value) else {
            throw ConfigurationError(
                key: key.name,
                problem: "\"\(raw)\" is not a duration in \(DurationText.describe(range.lowerBound))..."
                    + "\(DurationText.describe(range.upperBound)) (seconds, or a number with ms, s, m, h or d: 500ms, 30s, 5m, 30d"
                    + (allowingOff ? "; or off)" : ")"))
        }
        return value
    }
}
