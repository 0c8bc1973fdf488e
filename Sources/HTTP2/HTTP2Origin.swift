/// Where requests go: scheme, host and port (RFC 6454 origin). Pools in `HTTP2Client` are kept per origin.
public struct HTTP2Origin: Sendable, Hashable, CustomStringConvertible {
    /// `https` = TLS with ALPN `h2`; `http` = cleartext h2c with prior knowledge (RFC 9113 §3.3).
    public enum Scheme: String, Sendable {
        case https
        case http

        /// 443 for https, 80 for http (RFC 9110 §4.2).
        public var defaultPort: Int { self == .https ? 443 : 80 }
    }

    public var scheme: Scheme
    /// Host name or IP literal, without brackets for IPv6.
    public var host: String
    /// TCP port, 1...65535.
    public var port: Int

    public init(scheme: Scheme, host: String, port: Int) {
        self.scheme = scheme
        self.host = host
        self.port = port
    }

    /// Parses `"https://api.push.apple.com"`, `"http://127.0.0.1:8443"`, `"https://[::1]:9000/path"`.
    /// The default port is 443/80; a path, query or fragment is ignored.
    /// - Throws: `HTTP2Error` with code `.invalidURL` naming the text when the scheme is not http/https, the
    ///   host is empty or the port is not a number in 1...65535.
    public init(parsing url: String) throws {
        func invalid(_ why: String) -> HTTP2Error {
            HTTP2Error(.invalidURL, "invalid origin URL \"\(url)\": \(why)")
        }
        guard let schemeEnd = url.range(of: "://") else { throw invalid("missing scheme (https:// or http://)") }
        guard let scheme = Scheme(rawValue: url[..<schemeEnd.lowerBound].lowercased()) else {
            throw invalid("scheme must be https or http")
        }
        var rest = url[schemeEnd.upperBound...]
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { rest = rest[..<end] }
        if rest.contains("@") { throw invalid("user information is not supported") }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw invalid("unterminated IPv6 literal") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw invalid("unexpected text after IPv6 literal") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw invalid("empty host") }
        var port = scheme.defaultPort
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else { throw invalid("bad port") }
            port = value
        }
        self.init(scheme: scheme, host: host.lowercased(), port: port)
    }

    /// `host[:port]` for the `:authority` pseudo-header (RFC 9113 §8.3.1), the port omitted when it is the
    /// scheme's default; IPv6 literals are bracketed.
    public var authority: String {
        // A byte test: `String.contains(_:)` with a string argument is Foundation's substring search, and this
        // runs for every answer (the origin's description names it to the pacer and the channel's evidence).
        let h = host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host
        return port == scheme.defaultPort ? h : "\(h):\(port)"
    }

    /// `scheme://authority`.
    public var description: String { "\(scheme.rawValue)://\(authority)" }
}
