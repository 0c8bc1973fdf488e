/// The values placeholders are filled from: the user's tags first, then the subscription's own fields
/// (docs/wire-formats.md).
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

/// Why a text is not a valid template: it would reach a device as raw template text, so the message fails
/// with `invalid_message` instead (``LocalizedText/render(_:subscriberLanguage:appDefaultLanguage:placeholderValues:)``
/// names the field).
public struct TemplateError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong, quoting the offending placeholder (at most ``Placeholders/maximumQuotedBytes`` of it),
    /// e.g. ``"unknown filter `shout` in `{{ name | shout }}`"``.
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Fills placeholders written in a subset of Liquid (Shopify's template language): output tags with
/// filters, no logic. Nothing is evaluated beyond looking a name up and applying the filters below.
///
/// Grammar (spaces and tabs optional between tokens):
/// ```
/// placeholder = "{{" ( name | quoted ) *( "|" filter [ ":" argument *( "," argument ) ] ) "}}"
/// name        = 1*( ALPHA / DIGIT / "_" / "-" / "." / non-ASCII )
/// argument    = quoted / integer          ; quoted = "..." or '...' without escapes
/// ```
/// A missing name, a `null` tag and empty text render as empty text (Liquid's `nil`). The filters, with
/// Liquid's semantics (its "Filters" reference), applied left to right:
/// - `upcase`, `downcase`: every letter (Unicode case mapping). `capitalize`: the first character upper
///   case, the rest lower case.
/// - `strip`, `lstrip`, `rstrip`: ASCII whitespace (space, tab, LF, VT, FF, CR) and NUL from both ends /
///   the start / the end.
/// - `default: "x"`: `x` when the value is missing, empty, or the boolean `false`.
/// - `truncate: n` / `truncate: n, "…"`: when longer than `n` characters, the first `n - length(ellipsis)`
///   characters and the ellipsis (default `...`, `n` defaults to 50). Characters are grapheme clusters,
///   not Liquid's code points, so an emoji or an accented letter is never split.
/// - `append: "x"`, `prepend: "x"`, `remove: "x"`, `remove_first: "x"`, `replace: "a", "b"`,
///   `replace_first: "a", "b"`: exact (byte-wise) matching, as Liquid's.
///
/// `escape` and Liquid's other HTML and array filters are not supported: push texts are plain text, so
/// `&amp;` would reach the user as is. Values are inserted as they are and never rendered again.
///
/// Anything else that still looks like a template is refused with ``TemplateError`` rather than sent:
/// an unterminated `{{`, a malformed placeholder, an unknown filter or wrong arguments, and any Liquid
/// tag (`{%`). A `{` directly before `{{` is ordinary text (`{{{ name }}}` gives `{Ann}`), and `}}`
/// alone is ordinary text.
///
/// Bounds: the output stops at ``maximumOutputBytes`` bytes of UTF-8 (cut on a Unicode scalar boundary);
/// every value a filter reads or writes is cut there too; a quoted argument has at most
/// ``maximumDefaultLength`` scalars; and all filters together process at most ``maximumFilterBytes``.
/// Each distinct placeholder is evaluated once per text. So filling costs O(template length + bounds)
/// time whatever the template and tags; the whole template is still read to the end, so an error after
/// the output bound is reported too.
public enum Placeholders {
    /// The longest quoted argument (`default: "..."` and every other filter's), in Unicode scalars.
    public static let maximumDefaultLength = 256

    /// The most UTF-8 bytes one filled text keeps: 4096, the largest payload any provider accepts (APNs
    /// 4096 bytes, "Sending notification requests to APNs"; FCM 4096, Firebase "About FCM messages"; Web
    /// Push 4096 encrypted, RFC 8030 §7.2). A text this long can never be sent whole (every payload has
    /// other bytes: keys, the msgId, FCM's counted overhead), so it is always shortened
    /// (``TextShortener``) to a prefix of fewer bytes, and filling beyond this point could change nothing
    /// that is sent. The cut falls on a scalar boundary (never in the middle of a UTF-8 sequence); it may
    /// split a grapheme cluster, but that last cluster is always beyond what shortening keeps.
    public static let maximumOutputBytes = 4096

    /// The most bytes all filters of one text may read and write together: 262,144 (64 values of the
    /// full 4096 bytes). Real templates use a few hundred; the bound keeps a template of thousands of
    /// distinct filtered placeholders linear.
    public static let maximumFilterBytes = 262_144

    /// How much of a placeholder an error message quotes, in bytes.
    public static let maximumQuotedBytes = 64

    /// The supported filter names, in the order the documentation lists them.
    public static let filterNames = ["upcase", "downcase", "capitalize", "strip", "lstrip", "rstrip", "default", "truncate",
                                     "append", "prepend", "remove", "remove_first", "replace", "replace_first"]

    /// `text` with every placeholder replaced, at most `maximumBytes` bytes of UTF-8: the longest prefix of
    /// the complete result that ends on a scalar boundary and fits.
    /// - Parameter maximumBytes: the output bound in UTF-8 bytes (``maximumOutputBytes`` for every provider).
    /// - Throws: ``TemplateError`` when `text` is not a valid template (see the type's documentation).
    public static func fill(_ text: String, values: PlaceholderValues, maximumBytes: Int = maximumOutputBytes)
        throws(TemplateError) -> String
    {
        guard text.utf8.count >= 2, text.utf8.contains(UInt8(ascii: "{")) else {
            return prefix(text, maximumBytes: maximumBytes)
        }
        var template = text
        let result: Result<String, TemplateError> = template.withUTF8 { bytes in
            var filler = Filler(bytes: bytes, values: values, output: BoundedUTF8(limit: maximumBytes))
            do throws(TemplateError) {
                try filler.run()
                return .success(filler.output.string)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
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

    /// `10xxxxxx`: the second, third or fourth byte of a UTF-8 sequence.
    static func isContinuationByte(_ byte: UInt8) -> Bool { byte & 0xC0 == 0x80 }
}

/// One parsed placeholder: a base (a name or quoted text) and its filters.
private struct Expression {
    enum Base { case name(String), literal(String) }
    enum Argument { case text(String), integer(Int) }
    var base: Base
    var filters: [(name: String, arguments: [Argument])] = []
}

/// The value flowing through a filter chain: its text, and whether Liquid would call it blank for
/// `default` (missing, `nil`, `false`, or empty).
private struct FilterValue {
    var text: String
    var blank: Bool
}

/// The single pass over a template's UTF-8 bytes. Every byte of the grammar is ASCII, and no ASCII byte
/// occurs inside a multi-byte sequence, so byte positions are safe to slice at.
private struct Filler {
    let bytes: UnsafeBufferPointer<UInt8>
    let values: PlaceholderValues
    var output: BoundedUTF8
    var evaluated: [String: String] = [:]
    var filterBytes = 0
    var i = 0

    mutating func run() throws(TemplateError) {
        while i < bytes.count {
            let byte = bytes[i]
            if byte == UInt8(ascii: "{"), i + 1 < bytes.count {
                let next = bytes[i + 1]
                if next == UInt8(ascii: "%") {
                    throw TemplateError("Liquid tags are not supported (only `{{ ... }}` placeholders) in \(quote(from: i))")
                }
                if next == UInt8(ascii: "{"), !(i + 2 < bytes.count && bytes[i + 2] == UInt8(ascii: "{")) {
                    let start = i
                    i += 2
                    let sourceStart = i
                    let expression = try parse(start: start)
                    let source = String(decoding: bytes[sourceStart..<(i - 2)], as: UTF8.self)
                    if !output.isFull {
                        if let known = evaluated[source] {
                            output.append(known)
                        } else {
                            let text = try evaluate(expression, start: start)
                            evaluated[source] = text
                            output.append(text)
                        }
                    }
                    continue
                }
            }
            // Copy the run up to the next `{` (never the first byte of this run) in one step.
            var end = i + 1
            while end < bytes.count, bytes[end] != UInt8(ascii: "{") { end += 1 }
            output.append(bytes[i..<end])
            i = end
        }
    }

    /// Up to ``Placeholders/maximumQuotedBytes`` of the template from `start`, cut on a scalar boundary.
    func quote(from start: Int) -> String {
        var end = min(bytes.count, start + Placeholders.maximumQuotedBytes)
        while end < bytes.count, end > start, Placeholders.isContinuationByte(bytes[end]) { end -= 1 }
        let more = end < bytes.count ? "…" : ""
        return "`" + String(decoding: bytes[start..<end], as: UTF8.self) + more + "`"
    }

    mutating func skipSpaces() { while i < bytes.count, bytes[i] == UInt8(ascii: " ") || bytes[i] == UInt8(ascii: "\t") { i += 1 } }

    /// ASCII letters, digits, `_`, `-`, `.`, and any non-ASCII scalar (tag keys are any text: `şehir`).
    func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x80...0xFF: true
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
            true
        default:
            false
        }
    }

    /// Parses after `{{` up to and including `}}`.
    mutating func parse(start: Int) throws(TemplateError) -> Expression {
        func fail(_ why: String) -> TemplateError {
            // An unterminated `{{` says so, whatever came before the end.
            if !hasClosingBraces(from: start + 2) { return TemplateError("unterminated `{{` (no `}}`) in \(quote(from: start))") }
            return TemplateError("\(why) in \(quote(from: start))")
        }
        skipSpaces()
        var expression: Expression
        if let literal = try quoted(start: start) {
            expression = Expression(base: .literal(literal))
        } else if let name = name() {
            expression = Expression(base: .name(name))
        } else {
            throw fail("expected a name or quoted text after `{{`")
        }
        skipSpaces()
        while i < bytes.count, bytes[i] == UInt8(ascii: "|") {
            i += 1
            skipSpaces()
            guard let filter = name() else { throw fail("expected a filter name after `|`") }
            guard Placeholders.filterNames.contains(filter) else {
                throw fail("unknown filter `\(filter)` (supported: \(Placeholders.filterNames.joined(separator: ", ")))")
            }
            skipSpaces()
            var arguments: [Expression.Argument] = []
            if i < bytes.count, bytes[i] == UInt8(ascii: ":") {
                repeat {
                    i += 1
                    skipSpaces()
                    if let text = try quoted(start: start) {
                        arguments.append(.text(text))
                    } else if let number = integer() {
                        arguments.append(.integer(number))
                    } else {
                        throw fail("filter `\(filter)`: an argument must be quoted text or a whole number")
                    }
                    skipSpaces()
                } while i < bytes.count && bytes[i] == UInt8(ascii: ",")
            }
            if let problem = Self.checkArguments(filter, arguments) { throw fail("filter `\(filter)` \(problem)") }
            expression.filters.append((filter, arguments))
        }
        guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "}"), bytes[i + 1] == UInt8(ascii: "}") else {
            throw fail("expected `}}`")
        }
        i += 2
        return expression
    }

    func hasClosingBraces(from start: Int) -> Bool {
        var index = start + 1
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "}"), bytes[index - 1] == UInt8(ascii: "}") { return true }
            index += 1
        }
        return false
    }

    mutating func name() -> String? {
        let nameStart = i
        while i < bytes.count, isNameByte(bytes[i]) { i += 1 }
        return i > nameStart ? String(decoding: bytes[nameStart..<i], as: UTF8.self) : nil
    }

    mutating func integer() -> Int? {
        let numberStart = i
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
        let digitsStart = i
        while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9"), i - digitsStart < 9 { i += 1 }
        guard i > digitsStart else {
            i = numberStart
            return nil
        }
        return Int(String(decoding: bytes[numberStart..<i], as: UTF8.self))
    }

    /// Quoted text at `i` (`"..."` or `'...'`, at most ``Placeholders/maximumDefaultLength`` scalars), or
    /// `nil` when `i` is not at a quote.
    mutating func quoted(start: Int) throws(TemplateError) -> String? {
        guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") || bytes[i] == UInt8(ascii: "'") else { return nil }
        let mark = bytes[i]
        i += 1
        let textStart = i
        var scalars = 0
        while i < bytes.count, bytes[i] != mark {
            if !Placeholders.isContinuationByte(bytes[i]) {
                if scalars == Placeholders.maximumDefaultLength {
                    throw TemplateError("quoted text longer than \(Placeholders.maximumDefaultLength) characters in \(quote(from: start))")
                }
                scalars += 1
            }
            i += 1
        }
        guard i < bytes.count else { throw TemplateError("unterminated quote in \(quote(from: start))") }
        i += 1
        return String(decoding: bytes[textStart..<(i - 1)], as: UTF8.self)
    }

    /// `nil` when `arguments` suit `filter`, else what is wrong.
    static func checkArguments(_ filter: String, _ arguments: [Expression.Argument]) -> String? {
        func isText(_ argument: Expression.Argument) -> Bool { if case .text = argument { true } else { false } }
        switch filter {
        case "upcase", "downcase", "capitalize", "strip", "lstrip", "rstrip":
            return arguments.isEmpty ? nil : "takes no argument"
        case "default", "append", "prepend", "remove", "remove_first":
            return arguments.count == 1 && isText(arguments[0]) ? nil : "takes one quoted argument"
        case "replace", "replace_first":
            return arguments.count == 2 && arguments.allSatisfy(isText) ? nil : "takes two quoted arguments"
        case "truncate":
            guard arguments.count <= 2 else { return "takes a length and an optional quoted ellipsis" }
            if let first = arguments.first {
                guard case .integer(let length) = first, length >= 0 else { return "takes a length (a whole number, 0 or more) first" }
            }
            if arguments.count == 2, !isText(arguments[1]) { return "takes a quoted ellipsis second" }
            return nil
        default:
            return "is not supported"
        }
    }

    mutating func evaluate(_ expression: Expression, start: Int) throws(TemplateError) -> String {
        var value: FilterValue
        switch expression.base {
        case .literal(let text):
            value = FilterValue(text: text, blank: text.isEmpty)
        case .name(let name):
            let text = values.value(for: name) ?? ""
            value = FilterValue(text: text, blank: text.isEmpty || values.tags[name] == .bool(false))
        }
        for (filter, arguments) in expression.filters {
            let input = Placeholders.prefix(value.text, maximumBytes: Placeholders.maximumOutputBytes)
            var out = Filters.apply(filter, arguments: arguments, to: FilterValue(text: input, blank: value.blank))
            out.text = Placeholders.prefix(out.text, maximumBytes: Placeholders.maximumOutputBytes)
            filterBytes += input.utf8.count + out.text.utf8.count
            guard filterBytes <= Placeholders.maximumFilterBytes else {
                throw TemplateError("the filters process more than \(Placeholders.maximumFilterBytes) bytes (at \(quote(from: start)))")
            }
            value = out
        }
        return value.text
    }
}

/// Liquid's string filters on bounded input (at most ``Placeholders/maximumOutputBytes``; arguments at
/// most ``Placeholders/maximumDefaultLength`` scalars), so each costs O(input + output).
private enum Filters {
    static func apply(_ filter: String, arguments: [Expression.Argument], to value: FilterValue) -> FilterValue {
        func text(_ index: Int) -> String {
            guard index < arguments.count, case .text(let text) = arguments[index] else { return "" }
            return text
        }
        let input = value.text
        let result: String
        switch filter {
        case "default": return value.blank ? FilterValue(text: text(0), blank: text(0).isEmpty) : value
        case "upcase": result = input.uppercased()
        case "downcase": result = input.lowercased()
        case "capitalize": result = input.first.map { $0.uppercased() + input.dropFirst().lowercased() } ?? ""
        case "strip": result = trim(input, start: true, end: true)
        case "lstrip": result = trim(input, start: true, end: false)
        case "rstrip": result = trim(input, start: false, end: true)
        case "append": result = input + text(0)
        case "prepend": result = text(0) + input
        case "remove": result = replace(input, text(0), with: "", all: true)
        case "remove_first": result = replace(input, text(0), with: "", all: false)
        case "replace": result = replace(input, text(0), with: text(1), all: true)
        case "replace_first": result = replace(input, text(0), with: text(1), all: false)
        case "truncate":
            var length = 50
            if let first = arguments.first, case .integer(let n) = first { length = n }
            let ellipsis = arguments.count > 1 ? text(1) : "..."
            // Liquid: longer than `length` -> the first `length - ellipsis length` characters + ellipsis.
            guard input.count > length else { result = input; break }
            result = String(input.prefix(max(0, length - ellipsis.count))) + ellipsis
        default: result = input
        }
        return FilterValue(text: result, blank: result.isEmpty)
    }

    /// Ruby's `strip` set: space, tab, LF, VT, FF, CR, and NUL.
    static func trim(_ text: String, start: Bool, end: Bool) -> String {
        func isSpace(_ scalar: Unicode.Scalar) -> Bool { scalar.value == 0 || scalar == " " || (0x09...0x0D).contains(scalar.value) }
        var scalars = Substring(text).unicodeScalars
        if start { while let first = scalars.first, isSpace(first) { scalars.removeFirst() } }
        if end { while let last = scalars.last, isSpace(last) { scalars.removeLast() } }
        return String(scalars)
    }

    /// `text` with the first or every occurrence of `target` (exact UTF-8 bytes, left to right, not
    /// overlapping) replaced; linear through Knuth–Morris–Pratt matching, and the output stops growing past
    /// ``Placeholders/maximumOutputBytes`` (the caller cuts it there).
    static func replace(_ text: String, _ target: String, with replacement: String, all: Bool) -> String {
        let haystack = Array(text.utf8), needle = Array(target.utf8), substitute = Array(replacement.utf8)
        guard !needle.isEmpty, needle.count <= haystack.count else { return text }
        var failure = [Int](repeating: 0, count: needle.count)
        var k = 0
        for q in 1..<needle.count {
            while k > 0, needle[q] != needle[k] { k = failure[k - 1] }
            if needle[q] == needle[k] { k += 1 }
            failure[q] = k
        }
        var output: [UInt8] = []
        var copied = 0  // haystack bytes before this index are in `output` (or replaced)
        var matched = 0
        var index = 0
        while index < haystack.count, output.count <= Placeholders.maximumOutputBytes {
            while matched > 0, haystack[index] != needle[matched] { matched = failure[matched - 1] }
            if haystack[index] == needle[matched] { matched += 1 }
            index += 1
            if matched == needle.count {
                output.append(contentsOf: haystack[copied..<(index - needle.count)])
                output.append(contentsOf: substitute)
                copied = index
                matched = 0
                if !all { break }
            }
        }
        if copied < haystack.count, output.count <= Placeholders.maximumOutputBytes {
            output.append(contentsOf: haystack[copied...])
        }
        return String(decoding: output, as: UTF8.self)
    }
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
