import Foundation

/// A JSON document as a value: what `jsonb` columns (`message`, `target`, `settings`, `detail`) hold.
///
/// Numbers keep their exact JSON text (RFC 8259 §6: a number's precision is up to the implementation, so
/// a relay must not round it): `init(parsing:)` turns an integer written canonically that fits
/// `Int64` into ``int(_:)`` and every other number (`12345678901234567890`, `1.10`, `1e3`, `-0`) into
/// ``number(_:)`` holding the literal as written, and ``serialized()`` writes that literal back unchanged.
/// ``double(_:)`` is for numbers computed in code (an APNs `relevance-score`), never produced by parsing.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    /// A JSON number as its literal text, already checked against the RFC 8259 §6 grammar
    /// (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`); compare with ``doubleValue`` or
    /// ``int64Value``, never by text.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    /// The member `key` of an object, or `nil` for a missing key or a value that is not an object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The text of a `.string`, else `nil`.
    public var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The value of a `.bool`, else `nil`.
    public var boolValue: Bool? {
        if case .bool(let flag) = self { return flag }
        return nil
    }

    /// An integral number (`.int`, or a `.double` / `.number` with no fraction that fits `Int64`, such as
    /// `3600.0` or `36e2`), else `nil`.
    public var int64Value: Int64? {
        switch self {
        case .int(let number): return number
        case .number(let text):
            if let exact = Int64(text) { return exact }
            return JSONValue.double(Double(text) ?? .nan).int64Value
        case .double(let number) where number.rounded() == number && abs(number) < 9.2e18: return Int64(number)
        default: return nil
        }
    }

    /// Any number as a `Double` (a `.number` too large for a double is infinite), else `nil`.
    public var doubleValue: Double? {
        switch self {
        case .int(let number): return Double(number)
        case .double(let number): return number
        case .number(let text): return Double(text)
        default: return nil
        }
    }

    /// The JSON text of a number (`.int`, `.double` or the `.number` literal as written), else `nil`.
    public var numberText: String? {
        switch self {
        case .int(let number): return String(number)
        case .double(let number): return number.isFinite ? JSONWriter.text(of: number) : nil
        case .number(let text): return text
        default: return nil
        }
    }

    /// The elements of an `.array`, else `nil`.
    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The members of an `.object`, else `nil`.
    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// `true` for `.null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let flag = try? container.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? container.decode(Int64.self) {
            self = .int(number)
        } else if let number = try? container.decode(Double.self) {
            self = .double(number)
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let elements = try? container.decode([JSONValue].self) {
            self = .array(elements)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let flag): try container.encode(flag)
        case .int(let number): try container.encode(number)
        case .double(let number): try container.encode(number)
        // An `Encoder` has no raw-number hook: exact integers stay exact, the rest go through `Double`.
        // ``serialized()`` is the exact form.
        case .number(let text):
            if let exact = Int64(text) { try container.encode(exact) } else { try container.encode(Double(text) ?? 0) }
        case .string(let text): try container.encode(text)
        case .array(let elements): try container.encode(elements)
        case .object(let members): try container.encode(members)
        }
    }
}

extension JSONValue {
    /// Parses one JSON document (RFC 8259; any value at the top, whitespace around it) from UTF-8 bytes.
    /// Numbers keep their literal text (see ``JSONValue``); for a repeated object key the last one wins,
    /// as in PostgreSQL's `jsonb`.
    /// - Throws: `DecodingError.dataCorrupted` naming the byte offset when the bytes are not JSON: bad
    ///   syntax, invalid UTF-8, an unpaired `\u` surrogate, a raw control character in a string, or arrays
    ///   and objects nested deeper than 512 levels (the bound `JSONDecoder` applies too).
    public init(parsing bytes: some Collection<UInt8>) throws {
        var parser = JSONParser(bytes: Array(bytes))
        self = try parser.document()
    }

    /// Checks one JSON document exactly as ``init(parsing:)`` does (the same errors for the same bytes) but
    /// builds only its top level: an object's members or an array's elements that are scalars come back as
    /// parsed, those that are arrays or objects come back empty (`.array([])`, `.object([:])`), their contents
    /// checked and dropped. For a validator that needs the document's shape, not its values (a provider
    /// stand-in asking "is this an object with an `aps` object?"), without allocating every nested value.
    /// - Throws: `DecodingError.dataCorrupted`, as ``init(parsing:)``.
    public init(validatingShallowly bytes: [UInt8]) throws {
        var parser = JSONParser(bytes: bytes, keptDepth: 1)
        self = try parser.document()
    }

    /// Parses one JSON document from text.
    /// - Throws: `DecodingError` when the text is not JSON.
    public init(parsing text: String) throws {
        try self.init(parsing: Array(text.utf8))
    }

    /// Serializes as compact UTF-8 JSON with keys sorted by code point, `/` unescaped and non-ASCII written
    /// as itself (never `\u` sequences), so byte counts against provider limits are the bytes that go on the
    /// wire. Numbers parsed from text come out as written; a non-finite `.double` (which JSON cannot
    /// express) is written as `null`.
    public func serialized() -> [UInt8] {
        var output: [UInt8] = []
        JSONWriter.write(self, to: &output)
        return output
    }

    /// ``serialized()`` as a `String`.
    public var jsonText: String { String(decoding: serialized(), as: UTF8.self) }

    /// Appends `text` as a JSON string (quoted and escaped as ``serialized()`` writes strings) to `output`.
    public static func appendString(_ text: String, to output: inout [UInt8]) {
        JSONWriter.writeString(text, to: &output)
    }

    /// The ``jsonText`` of an object whose members are all strings, written without building the object: for
    /// the small details written once per delivery (a `sent` event's ids). Keys must be distinct.
    public static func objectText(ofStrings members: [(key: String, value: String)]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(members.reduce(2) { $0 + $1.key.utf8.count + $1.value.utf8.count + 6 })
        JSONWriter.writeObject(ofStrings: members, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// The same JSON laid out for people, as `JSONEncoder`'s `.prettyPrinted` with `.sortedKeys` and
    /// `.withoutEscapingSlashes` lays it out (two spaces a level), numbers as written.
    public var prettyJSONText: String {
        var output: [UInt8] = []
        JSONWriter.write(self, to: &output, indent: 0)
        return String(decoding: output, as: UTF8.self)
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
