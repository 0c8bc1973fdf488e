import Foundation

/// A one-dimensional array parameter in PostgreSQL's binary format, as `array_recv` reads it (PostgreSQL
/// source `arrayfuncs.c`; protocol docs §55.2.3 "Extended Query", format code 1): the server reads it without
/// parsing an array literal and each element's text. For the hot batch statements (`unnest($1::bigint[], ...)`)
/// that parse is a good part of their cost, and building the literal a good part of the worker's.
///
/// The element type travels in the value and must be exactly the element type of the parameter's cast in the
/// SQL (`$1::bigint[]` takes ``bigint(_:)``, not ``integer(_:)``): the server answers a mismatch with
/// SQLSTATE 42804 "wrong element type". Values are encoded as each type's `*_send` function writes them.
public struct PostgresBinaryArray: PostgresEncodable {
    /// The whole array in binary format.
    let bytes: [UInt8]

    /// The binary format has no text form: sent as text it would be refused, so there is none.
    public var postgresText: String? { nil }
    public var postgresBinary: [UInt8]? { bytes }

    /// `bigint[]` (element OID 20, `int8`): 8 bytes, big-endian.
    public static func bigint(_ values: [Int64]) -> Self {
        build(elementOID: 20, values, hasNull: false) { value, bytes in
            appendBigEndian(value, to: &bytes)
            return true
        }
    }

    /// `smallint[]` (element OID 21, `int2`): 2 bytes, big-endian. A value outside `Int16` is sent as 8 bytes,
    /// which the server refuses for the whole statement (SQLSTATE 22P03, "improper binary format in array
    /// element"), as the text form's value would be refused (22003): never stored as another number.
    public static func smallint(_ values: [Int]) -> Self {
        build(elementOID: 21, values, hasNull: false) { value, bytes in
            if let narrow = Int16(exactly: value) { appendBigEndian(narrow, to: &bytes) } else { appendBigEndian(Int64(value), to: &bytes) }
            return true
        }
    }

    /// `integer[]` (element OID 23, `int4`): 4 bytes, big-endian. A value outside `Int32` is refused by the server
    /// as for ``smallint(_:)``.
    public static func integer(_ values: [Int?]) -> Self {
        build(elementOID: 23, values, hasNull: values.contains(nil)) { value, bytes in
            guard let value else { return false }
            if let narrow = Int32(exactly: value) { appendBigEndian(narrow, to: &bytes) } else { appendBigEndian(Int64(value), to: &bytes) }
            return true
        }
    }

    /// `text[]` (element OID 25): the UTF-8 bytes. The server checks the encoding as for text parameters (a NUL
    /// is refused, SQLSTATE 22021).
    public static func text(_ values: [String?]) -> Self {
        build(elementOID: 25, values, hasNull: values.contains(nil)) { value, bytes in
            guard let value else { return false }
            appendUTF8(value, to: &bytes)
            return true
        }
    }

    /// `text[]` without NULLs.
    public static func text(_ values: [String]) -> Self {
        build(elementOID: 25, values, hasNull: false) { value, bytes in
            appendUTF8(value, to: &bytes)
            return true
        }
    }

    /// `boolean[]` (element OID 16): one byte, 1 or 0.
    public static func boolean(_ values: [Bool]) -> Self {
        build(elementOID: 16, values, hasNull: false) { value, bytes in
            bytes.append(value ? 1 : 0)
            return true
        }
    }

    /// `uuid[]` (element OID 2950): the 16 bytes in order.
    public static func uuid(_ values: [UUID?]) -> Self {
        build(elementOID: 2950, values, hasNull: values.contains(nil)) { value, bytes in
            guard let value else { return false }
            withUnsafeBytes(of: value.uuid) { bytes.append(contentsOf: $0) }
            return true
        }
    }

    /// `timestamptz[]` (element OID 1184): microseconds since 2000-01-01 UTC as a big-endian `int8`, rounded to
    /// the microsecond and mapped to `infinity` / `-infinity` exactly as the text form (``Date``'s
    /// ``PostgresEncodable/postgresText``) is.
    public static func timestamptz(_ values: [Date?]) -> Self {
        build(elementOID: 1184, values, hasNull: values.contains(nil)) { value, bytes in
            guard let value else { return false }
            appendBigEndian(PostgresTimestamp.postgresMicroseconds(value), to: &bytes)
            return true
        }
    }

    /// Header (dimensions, has-NULL flag, element OID, length and lower bound 1), then each element as its byte
    /// count and bytes, or -1 for NULL (`element` returns false for a NULL and writes nothing). An empty array
    /// has no dimensions.
    private static func build<Values: Collection>(
        elementOID: UInt32, _ values: Values, hasNull: Bool, _ element: (Values.Element, inout [UInt8]) -> Bool
    ) -> Self {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + values.count * 12)
        appendBigEndian(Int32(values.isEmpty ? 0 : 1), to: &bytes)
        appendBigEndian(Int32(hasNull ? 1 : 0), to: &bytes)
        appendBigEndian(elementOID, to: &bytes)
        if !values.isEmpty {
            appendBigEndian(Int32(clamping: values.count), to: &bytes)
            appendBigEndian(Int32(1), to: &bytes)
        }
        for value in values {
            let lengthAt = bytes.count
            appendBigEndian(UInt32(0), to: &bytes)  // the length, written once the element is
            let length = element(value, &bytes) ? UInt32(bytes.count - lengthAt - 4) : UInt32.max  // -1: NULL
            bytes[lengthAt] = UInt8(truncatingIfNeeded: length >> 24)
            bytes[lengthAt + 1] = UInt8(truncatingIfNeeded: length >> 16)
            bytes[lengthAt + 2] = UInt8(truncatingIfNeeded: length >> 8)
            bytes[lengthAt + 3] = UInt8(truncatingIfNeeded: length)
        }
        return Self(bytes: bytes)
    }

    private static func appendUTF8(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    private static func appendBigEndian<I: FixedWidthInteger>(_ value: I, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }
}
