/// Text escaping and number formatting of the exposition format.
enum Exposition {
    /// `# HELP` text: backslash and line feed escaped.
    static func escapeHelp(_ text: String) -> String {
        guard text.contains(where: { $0 == "\\" || $0 == "\n" }) else { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// A label value: backslash, double quote and line feed escaped.
    static func escapeLabelValue(_ text: String) -> String {
        guard text.contains(where: { $0 == "\\" || $0 == "\n" || $0 == "\"" }) else { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\"": escaped += "\\\""
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// A sample value as Go's `strconv.ParseFloat` reads it: `NaN`, `+Inf`, `-Inf`, whole numbers without a
    /// fraction, others in Swift's shortest round-trip form (`0.005`, `1e-05`).
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// `{a="x",b="y"}` (empty when there are no labels), with `extra` (e.g. `le`) appended.
    static func labels(_ names: [String], _ values: LabelValues, extra: (String, String)? = nil) -> String {
        if names.isEmpty && extra == nil { return "" }
        var text = "{"
        for index in 0..<names.count {
            if index > 0 { text += "," }
            text += "\(names[index])=\"\(escapeLabelValue(values[index]))\""
        }
        if let extra {
            if !names.isEmpty { text += "," }
            text += "\(extra.0)=\"\(escapeLabelValue(extra.1))\""
        }
        return text + "}"
    }

    static func sorted<Value>(_ series: [LabelValues: Value]) -> [(LabelValues, Value)] {
        series.map { ($0.key, $0.value) }.sorted { $0.0.values.lexicographicallyPrecedes($1.0.values) }
    }
}
