import Foundation

/// Counts and instants as the commands print them for people (`status`, the operator commands, `check`), one way
/// everywhere. JSON output keeps its own forms (plain numbers, ISO 8601).
public enum TerminalWords {
    /// `1,234,567`.
    public static func grouped(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { result.append(",") }
            result.append(character)
        }
        return (value < 0 ? "-" : "") + result
    }

    /// `1 delivery`, `0 deliveries`, `1,234 deliveries`: the count grouped, the noun agreeing with it.
    public static func count(_ value: Int, _ singular: String, _ plural: String) -> String {
        grouped(Int64(value)) + " " + (value == 1 ? singular : plural)
    }

    /// `2026-12-01 02:40:12 UTC`.
    public static func instant(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(
            format: "%04d-%02d-%02d %02d:%02d:%02d UTC", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0,
            parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }
}
