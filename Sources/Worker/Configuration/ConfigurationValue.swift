/// What a ``ConfigurationKey``'s value is, with its default and its accepted values: the one place they are
/// written. ``ConfigurationReader`` reads each value against them and `pushizo-worker help` prints them.
public enum ConfigurationValue: Sendable, Hashable {
    /// Free text (a URL, a path, a name); `default` is used when unset, if any.
    case text(default: String? = nil)
    /// A whole number in `range`; `default` is `nil` when it follows from other keys (``ConfigurationKey/derivedDefault``).
    case wholeNumber(default: Int?, in: ClosedRange<Int>)
    /// A duration in `range`, written as ``DurationText`` reads it (`500ms`, `30s`, `5m`, `2h`, `30d`, bare
    /// seconds); with `off`, `off` (or `0`) turns the setting off. `default` is `nil` when it follows from other keys.
    case duration(default: Duration?, in: ClosedRange<Duration>, off: Bool = false)
    /// `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`); the flag may stand alone, meaning `true`.
    case flag(default: Bool)
    /// One of `choices`, case-insensitive.
    case choice(default: String, among: [String])
    /// A comma-separated subset of `choices`, case-insensitive, never empty.
    case list(default: [String], among: [String])

    /// The default as `--help` shows it (durations in the shortest unit that writes them whole: `2m`, `1h`, `30d`).
    public var defaultText: String? {
        switch self {
        case .text(let value): value
        case .wholeNumber(let value, _): value.map(String.init)
        case .duration(let value, _, _): value.map(DurationText.short)
        case .flag(let value): String(value)
        case .choice(let value, _): value
        case .list(let value, _): value.joined(separator: ",")
        }
    }

    /// The accepted values as `--help` shows them (`1...10000`, `5s...24h`, `debug, info, ...`), `nil` for text.
    public var rangeText: String? {
        switch self {
        case .text, .flag: nil
        case .wholeNumber(_, let range): "\(range.lowerBound)...\(range.upperBound)"
        case .duration(_, let range, let off):
            "\(DurationText.short(range.lowerBound))...\(DurationText.short(range.upperBound))" + (off ? ", or off" : "")
        case .choice(_, let choices), .list(_, let choices): choices.joined(separator: ", ")
        }
    }

    /// Whether the default (when there is one) is an accepted value: every declaration keeps it so.
    public var defaultIsAccepted: Bool {
        switch self {
        case .text, .flag: true
        case .wholeNumber(let value, let range): value.map(range.contains) ?? true
        case .duration(let value, let range, _): value.map(range.contains) ?? true
        case .choice(let value, let choices): choices.contains(value)
        case .list(let value, let choices): !value.isEmpty && value.allSatisfy(choices.contains)
        }
    }
}
