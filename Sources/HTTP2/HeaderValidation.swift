/// Checks of request header fields before they are queued, so that a field the peer would reject with
/// PROTOCOL_ERROR (RFC 9113 §8.1.1) fails at once instead of being retried forever.
extension HTTP2Request {
    /// Returns `.invalidRequest` for the first bad pseudo-header or header field, nil when all are acceptable.
    /// Rules: RFC 9113 §8.2.1 (names are tokens, RFC 9110 §5.6.2, sent lower-cased; values hold no NUL, CR or LF
    /// and no leading/trailing space or tab) and §8.2.2 (no connection-specific fields; `te` only `trailers`).
    /// The message names the field but never shows its value (it may be a credential, e.g. `authorization`).
    ///
    /// - Parameter accepted: a request that passed these checks. Its method, and each of its header fields equal
    ///   (byte for byte, name and value) to this request's at the same place, are not checked again: a batch's
    ///   requests share most fields, the 200-byte `authorization` value among them, and comparing the bytes
    ///   (`memcmp`) costs less than testing each. (Not `==`: Swift's string equality is canonical equivalence,
    ///   under which U+212A KELVIN SIGN equals the ASCII "K" a field name may hold.)
    func validationError(after accepted: HTTP2Request? = nil) -> HTTP2Error? {
        // Pseudo-headers (RFC 9113 §8.3.1): `:method` is a token (RFC 9110 §9.1); `:path` is non-empty, starts
        // with "/" and holds visible ASCII only (RFC 3986 §3.3). The path is not shown: it may hold a device token.
        let methodAccepted = accepted.map { $0.method.hasSameUTF8(as: method) } ?? false
        if !methodAccepted && (method.isEmpty || !Self.allBytes(of: method, satisfy: Self.isTokenByte)) {
            return HTTP2Error(.invalidRequest, "the :method is not a token (RFC 9110 §9.1)")
        }
        if path.utf8.first != UInt8(ascii: "/") || !Self.allBytes(of: path, satisfy: { $0 > 0x20 && $0 < 0x7F }) {
            return HTTP2Error(.invalidRequest, "the :path must start with \"/\" and hold visible ASCII only (RFC 9113 §8.3.1)")
        }
        let known = accepted?.headers ?? []
        for (index, header) in headers.enumerated() {
            if index < known.count && known[index].value.hasSameUTF8(as: header.value) && known[index].name.hasSameUTF8(as: header.name) {
                continue
            }
            let name = header.name
            guard !name.isEmpty, Self.allBytes(of: name, satisfy: Self.isTokenByte) else {
                // An invalid name may itself be garbage: show it escaped, and only its first characters.
                let shown = String(name.unicodeScalars.prefix(40).map { $0.escaped(asASCII: true) }.joined())
                return HTTP2Error(.invalidRequest, "header #\(index) has an invalid field name \"\(shown)\" (RFC 9113 §8.2.1)")
            }
            // Only names as long as a forbidden one are lower-cased and compared (most are not).
            if Self.forbiddenNameLengths.contains(name.utf8.count) {
                let lower = name.lowercasedFieldName
                if Self.connectionSpecific.contains(lower) {
                    return HTTP2Error(.invalidRequest, "header \"\(lower)\" is connection-specific and not allowed in HTTP/2 (RFC 9113 §8.2.2)")
                }
                if lower == "te" && header.value != "trailers" {
                    return HTTP2Error(.invalidRequest, "header \"te\" may only be \"trailers\" in HTTP/2 (RFC 9113 §8.2.2)")
                }
            }
            let value = header.value.utf8
            if !Self.allBytes(of: header.value, satisfy: { $0 != 0 && $0 != 0x0A && $0 != 0x0D }) {
                return HTTP2Error(.invalidRequest, "value of header \"\(name.lowercasedFieldName)\" contains NUL, CR or LF (RFC 9113 §8.2.1)")
            }
            if let first = value.first, let last = value.last, Self.isWhitespace(first) || Self.isWhitespace(last) {
                return HTTP2Error(.invalidRequest, "value of header \"\(name.lowercasedFieldName)\" has leading or trailing whitespace (RFC 9113 §8.2.1)")
            }
        }
        return nil
    }

    /// tchar (RFC 9110 §5.6.2), as one switch rather than a scan of the punctuation list per byte. Upper-case
    /// letters are accepted because the client lower-cases names when sending.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    /// Whether every UTF-8 byte of `text` satisfies `test`, read in place when the string has contiguous UTF-8
    /// (native strings do): every request is checked, bearer tokens and paths included.
    private static func allBytes(of text: String, satisfy test: (UInt8) -> Bool) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(test) } ?? text.utf8.allSatisfy(test)
    }

    /// RFC 9113 §8.2.2. An array: five comparisons, most ending at the length, cost less than hashing the name.
    private static let connectionSpecific: [String] = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]
    /// The byte lengths of `connectionSpecific`'s names and of `te`.
    private static let forbiddenNameLengths: Set<Int> = Set(connectionSpecific.map(\.utf8.count) + [2])
}
