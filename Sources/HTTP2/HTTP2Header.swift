/// One HTTP/2 header field (RFC 9113 §8.2). Names are sent lower-cased on the wire (RFC 9113 §8.2.1); the
/// client lower-cases them for you. Pseudo-headers (`:status`, `:path`, …) are never listed here.
public struct HTTP2Header: Sendable, Hashable {
    /// Field name, e.g. `apns-topic`.
    public var name: String
    /// Field value, e.g. `com.example.app`.
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

extension Array where Element == HTTP2Header {
    /// First value whose name matches case-insensitively (field names are case-insensitive, RFC 9110 §5.1).
    func firstValue(named name: String) -> String? {
        let wanted = name.lowercased()
        return first { $0.name.lowercased() == wanted }?.value
    }
}

extension String {
    /// This field name as HTTP/2 sends it, lower-cased (RFC 9113 §8.2.1): the string itself, not a copy, when it
    /// has no upper-case ASCII letter, which is almost always (callers write names in lower case, and this runs
    /// for every header of every request and response).
    var lowercasedFieldName: String {
        utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) ? lowercased() : self
    }
}
