/// One HTTP header as the emulator sees it. HTTP/2 names are lower-case (RFC 9113 §8.2.1); lookups
/// compare names case-insensitively anyway.
public struct EmulatorHeader: Sendable, Hashable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A request as the HTTP/2 server received it: pseudo-headers `:method`, `:path`, `:authority`, the
/// regular headers in arrival order, and the body bytes.
public struct EmulatorRequest: Sendable, Hashable {
    public var method: String
    public var path: String
    public var authority: String
    public var headers: [EmulatorHeader]
    public var body: [UInt8]
    /// The TLS client certificate of the connection, when the client presented one.
    public var clientCertificate: EmulatorClientCertificate?

    public init(method: String, path: String, authority: String = "", headers: [EmulatorHeader], body: [UInt8],
                clientCertificate: EmulatorClientCertificate? = nil) {
        self.method = method
        self.path = path
        self.authority = authority
        self.headers = headers
        self.body = body
        self.clientCertificate = clientCertificate
    }

    /// The first header named `name` (case-insensitive), if any.
    public func header(_ name: String) -> String? { headers.first(named: name) }

    /// The body as `application/x-www-form-urlencoded` fields (an OAuth 2.0 token request's), percent-decoded;
    /// a pair without `=` is left out, a repeated name keeps its last value.
    var formFields: [String: String] {
        var form: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            if parts.count == 2 { form[parts[0]] = parts[1] }
        }
        return form
    }
}

extension [EmulatorHeader] {
    /// The value of the first header named `name` (case-insensitive), if any: requests' and responses' lookup.
    func first(named name: String) -> String? {
        let wanted = name.lowercased()
        return first { $0.isNamed(wanted) }?.value
    }
}

extension EmulatorHeader {
    /// Whether the name is `lowercasedName` ignoring ASCII case (RFC 9110 §5.1: field names are case-insensitive
    /// tokens, so ASCII). Compared byte by byte: a lookup is made several times per request and a lower-cased
    /// copy of every name it passes was most of the emulator's header cost.
    func isNamed(_ lowercasedName: String) -> Bool {
        name.utf8.count == lowercasedName.utf8.count && name.utf8.elementsEqual(lowercasedName.utf8) { byte, wanted in
            (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte) == wanted
        }
    }
}

/// The answer the HTTP/2 server sends back: `:status`, headers, body bytes.
public struct EmulatorResponse: Sendable, Hashable {
    public var status: Int
    public var headers: [EmulatorHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [EmulatorHeader] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first header named `name` (case-insensitive), if any.
    public func header(_ name: String) -> String? { headers.first(named: name) }
}

/// A provider's behaviour without networking: the HTTP/2 server hands each complete request to `handle`
/// and sends back what it returns. APNs is one conformer; FCM and Web Push join as others. `handle` must
/// not block (it runs on the server's I/O path) and must be safe to call from many threads at once.
public protocol EmulatedProvider: Sendable {
    func handle(_ request: EmulatorRequest) -> EmulatorResponse
}

/// A TLS client certificate as the emulator's server received it.
public struct EmulatorClientCertificate: Sendable, Hashable {
    /// The certificate, DER.
    public var der: [UInt8]
    /// Whether it verified against the server's client CA file.
    public var verified: Bool

    public init(der: [UInt8], verified: Bool) {
        self.der = der
        self.verified = verified
    }
}

extension Substring {
    /// Without leading and trailing optional whitespace: SP and HTAB, RFC 9110 §5.6.3 `OWS`.
    func trimmingOptionalWhitespace() -> Substring {
        let isWhitespace = { (character: Character) in character == " " || character == "\t" }
        guard let first = firstIndex(where: { !isWhitespace($0) }), let last = lastIndex(where: { !isWhitespace($0) }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }
}
