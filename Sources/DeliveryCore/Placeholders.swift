/// The values placeholders are filled from: the user's tags first, then the subscription's own fields
/// (issue 3 item 3).
public struct PlaceholderValues: Sendable, Hashable {
    /// `users.tags` (any JSON values; strings are used as-is, numbers and booleans as their JSON text).
    public var tags: [String: JSONValue]
    /// `subscriptions.language`, `country`, `timezone`, reachable as `{{ language }}` etc. when no tag of
    /// that name exists.
    public var language: String?
    public var country: String?
    public var timezone: String?

    public init(tags: [String: JSONValue] = [:], language: String? = nil, country: String? = nil, timezone: String? = nil) {
        self.tags = tags
        self.language = language
        self.country = country
        self.timezone = timezone
    }

    /// The text for `name`, or `nil` when neither a tag nor a subscription field has it.
    public func value(for name: String) -> String? {
        if let tag = tags[name] {
            switch tag {
            case .null: break
            case .string(let text): return text
            case .bool(let flag): return flag ? "true" : "false"
            default: return tag.jsonText
            }
        }
        switch name {
        case "language": return language
        case "country": return country
        case "timezone": return timezone
        default: return nil
        }
    }
}

/// Fills `{{ name }}` and `{{ name | default: "friend" }}` placeholders (issue 3 item 3). Nothing is
/// evaluated: a name is looked up, never interpreted.
///
/// Grammar (spaces optional everywhere inside the braces):
/// `"{{" name [ "|" "default" ":" quoted ] "}}"`, where `name` is ASCII letters, digits, `_`, `-`, `.`
/// and `quoted` is `"..."` or `'...'` without escapes. Anything that does not match (unbalanced braces,
/// another filter, an unquoted default) stays exactly as typed. A missing or empty value uses the default,
/// or becomes empty text when there is none (Liquid's `default` semantics). A quoted default longer than
/// ``maximumDefaultLength`` Unicode scalars does not match either: the bound keeps filling linear in the
/// text's length (an unterminated quote after every `{{` would otherwise rescan to the end each time).
public enum Placeholders {
    /// The longest `default` text, in Unicode scalars.
    public static let maximumDefaultLength = 256

    /// `text` with every well-formed placeholder replaced.
    public static func fill(_ text: String, values: PlaceholderValues) -> String {
        let scalars = Array(text.unicodeScalars)
        guard scalars.count >= 4, text.contains("{{") else { return text }
        var output = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            if scalars[index] == "{", index + 1 < scalars.count, scalars[index + 1] == "{",
               let (placeholder, end) = parse(scalars, from: index + 2)
            {
                let value = values.value(for: placeholder.name).flatMap { $0.isEmpty ? nil : $0 }
                output.append(contentsOf: (value ?? placeholder.defaultValue ?? "").unicodeScalars)
                index = end
            } else {
                output.append(scalars[index])
                index += 1
            }
        }
        return String(output)
    }

    /// Parses after `{{`; returns the placeholder and the index just past `}}`, or `nil` when malformed.
    private static func parse(_ s: [Unicode.Scalar], from start: Int) -> ((name: String, defaultValue: String?), Int)? {
        var i = start
        func skipSpaces() { while i < s.count, s[i] == " " || s[i] == "\t" { i += 1 } }
        func expect(_ literal: String) -> Bool {
            for scalar in literal.unicodeScalars {
                guard i < s.count, s[i] == scalar else { return false }
                i += 1
            }
            return true
        }
        skipSpaces()
        var name = String.UnicodeScalarView()
        while i < s.count, s[i].isASCII, s[i].properties.isAlphabetic || ("0"..."9").contains(s[i]) || s[i] == "_" || s[i] == "-" || s[i] == "." {
            name.append(s[i])
            i += 1
        }
        guard !name.isEmpty else { return nil }
        skipSpaces()
        var defaultValue: String?
        if i < s.count, s[i] == "|" {
            i += 1
            skipSpaces()
            guard expect("default") else { return nil }
            skipSpaces()
            guard expect(":") else { return nil }
            skipSpaces()
            guard i < s.count, s[i] == "\"" || s[i] == "'" else { return nil }
            let quote = s[i]
            i += 1
            let textStart = i
            while i < s.count, s[i] != quote, i - textStart < maximumDefaultLength { i += 1 }
            let text = String.UnicodeScalarView(s[textStart..<i])
            guard i < s.count, s[i] == quote else { return nil }
            i += 1
            defaultValue = String(text)
            skipSpaces()
        }
        guard expect("}}") else { return nil }
        return ((String(name), defaultValue), i)
    }
}
