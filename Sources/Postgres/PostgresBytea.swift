/// `bytea` text formats (PostgreSQL docs §8.4 "Binary Data Types").
enum PostgresBytea {
    /// Hex format: `\x` then two lower-case hex digits per byte.
    static func format(_ bytes: [UInt8]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 2 + bytes.count * 2) { out in
            out[0] = UInt8(ascii: "\\")
            out[1] = UInt8(ascii: "x")
            var i = 2
            for byte in bytes {
                out[i] = digits[Int(byte >> 4)]
                out[i + 1] = digits[Int(byte & 0x0f)]
                i += 2
            }
            return i
        }
    }

    /// Parses hex format (`\x...`, the default output since PostgreSQL 9.0) or, as a fallback, the
    /// legacy escape format (`\\`, `\ooo` octal, other bytes literal). Nil when malformed.
    static func parse(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { parse($0) }
    }

    /// ``parse(_:)`` of the text's UTF-8 bytes.
    static func parse(_ utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        if utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x") {
            guard utf8.count % 2 == 0 else { return nil }
            var bytes = [UInt8]()
            bytes.reserveCapacity((utf8.count - 2) / 2)
            var i = 2
            while i < utf8.count {
                guard let high = hexValue(utf8[i]), let low = hexValue(utf8[i + 1]) else { return nil }
                bytes.append(high << 4 | low)
                i += 2
            }
            return bytes
        }
        var bytes = [UInt8]()
        var i = 0
        while i < utf8.count {
            let c = utf8[i]
            if c != UInt8(ascii: "\\") {
                bytes.append(c)
                i += 1
            } else if i + 1 < utf8.count, utf8[i + 1] == UInt8(ascii: "\\") {
                bytes.append(c)
                i += 2
            } else if i + 3 < utf8.count,
                      let a = octalValue(utf8[i + 1]), let b = octalValue(utf8[i + 2]), let d = octalValue(utf8[i + 3]),
                      a <= 3 {
                bytes.append(a << 6 | b << 3 | d)
                i += 4
            } else {
                return nil
            }
        }
        return bytes
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    private static func octalValue(_ c: UInt8) -> UInt8? {
        (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(c) ? c - UInt8(ascii: "0") : nil
    }
}
