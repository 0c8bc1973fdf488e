/// Parses one level of PostgreSQL's array output (docs §8.15.6 "Array Input and Output Syntax").
enum PostgresArrayText {
    /// `{a,"b \"c\"",NULL,{1,2}}` -> `["a", "b \"c\"", nil, "{1,2}"]`: quoted elements unescaped,
    /// unquoted `NULL` (any case) as nil, nested sub-arrays returned as their raw text for the element
    /// type to parse. A leading dimension decoration (`[0:1]=`) is skipped. Nil when malformed.
    static func parse(_ text: String) -> [String?]? {
        let bytes = Array(text.utf8)
        var i = 0
        if bytes.first == UInt8(ascii: "[") {
            guard let equals = bytes.firstIndex(of: UInt8(ascii: "=")) else { return nil }
            i = equals + 1
        }
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{"), bytes.last == UInt8(ascii: "}") else { return nil }
        let end = bytes.count - 1
        i += 1
        var elements: [String?] = []
        skipSpaces(bytes, &i, end)
        if i == end { return elements }
        while true {
            skipSpaces(bytes, &i, end)
            guard i < end else { return nil }
            if bytes[i] == UInt8(ascii: "\"") {
                // Quoted: backslash escapes the next byte; runs until the closing quote.
                i += 1
                var value = [UInt8]()
                while true {
                    guard i < end else { return nil }
                    let c = bytes[i]
                    if c == UInt8(ascii: "\\") {
                        guard i + 1 < end else { return nil }
                        value.append(bytes[i + 1])
                        i += 2
                    } else if c == UInt8(ascii: "\"") {
                        i += 1
                        break
                    } else {
                        value.append(c)
                        i += 1
                    }
                }
                elements.append(String(decoding: value, as: UTF8.self))
                skipSpaces(bytes, &i, end)
            } else if bytes[i] == UInt8(ascii: "{") {
                // Sub-array: copy through the matching brace, respecting quotes inside.
                let start = i
                var depth = 0
                var inQuotes = false
                while i < end {
                    let c = bytes[i]
                    if inQuotes {
                        if c == UInt8(ascii: "\\") { i += 1 } else if c == UInt8(ascii: "\"") { inQuotes = false }
                    } else if c == UInt8(ascii: "\"") {
                        inQuotes = true
                    } else if c == UInt8(ascii: "{") {
                        depth += 1
                    } else if c == UInt8(ascii: "}") {
                        depth -= 1
                        if depth == 0 { i += 1; break }
                    }
                    i += 1
                }
                guard depth == 0, i <= end else { return nil }
                elements.append(String(decoding: bytes[start..<i], as: UTF8.self))
                skipSpaces(bytes, &i, end)
            } else {
                // Unquoted: runs to the next comma; surrounding spaces are not part of it.
                var value = [UInt8]()
                while i < end, bytes[i] != UInt8(ascii: ",") {
                    if bytes[i] == UInt8(ascii: "\\"), i + 1 < end {
                        value.append(bytes[i + 1])
                        i += 2
                    } else {
                        value.append(bytes[i])
                        i += 1
                    }
                }
                while let last = value.last, last == UInt8(ascii: " ") { value.removeLast() }
                guard !value.isEmpty else { return nil }
                let string = String(decoding: value, as: UTF8.self)
                elements.append(string.uppercased() == "NULL" ? nil : string)
            }
            if i == end { return elements }
            guard bytes[i] == UInt8(ascii: ",") else { return nil }
            i += 1
        }
    }

    private static func skipSpaces(_ bytes: [UInt8], _ i: inout Int, _ end: Int) {
        while i < end, bytes[i] == UInt8(ascii: " ") || bytes[i] == UInt8(ascii: "\t") || bytes[i] == UInt8(ascii: "\n") {
            i += 1
        }
    }
}
