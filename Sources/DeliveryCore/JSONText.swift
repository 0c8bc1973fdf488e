/// An RFC 8259 parser that keeps every number's literal text, so nothing is rounded through `Double` on
/// the way from `jsonb` to a provider (Foundation's `JSONDecoder` / `JSONSerialization` cannot do that).
struct JSONParser {
    /// Arrays and objects nested deeper than this are refused rather than recursed into (the bound
    /// Foundation's `JSONDecoder` applies too), so hostile input cannot exhaust the stack.
    static let maximumDepth = 512

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0
    /// Containers nested deeper than this are checked but come back empty, and the values inside them are
    /// not built (``JSONValue/init(validatingShallowly:)``).
    private let keptDepth: Int

    init(bytes: [UInt8], keptDepth: Int = .max) {
        self.bytes = bytes
        self.keptDepth = keptDepth
    }

    /// Whether values read now are kept: inside a container nested deeper than `keptDepth` they are only
    /// checked, and the container discards them.
    private var keeping: Bool { depth <= keptDepth }

    mutating func document() throws -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw failure("unexpected text after the JSON value") }
        return value
    }

    private func failure(_ reason: String) -> DecodingError {
        DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "Invalid JSON at byte \(index): \(reason)"))
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func expect(_ literal: StaticString, _ value: JSONValue) throws -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw failure("unexpected character") }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
            throw failure("unexpected character")
        }
        index += count
        return value
    }

    private mutating func parseValue() throws -> JSONValue {
        guard let byte = current else { throw failure("unexpected end of input") }
        switch byte {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw failure("unexpected character")
        }
    }

    private mutating func enter() throws {
        depth += 1
        guard depth <= Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        index += 1
        skipWhitespace()
    }

    private mutating func parseObject() throws -> JSONValue {
        try enter()
        defer { depth -= 1 }
        var members: [String: JSONValue] = [:]
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            guard current == UInt8(ascii: "\"") else { throw failure("expected a member name") }
            let key = try parseString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw failure("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            if keeping { members[key] = value }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
            case UInt8(ascii: "}"):
                index += 1
                return .object(members)
            default: throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray() throws -> JSONValue {
        try enter()
        defer { depth -= 1 }
        var elements: [JSONValue] = []
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            let element = try parseValue()
            if keeping { elements.append(element) }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
            case UInt8(ascii: "]"):
                index += 1
                return .array(elements)
            default: throw failure("expected ',' or ']'")
            }
        }
    }

    private mutating func digits() -> Int {
        let start = index
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
        return index - start
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private mutating func parseNumber() throws -> JSONValue {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        if current == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            throw failure("expected a digit")
        }
        var integral = true
        if current == UInt8(ascii: ".") {
            index += 1
            integral = false
            guard digits() > 0 else { throw failure("expected a digit after '.'") }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            integral = false
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw failure("expected a digit in the exponent") }
        }
        guard keeping else { return .null }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        // `-0` is not `0` as text; everything else integral that fits Int64 prints back identically.
        if integral, text != "-0", let exact = Int64(text) { return .int(exact) }
        return .number(text)
    }

    private mutating func hexQuad() throws -> UInt32 {
        guard bytes.count - index >= 4 else { throw failure("expected four hex digits after \\u") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("expected four hex digits after \\u")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func parseString() throws -> String {
        index += 1
        // Most strings have no escape: their bytes are the text, validated as UTF-8 in place rather than
        // copied byte by byte into a buffer first.
        var end = index
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                let text: String? = bytes.withUnsafeBufferPointer { buffer in
                    let slice = UnsafeBufferPointer(rebasing: buffer[index..<end])
                    // A string nobody keeps is only checked; ASCII is valid UTF-8 as it stands.
                    if !keeping, !slice.contains(where: { $0 >= 0x80 }) { return "" }
                    return String(validating: slice, as: UTF8.self)
                }
                guard let text else { throw failure("invalid UTF-8 in a string") }
                index = end + 1
                return keeping ? text : ""
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            end += 1
        }
        var utf8 = Array(bytes[index..<end])
        index = end
        while true {
            guard let byte = current else { throw failure("unterminated string") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: utf8, as: UTF8.self) else { throw failure("invalid UTF-8 in a string") }
                return text
            case UInt8(ascii: "\\"):
                guard let escape = current else { throw failure("unterminated string") }
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hexQuad()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { throw failure("unpaired surrogate") }
                        index += 2
                        let low = try hexQuad()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw failure("unpaired surrogate") }
                    utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
                default: throw failure("unknown escape")
                }
            case 0x00..<0x20: throw failure("control character in a string")
            default: utf8.append(byte)
            }
        }
    }
}

/// Compact JSON output matching what Foundation's `JSONEncoder` writes with `.sortedKeys` and
/// `.withoutEscapingSlashes` (keys in code-point order, `\u00xx` for other control characters, doubles by
/// their shortest round-trip text without a trailing `.0`), plus `.number` literals written as they came.
enum JSONWriter {
    /// - Parameter indent: `nil` for compact output; otherwise the depth for `JSONEncoder`'s
    ///   `.prettyPrinted` layout (two spaces a level, `"key" : value`, an empty container as `[` blank line `]`).
    static func write(_ value: JSONValue, to output: inout [UInt8], indent: Int? = nil) {
        func newline(_ depth: Int) {
            output.append(0x0A)
            output.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
        }
        func container<Element>(_ open: Character, _ close: Character, _ elements: [Element], _ each: (Element, Int?) -> Void) {
            output.append(contentsOf: String(open).utf8)
            if indent != nil, elements.isEmpty { output.append(0x0A) }
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                if let indent { newline(indent + 1) }
                each(element, indent.map { $0 + 1 })
            }
            if let indent { newline(indent) }
            output.append(contentsOf: String(close).utf8)
        }
        switch value {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .int(let number): output.append(contentsOf: String(number).utf8)
        case .double(let number): output.append(contentsOf: (number.isFinite ? text(of: number) : "null").utf8)
        case .number(let text): output.append(contentsOf: text.utf8)
        case .string(let text): writeString(text, to: &output)
        case .array(let elements):
            container("[", "]", elements) { element, depth in write(element, to: &output, indent: depth) }
        case .object(let members):
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            container("{", "}", sorted) { member, depth in
                writeString(member.key, to: &output)
                output.append(contentsOf: (depth == nil ? ":" : " : ").utf8)
                write(member.value, to: &output, indent: depth)
            }
        }
    }

    /// A compact object of string members, keys in code-point order, as ``write(_:to:indent:)`` writes
    /// `.object` of `.string` values.
    static func writeObject(ofStrings members: [(key: String, value: String)], to output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        for (position, member) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            writeString(member.key, to: &output)
            output.append(UInt8(ascii: ":"))
            writeString(member.value, to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// A finite double as `JSONEncoder` writes it: `3600`, `0.5`, `1e+20`.
    static func text(of number: Double) -> String {
        let text = number.description
        return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
    }

    /// `text` as a JSON string, escaping what JSON requires (quote, backslash, control characters) and nothing
    /// else. Runs of bytes that need no escape are copied at once: most texts (ids, tokens, message texts)
    /// have none, and appending byte by byte was a visible share of the worker's CPU.
    static func writeString(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var runStart = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if runStart < index { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
                writeEscape(byte, to: &output)
                runStart = index + 1
            }
            if runStart < bytes.count { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// The escape of one byte that JSON does not allow raw in a string (RFC 8259 section 7).
    private static func writeEscape(_ byte: UInt8, to output: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
        case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
        case 0x08: output.append(contentsOf: #"\b"#.utf8)
        case 0x0C: output.append(contentsOf: #"\f"#.utf8)
        case 0x0A: output.append(contentsOf: #"\n"#.utf8)
        case 0x0D: output.append(contentsOf: #"\r"#.utf8)
        case 0x09: output.append(contentsOf: #"\t"#.utf8)
        default:
            let hex = Array("0123456789abcdef".utf8)
            output.append(contentsOf: #"\u00"#.utf8)
            output.append(hex[Int(byte >> 4)])
            output.append(hex[Int(byte & 0x0F)])
        }
    }
}
