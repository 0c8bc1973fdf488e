import Foundation

/// A Swift value that can be sent as a query parameter in PostgreSQL's text format.
///
/// Parameters travel through `PQexecParams` as text with the type left to the server (`$1::uuid` casts
/// where inference is not enough). The text must be what the type's input function accepts
/// (PostgreSQL docs, chapter 8 "Data Types").
public protocol PostgresEncodable: Sendable {
    /// The value in PostgreSQL's text input format; nil sends SQL NULL.
    var postgresText: String? { get }
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
    public var postgresText: String? { uuidString.lowercased() }
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
        if Element.self == UInt8.self { return PostgresBytea.format(self as! [UInt8]) }
        var text = "{"
        for (index, element) in enumerated() {
            if index > 0 { text.append(",") }
            guard let elementText = element.postgresText else {
                text.append("NULL")
                continue
            }
            if let nested = element as? any _PostgresArrayMarker, nested._postgresIsSubArray {
                text.append(elementText)
                continue
            }
            text.append("\"")
            for scalar in elementText.unicodeScalars {
                if scalar == "\"" || scalar == "\\" { text.append("\\") }
                text.unicodeScalars.append(scalar)
            }
            text.append("\"")
        }
        text.append("}")
        return text
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
}
