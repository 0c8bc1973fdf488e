/// The one place a duration setting's text becomes a `Duration`, and a `Duration` becomes text again for
/// messages. Accepted: a plain decimal number of seconds (`30`, `0.25`: the form every duration key always
/// took), or a number with one unit suffix, `ms`, `s`, `m` (or `min`), `h` or `d` (86,400 s), optionally
/// separated by spaces (`500ms`, `30s`, `1.5 m`, `2h`, `30d`), as in systemd's time spans (systemd.time(7)) but
/// with one unit only.
public enum DurationText {
    /// Parses `text`; `nil` for anything else (empty text, a negative or non-finite number, an unknown unit).
    public static func parse(_ text: String) -> Duration? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let numberEnd = trimmed.firstIndex { !($0.isASCII && ($0.isNumber || $0 == ".")) } ?? trimmed.endIndex
        guard numberEnd > trimmed.startIndex, let number = Double(trimmed[..<numberEnd]), number.isFinite,
            number >= 0
        else { return nil }
        let unit = trimmed[numberEnd...].trimmingCharacters(in: .whitespaces)
        let scale: Double
        switch unit {
        case "": scale = 1
        case "ms": scale = 0.001
        case "s", "sec": scale = 1
        case "m", "min": scale = 60
        case "h": scale = 3600
        case "d": scale = 86_400
        default: return nil
        }
        let seconds = number * scale
        // Beyond a century is certainly a typo, and would overflow the nanosecond arithmetic below.
        guard seconds <= 3_153_600_000 else { return nil }
        return .nanoseconds(Int64((seconds * 1e9).rounded()))
    }

    /// `duration` as short text for messages: `500 ms`, `30 s`, `1.5 s`, `120 s`, and whole days of at least
    /// two days as `30 d`.
    public static func describe(_ duration: Duration) -> String {
        let seconds = duration.inSeconds
        if seconds < 1 && seconds > 0 { return "\(format(seconds * 1000)) ms" }
        if seconds >= 172_800, seconds.truncatingRemainder(dividingBy: 86_400) == 0 { return "\(format(seconds / 86_400)) d" }
        return "\(format(seconds)) s"
    }

    /// `duration` as the shortest text ``parse(_:)`` reads back exactly, in the largest unit that writes it whole:
    /// `0`, `500ms`, `30s`, `2m`, `24h`, `30d` (days from two days up, as `24h` reads better than `1d`); what
    /// `pushizo-worker help` shows for defaults and ranges.
    public static func short(_ duration: Duration) -> String {
        guard duration != .zero else { return "0" }
        let (seconds, attoseconds) = duration.components
        guard attoseconds == 0 else { return "\(format(duration.inSeconds * 1000))ms" }
        if seconds >= 172_800, seconds % 86_400 == 0 { return "\(seconds / 86_400)d" }
        if seconds % 3600 == 0 { return "\(seconds / 3600)h" }
        if seconds % 60 == 0 { return "\(seconds / 60)m" }
        return "\(seconds)s"
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int64(value)) : String(value)
    }
}

import DeliveryCore
import Foundation
