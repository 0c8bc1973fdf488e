import Foundation
import UUIDText

/// A Swift value that can be built from a column's text-format value (results are requested in text
/// format, PostgreSQL docs §55.2 "Message Flow"; each type's output format is in chapter 8).
///
/// Conversions throw ``PostgresError`` with code `.decodingFailed`; ``PostgresRow/decode(_:_:)`` adds
/// the column name to the message.
public protocol PostgresDecodable {
    /// Parses the text PostgreSQL sends for this type. Throws `PostgresError(.decodingFailed)`.
    init(postgresText: String) throws

    /// Parses the same text given as its UTF-8 bytes (libpq's buffer, valid only during the call), which
    /// saves building a `String` for types that do not keep one. The default makes the `String` and calls
    /// ``init(postgresText:)``. Throws `PostgresError(.decodingFailed)`.
    init(postgresBytes: UnsafeBufferPointer<UInt8>) throws
}

extension PostgresDecodable {
    /// Builds the `String` and parses it with ``init(postgresText:)``.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        try self.init(postgresText: String(decoding: postgresBytes, as: UTF8.self))
    }
}

@inline(__always)
func decodingError(_ bytes: UnsafeBufferPointer<UInt8>, _ type: String) -> PostgresError {
    decodingError(String(decoding: bytes, as: UTF8.self), type)
}

/// Decimal digits with an optional leading `+` or `-`, as `T(String)` accepts them; nil when empty,
/// malformed or out of `T`'s range. Works on the bytes, so no `String` is built per value.
@inline(__always)
func parseDecimal<T: FixedWidthInteger>(_ bytes: UnsafeBufferPointer<UInt8>, as _: T.Type) -> T? {
    var i = 0
    var negative = false
    if let first = bytes.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
        negative = first == UInt8(ascii: "-")
        i = 1
    }
    guard i < bytes.count else { return nil }
    var value: T = 0
    while i < bytes.count {
        let digit = bytes[i] &- UInt8(ascii: "0")
        guard digit < 10 else { return nil }
        // Accumulated on the negative side, which holds T.min; overflow means out of range.
        let (times10, o1) = value.multipliedReportingOverflow(by: 10)
        let (next, o2) = negative
            ? times10.subtractingReportingOverflow(T(digit)) : times10.addingReportingOverflow(T(digit))
        guard !o1, !o2 else { return nil }
        value = next
        i += 1
    }
    return value
}

@inline(__always)
func decodingError(_ text: String, _ type: String) -> PostgresError {
    let shown = text.count > 64 ? String(text.prefix(64)) + "..." : text
    return PostgresError(code: .decodingFailed, message: "cannot decode \(type) from \"\(shown)\"")
}

extension String: PostgresDecodable {
    /// The text unchanged.
    public init(postgresText: String) { self = postgresText }

    /// The bytes as UTF-8 text.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) { self = String(decoding: postgresBytes, as: UTF8.self) }
}

extension Int: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`, `bigint`).
    public init(postgresText: String) throws {
        guard let value = Int(postgresText) else { throw decodingError(postgresText, "Int") }
        self = value
    }

    /// Decimal digits, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let value = parseDecimal(postgresBytes, as: Int.self) else { throw decodingError(postgresBytes, "Int") }
        self = value
    }
}

extension Int32: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`).
    public init(postgresText: String) throws {
        guard let value = Int32(postgresText) else { throw decodingError(postgresText, "Int32") }
        self = value
    }

    /// Decimal digits, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let value = parseDecimal(postgresBytes, as: Int32.self) else { throw decodingError(postgresBytes, "Int32") }
        self = value
    }
}

extension Int64: PostgresDecodable {
    /// Decimal digits (`smallint`, `integer`, `bigint`).
    public init(postgresText: String) throws {
        guard let value = Int64(postgresText) else { throw decodingError(postgresText, "Int64") }
        self = value
    }

    /// Decimal digits, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let value = parseDecimal(postgresBytes, as: Int64.self) else { throw decodingError(postgresBytes, "Int64") }
        self = value
    }
}

extension UInt8: PostgresDecodable {
    /// Decimal digits 0...255. (A whole `[UInt8]` column decodes from `bytea` instead.)
    public init(postgresText: String) throws {
        guard let value = UInt8(postgresText) else { throw decodingError(postgresText, "UInt8") }
        self = value
    }

    /// Decimal digits, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let value = parseDecimal(postgresBytes, as: UInt8.self) else { throw decodingError(postgresBytes, "UInt8") }
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

    /// `t` / `f` (or `true` / `false`), read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        if postgresBytes.count == 1 {
            switch postgresBytes[0] {
            case UInt8(ascii: "t"): self = true; return
            case UInt8(ascii: "f"): self = false; return
            default: break
            }
        }
        try self.init(postgresText: String(decoding: postgresBytes, as: UTF8.self))
    }
}

extension UUID: PostgresDecodable {
    /// The canonical `uuid` output, hex digits in either case.
    public init(postgresText: String) throws {
        guard let value = CanonicalUUIDText.parse(postgresText) else { throw decodingError(postgresText, "UUID") }
        self = value
    }

    /// The canonical `uuid` output, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let value = CanonicalUUIDText.parse(postgresBytes) else { throw decodingError(postgresBytes, "UUID") }
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

    /// As ``init(postgresText:)``, read from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard let date = PostgresTimestamp.parse(postgresBytes) else { throw decodingError(postgresBytes, "Date") }
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
            self = unsafeBitCast(bytes, to: [Element].self)
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

    /// As ``init(postgresText:)``; a `bytea` is read straight from the bytes.
    public init(postgresBytes: UnsafeBufferPointer<UInt8>) throws {
        guard Element.self == UInt8.self else {
            try self.init(postgresText: String(decoding: postgresBytes, as: UTF8.self))
            return
        }
        guard let bytes = PostgresBytea.parse(postgresBytes) else { throw decodingError(postgresBytes, "[UInt8] (bytea)") }
        // Element is UInt8 (checked above): the same type, so no element-wise cast.
        self = unsafeBitCast(bytes, to: [Element].self)
    }
}
