import Foundation
import UUIDText

/// A Swift value that can be sent as a query parameter in PostgreSQL's text format.
///
/// Parameters travel through `PQexecParams` as text with the type left to the server (`$1::uuid` casts
/// where inference is not enough). The text must be what the type's input function accepts
/// (PostgreSQL docs, chapter 8 "Data Types"). A value with a ``postgresBinary`` form (``PostgresBinaryArray``)
/// is sent in the binary format instead, which the type's receive function must accept.
public protocol PostgresEncodable: Sendable {
    /// The value in PostgreSQL's text input format; nil sends SQL NULL (unless ``postgresBinary`` is set).
    var postgresText: String? { get }
    /// The value in the binary format of the parameter's type (its `*_recv` function), sent with format code 1
    /// instead of the text; nil (the default) sends the text. See ``PostgresBinaryArray``.
    var postgresBinary: [UInt8]? { get }
}

extension PostgresEncodable {
    public var postgresBinary: [UInt8]? { nil }
}

extension String: PostgresEncodable {
    /// The string itself. PostgreSQL text cannot hold NUL (U+0000); the server rejects such values.
    public var postgresText: String? { self }
}

extension Int: PostgresEncodable {
    /// Decimal digits, for `bigint` (or any integer/numeric type the value fits).
    public var postgresText: String? { String(self) }
}

extension Int32: PostgresEncodable {
    /// Decimal digits, for `integer`.
    public var postgresText: String? { String(self) }
}

extension Int64: PostgresEncodable {
    /// Decimal digits, for `bigint`.
    public var postgresText: String? { String(self) }
}

extension Double: PostgresEncodable {
    /// Shortest round-tripping decimal for `double precision`; `Infinity`, `-Infinity`, `NaN` for the
    /// special values (PostgreSQL docs §8.1.3 "Floating-Point Types").
    public var postgresText: String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return "\(self)"
    }
}

extension Bool: PostgresEncodable {
    /// `t` / `f` (PostgreSQL docs §8.6 "Boolean Type").
    public var postgresText: String? { self ? "t" : "f" }
}

extension UUID: PostgresEncodable {
    /// The canonical lower-case form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    public var postgresText: String? { CanonicalUUIDText.format(self) }
}

extension Date: PostgresEncodable {
    /// ISO 8601 in UTC with microseconds, `2024-05-01T12:34:56.123456Z`, for `timestamptz`. Rounded to
    /// the nearest microsecond, PostgreSQL's timestamp resolution (docs §8.5 "Date/Time Types").
    public var postgresText: String? { PostgresTimestamp.format(self) }
}

extension UInt8: PostgresEncodable {
    /// Decimal digits, for `smallint`. (An array of bytes, `[UInt8]`, is sent as `bytea` instead.)
    public var postgresText: String? { String(self) }
}

extension Array: PostgresEncodable where Element: PostgresEncodable {
    /// Two encodings, chosen by element type:
    ///
    /// - `[UInt8]` is `bytea` in hex format, `\x0aff` (PostgreSQL docs §8.4.1 "bytea Hex Format").
    /// - Any other array is an array literal, `{"a","b \"c\"",NULL}`: every non-NULL element is
    ///   double-quoted with `"` and `\` backslash-escaped, so commas, braces, quotes, spaces, unicode
    ///   and the word `NULL` survive; nil elements become an unquoted `NULL`; nested arrays become
    ///   multidimensional literals (they must be rectangular). PostgreSQL docs §8.15.6 "Array Input
    ///   and Output Syntax". Send with an explicit cast, e.g. `$1::uuid[]`, `$1::bytea[]`.
    public var postgresText: String? {
        // Decided by the static element type: `as? [UInt8]` would also match an empty `[String]`.
        if Element.self == UInt8.self { return PostgresBytea.format(unsafeBitCast(self, to: [UInt8].self)) }
        var literal: [UInt8] = [UInt8(ascii: "{")]
        if let elementType = Element.self as? any PostgresArrayLiteralElement.Type {
            // One type check per array, then each element writes its own text: no `String` per element
            // and no dynamic cast per element, which dominated completion writes.
            elementType.appendElements(of: self, to: &literal)
        } else {
            for (index, element) in enumerated() {
                if index > 0 { literal.append(UInt8(ascii: ",")) }
                // A binary value has no text to put in a literal; sending NULL instead would lose it silently.
                precondition(element.postgresBinary == nil, "binary-format values cannot be elements of an array literal")
                guard let elementText = element.postgresText else {
                    literal.append(contentsOf: "NULL".utf8)
                    continue
                }
                if let nested = element as? any _PostgresArrayMarker, nested._postgresIsSubArray {
                    literal.append(contentsOf: elementText.utf8)
                    continue
                }
                PostgresArrayLiteral.appendQuoted(elementText, to: &literal)
            }
        }
        literal.append(UInt8(ascii: "}"))
        return String(decoding: literal, as: UTF8.self)
    }
}

/// Array-literal element syntax (PostgreSQL docs §8.15.6).
enum PostgresArrayLiteral {
    /// `"text"` with `"` and `\` backslash-escaped. Both are ASCII, so escaping byte by byte never splits
    /// a multi-byte UTF-8 sequence.
    static func appendQuoted(_ text: String, to literal: inout [UInt8]) {
        literal.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var runStart = 0
            for (index, byte) in utf8.enumerated() where byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                literal.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                literal.append(UInt8(ascii: "\\"))
                runStart = index
            }
            literal.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
        }
        literal.append(UInt8(ascii: "\""))
    }
}

/// A type whose array literal elements are written straight into the literal's bytes: exactly the
/// quoted, escaped ``PostgresEncodable/postgresText`` (or `NULL`) that the general path writes, without
/// building it as a `String` first where the type can avoid it.
protocol PostgresArrayLiteralElement: PostgresEncodable {
    /// Appends this element as the literal has it: `"..."` quoted and escaped, or `NULL`.
    func appendArrayLiteralElement(to literal: inout [UInt8])
}

extension PostgresArrayLiteralElement {
    /// Appends `array`'s elements, comma-separated. `E` must be `Self` (the caller found `Self` as the
    /// dynamic type of `E`).
    static func appendElements<E>(of array: [E], to literal: inout [UInt8]) {
        precondition(E.self == Self.self, "appendElements: element type mismatch")
        let elements = unsafeBitCast(array, to: [Self].self)
        for index in elements.indices {
            if index > 0 { literal.append(UInt8(ascii: ",")) }
            elements[index].appendArrayLiteralElement(to: &literal)
        }
    }
}

extension String: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) { PostgresArrayLiteral.appendQuoted(self, to: &literal) }
}

/// Decimal digits need neither quotes nor escapes, but are quoted as every other element is.
private func appendQuotedDecimal<T: BinaryInteger>(_ value: T, to literal: inout [UInt8]) {
    literal.append(UInt8(ascii: "\""))
    literal.append(contentsOf: String(value).utf8)
    literal.append(UInt8(ascii: "\""))
}

extension Int: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) { appendQuotedDecimal(self, to: &literal) }
}

extension Int32: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) { appendQuotedDecimal(self, to: &literal) }
}

extension Int64: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) { appendQuotedDecimal(self, to: &literal) }
}

extension Bool: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) {
        literal.append(contentsOf: self ? #""t""#.utf8 : #""f""#.utf8)
    }
}

extension UUID: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) {
        literal.append(UInt8(ascii: "\""))
        CanonicalUUIDText.append(self, to: &literal)
        literal.append(UInt8(ascii: "\""))
    }
}

extension Date: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) {
        literal.append(UInt8(ascii: "\""))
        PostgresTimestamp.append(self, to: &literal)
        literal.append(UInt8(ascii: "\""))
    }
}

extension Optional: PostgresArrayLiteralElement where Wrapped: PostgresArrayLiteralElement {
    func appendArrayLiteralElement(to literal: inout [UInt8]) {
        switch self {
        case .none: literal.append(contentsOf: "NULL".utf8)
        case .some(let value): value.appendArrayLiteralElement(to: &literal)
        }
    }
}

/// Lets an enclosing array tell a sub-array (emitted unquoted, as a multidimensional literal) from a
/// `[UInt8]` (a `bytea` element, emitted quoted).
protocol _PostgresArrayMarker {
    var _postgresIsSubArray: Bool { get }
}

extension Array: _PostgresArrayMarker {
    var _postgresIsSubArray: Bool { Element.self != UInt8.self }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    /// The wrapped value's text, or nil (SQL NULL).
    public var postgresText: String? {
        switch self {
        case .none: return nil
        case .some(let value): return value.postgresText
        }
    }

    /// The wrapped value's binary form, if it has one (a wrapped ``PostgresBinaryArray`` is sent as itself).
    public var postgresBinary: [UInt8]? {
        switch self {
        case .none: return nil
        case .some(let value): return value.postgresBinary
        }
    }
}
