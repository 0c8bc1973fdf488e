import Foundation

extension ConfigurationReader {
    /// A duration setting that can be turned off: `off` (or `0`) gives `nil` when the key is declared with `off`;
    /// anything else is read by ``DurationText`` like every duration key (`30d`, `12h`, `90m`, `45s`, `500ms`, bare
    /// seconds), in the key's range. Unset gives the key's default.
    /// - Precondition: the key is declared ``ConfigurationValue/duration(default:in:off:)`` with a default.
    /// - Throws: ``ConfigurationError`` naming the key for text that is not a duration or lies outside the range.
    public func durationSetting(_ key: ConfigurationKey) throws -> Duration? {
        guard case .duration(let declared, let range, let allowingOff) = key.value, let fallback = declared else {
            preconditionFailure("\(key.name) is not declared a duration with a default")
        }
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
