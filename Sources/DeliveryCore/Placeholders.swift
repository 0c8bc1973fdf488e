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
///
/// Output is bounded: filling stops once the result reaches ``maximumOutputBytes`` bytes of UTF-8, cut on
/// a Unicode scalar boundary. So a template of thousands of placeholders filled from a long tag costs
/// O(template length + bound) time and O(bound) memory, not O(placeholders × tag length).
public enum Placeholders {
    /// The longest `default` text, in Unicode scalars.
    public static let maximumDefaultLength = 256

    /// The most UTF-8 bytes one filled text keeps: 4096, the largest payload any provider accepts (APNs
    /// 4096 bytes, "Sending notification requests to APNs"; FCM 4096, Firebase "About FCM messages"; Web
    /// Push 4096 encrypted, RFC 8030 §7.2). A text this long can never be sent whole (every payload has
    /// other bytes: keys, the msgId, FCM's counted overhead), so it is always shortened
    /// (``TextShortener``) to a prefix of fewer bytes, and filling beyond this point could change nothing
    /// that is sent. The cut falls on a scalar boundary (never in the middle of a UTF-8 sequence); it may
    /// split a grapheme cluster, but that last cluster is always beyond what shortening keeps.
    public static let maximumOutputBytes = 4096

    /// `text` with every well-formed placeholder replaced, at most `maximumBytes` bytes of UTF-8: the
    /// longest prefix of the complete result that ends on a scalar boundary and fits. Each name is looked
    /// up once per call, and a value (a tag, possibly much longer than the bound) is copied only as far as
    /// the output still has room.
    /// - Parameter maximumBytes: the output bound in UTF-8 bytes (``maximumOutputBytes`` for every provider).
    public static func fill(_ text: String, values: PlaceholderValues, maximumBytes: Int = maximumOutputBytes) -> String {
        var template = text
        return template.withUTF8 { bytes in
            var output = BoundedUTF8(limit: maximumBytes)
            guard bytes.count >= 4, containsOpeningBraces(bytes) else { return prefix(text, maximumBytes: maximumBytes) }
            var looked: [String: String?] = [:]
            var index = 0
            while index < bytes.count, !output.isFull {
                if bytes[index] == UInt8(ascii: "{"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "{"),
                   let (placeholder, end) = parse(bytes, from: index + 2)
                {
                    let value: String?
                    if let known = looked[placeholder.name] {
                        value = known
                    } else {
                        value = values.value(for: placeholder.name).flatMap { $0.isEmpty ? nil : $0 }
                        looked[placeholder.name] = value
                    }
                    output.append(value ?? placeholder.defaultValue ?? "")
                    index = end
                } else {
                    // Copy the run up to the next `{` (never the first byte of this run) in one step.
                    var next = index + 1
                    while next < bytes.count, bytes[next] != UInt8(ascii: "{") { next += 1 }
                    output.append(bytes[index..<next])
                    index = next
                }
            }
            return output.string
        }
    }

    private static func containsOpeningBraces(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 1
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "{"), bytes[index - 1] == UInt8(ascii: "{") { return true }
            index += 1
        }
        return false
    }

    /// The longest prefix of `text` within `maximumBytes` bytes of UTF-8 that ends on a scalar boundary
    /// (`text` itself when it fits).
    public static func prefix(_ text: String, maximumBytes: Int) -> String {
        guard text.utf8.count > maximumBytes else { return text }
        var copy = text
        return copy.withUTF8 { bytes in
            var output = BoundedUTF8(limit: maximumBytes)
            output.append(bytes[...])
            return output.string
        }
    }

    /// Parses after `{{`; returns the placeholder and the index just past `}}`, or `nil` when malformed.
    /// Works on UTF-8 bytes: every byte of the grammar is ASCII, and no ASCII byte occurs inside a
    /// multi-byte sequence.
    private static func parse(_ s: UnsafeBufferPointer<UInt8>, from start: Int) -> ((name: String, defaultValue: String?), Int)? {
        var i = start
        func skipSpaces() { while i < s.count, s[i] == UInt8(ascii: " ") || s[i] == UInt8(ascii: "\t") { i += 1 } }
        func expect(_ literal: StaticString) -> Bool {
            for byte in UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount) {
                guard i < s.count, s[i] == byte else { return false }
                i += 1
            }
            return true
        }
        skipSpaces()
        let nameStart = i
        while i < s.count, isNameByte(s[i]) { i += 1 }
        guard i > nameStart else { return nil }
        let name = String(decoding: s[nameStart..<i], as: UTF8.self)
        skipSpaces()
        var defaultValue: String?
        if i < s.count, s[i] == UInt8(ascii: "|") {
            i += 1
            skipSpaces()
            guard expect("default") else { return nil }
            skipSpaces()
            guard expect(":") else { return nil }
            skipSpaces()
            guard i < s.count, s[i] == UInt8(ascii: "\"") || s[i] == UInt8(ascii: "'") else { return nil }
            let quote = s[i]
            i += 1
            let textStart = i
            var scalars = 0
            while i < s.count, s[i] != quote {
                if !isContinuationByte(s[i]) {
                    if scalars == maximumDefaultLength { break }
                    scalars += 1
                }
                i += 1
            }
            guard i < s.count, s[i] == quote else { return nil }
            defaultValue = String(decoding: s[textStart..<i], as: UTF8.self)
            i += 1
            skipSpaces()
        }
        guard expect("}}") else { return nil }
        return ((name, defaultValue), i)
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
            true
        default:
            false
        }
    }

    /// `10xxxxxx`: the second, third or fourth byte of a UTF-8 sequence.
    static func isContinuationByte(_ byte: UInt8) -> Bool { byte & 0xC0 == 0x80 }
}

/// UTF-8 output that stops at a byte limit: the first append that does not fit entirely keeps only what
/// fits up to a scalar boundary, and the output is full from then on (so it stays a prefix of the
/// unbounded result).
private struct BoundedUTF8 {
    let limit: Int
    private(set) var bytes: [UInt8] = []
    private(set) var isFull = false

    init(limit: Int) { self.limit = max(0, limit) }

    mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { append($0[...]) }
    }

    mutating func append(_ slice: Slice<UnsafeBufferPointer<UInt8>>) {
        guard !isFull else { return }
        let room = limit - bytes.count
        if slice.count <= room {
            bytes.append(contentsOf: slice)
            isFull = bytes.count == limit
            return
        }
        var cut = slice.startIndex + room
        while cut > slice.startIndex, Placeholders.isContinuationByte(slice[cut]) { cut -= 1 }
        bytes.append(contentsOf: slice[slice.startIndex..<cut])
        isFull = true
    }

    var string: String { String(decoding: bytes, as: UTF8.self) }
}
