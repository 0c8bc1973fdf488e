import Foundation

/// UUID text both ways without Foundation's `uuidString` / `UUID(uuidString:)`, which go through `snprintf` /
/// `sscanf` on Linux (a large share of a claimed row's decoding, of an `apns-id` header per request and of
/// each id of a target's `include_subscription_ids`): the canonical form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
/// (RFC 9562 §4; PostgreSQL docs §8.12 "UUID Type"), written in lower case, read in either case.
public enum CanonicalUUIDText {
    /// The canonical form's length in bytes.
    public static let length = 36

    @usableFromInline @inline(__always)
    static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? nibble &+ 48 : nibble &+ 87
    }

    /// Writes the lower-case canonical form into `out`, which has room for ``length`` bytes.
    @inlinable
    public static func write(_ uuid: UUID, to out: UnsafeMutablePointer<UInt8>) {
        withUnsafeBytes(of: uuid.uuid) { raw in
            var o = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[o] = UInt8(ascii: "-")
                    o += 1
                }
                let byte = raw[index]
                out[o] = hexDigit(byte >> 4)
                out[o + 1] = hexDigit(byte & 0x0f)
                o += 2
            }
        }
    }

    /// The lower-case canonical form, as PostgreSQL prints it (`uuid.uuidString.lowercased()`, without the
    /// two temporary strings).
    @inlinable
    public static func format(_ uuid: UUID) -> String {
        String(unsafeUninitializedCapacity: length) { buffer in
            write(uuid, to: buffer.baseAddress!)
            return length
        }
    }

    /// Appends the lower-case canonical form to `bytes`.
    @inlinable
    public static func append(_ uuid: UUID, to bytes: inout [UInt8]) {
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: length))
        bytes.withUnsafeMutableBufferPointer { write(uuid, to: $0.baseAddress! + start) }
    }

    @usableFromInline @inline(__always)
    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }

    /// Parses the canonical form, hex digits in either case (what `UUID(uuidString:)` accepts and
    /// PostgreSQL's output always is). Nil for anything else.
    @inlinable
    public static func parse(_ text: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard text.count == length else { return nil }
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let valid = withUnsafeMutableBytes(of: &bytes) { out -> Bool in
            var i = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    guard text[i] == UInt8(ascii: "-") else { return false }
                    i += 1
                }
                guard let high = nibble(text[i]), let low = nibble(text[i + 1]) else { return false }
                out[index] = high << 4 | low
                i += 2
            }
            return true
        }
        return valid ? UUID(uuid: bytes) : nil
    }

    /// ``parse(_:)`` of a Swift string.
    @inlinable
    public static func parse(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { parse($0) }
    }
}
