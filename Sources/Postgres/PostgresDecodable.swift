import Foundation

/// A Swift value that can be built from a column's text-format value (results are requested in text
/// format, PostgreSQL docs §55.2 "Message Flow"; each type's output format is in chapter 8).
///
/// Conversions throw ``PostgresError`` with code `.decodingFailed`; ``PostgresRow/decode(_:_:)`` adds
/// the column name to the message.
public protocol PostgresDecodable {
    /// Parses the text PostgreSQL sends for this type. Throws `PostgresError(.decodingFailed)`.
    init(postgresText: String) throws
}

@inline(__always)
func decodingError(_ text: String, _ type: String) -> PostgresError {
    let shown = text.count > 64 ? String(text.prefix(64)) + "..." : text
    return PostgresError(code: .decodingFailed, message: "cannot decode \(type) from \"\(shown)\"")
}

extension String: PostgresDecodable {
    /// The text unchanged.
    public init(postgresText: String) { self = postgresText }
}

extension Int: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`, `bigint`).
    public init(postgresText: String) throws {
        guard let value = Int(postgresText) else { throw decodingError(postgresText, "Int") }
        self = value
    }
}

extension Int32: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`).
    public init(postgresText: String) throws {
        guard let value = Int32(postgresText) else { throw decodingError(postgresText, "Int32") }
        self = value
    }
}

extension Int64: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`, `bigint`).
    public init(postgresText: String) throws {
        guard let value = Int64(postgresText) else { throw decodingError(postgresText, "Int64") }
        self = value
    }
}

extension UInt8: PostgresDecodable {
    /// Decimal digits 0...255. (A whole `[UInt8]` column decodes from `bytea` instead.)
    public init(postgresText: String) throws {
        guard let value = UInt8(postgresText) else { throw decodingError(postgresText, "UInt8") }
        self = value
    }
}

extension Double: PostgresDecodable {
    /// `double precision`, `real` or `numeric` text, including `Infinity`, `-Infinity`, `NaN`.
    public init(postgresText: String) throws {
        switch postgresText {
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        case "NaN": self = .nan
        default:
            guard let value = Double(postgresText) else { throw decodingError(postgresText, "Double") }
            self = value
        }
    }
}

extension Bool: PostgresDecodable {
    /// `t` / `f`, PostgreSQL's boolean output (docs §8.6); `true` / `false` are accepted too.
    public init(postgresText: String) throws {
        switch postgresText {
        case "t", "true": self = true
        case "f", "false": self = false
        default: throw decodingError(postgresText, "Bool")
        }
    }
}

extension UUID: PostgresDecodable {
    /// The canonical `uuid` output.
    public init(postgresText: String) throws {
        guard let value = UUID(uuidString: postgresText) else { throw decodingError(postgresText, "UUID") }
        self = value
    }
}

extension Date: PostgresDecodable {
    /// `timestamptz` (or `timestamp`, read as UTC; or `date`, midnight UTC) in the ISO output style,
    /// `2024-05-01 12:34:56.123456+00`. Every connection sets `DateStyle=ISO` and `TimeZone=UTC`.
    /// `infinity` / `-infinity` become `Date.distantFuture` / `Date.distantPast`.
    public init(postgresText: String) throws {
        guard let date = PostgresTimestamp.parse(postgresText) else {
            throw decodingError(postgresText, "Date")
        }
        self = date
    }
}

extension Array: PostgresDecodable where Element: PostgresDecodable {
    /// Two decodings, chosen by element type:
    ///
    /// - `[UInt8]` from `bytea` hex output `\x0aff` (docs §8.4.1; every connection sets
    ///   `bytea_output=hex`).
    /// - Any other array from an array's output, `{a,"b c",NULL}` (docs §8.15.6), including a
    ///   `[lower:upper]=` dimension prefix and nested sub-arrays (for arrays of arrays). A NULL element
    ///   throws `.decodingFailed`, since the element type cannot hold it.
    public init(postgresText: String) throws {
        if Element.self == UInt8.self {
            guard let bytes = PostgresBytea.parse(postgresText) else {
                throw decodingError(postgresText, "[UInt8] (bytea)")
            }
            self = bytes as! [Element]
            return
        }
        guard let elements = PostgresArrayText.parse(postgresText) else {
            throw decodingError(postgresText, "[\(Element.self)]")
        }
        var result: [Element] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard let element else {
                throw PostgresError(code: .decodingFailed, message: "array element is NULL; cannot decode [\(Element.self)]")
            }
            result.append(try Element(postgresText: element))
        }
        self = result
    }
}
