internal import Glibc

/// Where the metrics listener binds: an IP literal and a port, written `host:port` with an IPv6 address in
/// brackets (`127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`, `[::]:9464`); `localhost` means 127.0.0.1.
/// Host names are not resolved: the listener must not depend on DNS at start-up. A value without I/O, so the
/// configuration can hold it; the listener (`MetricsHTTPServer` in MetricsServer) binds it.
public struct MetricsListenAddress: Sendable, Equatable, CustomStringConvertible {
    /// The address as written back: `127.0.0.1:9464` or `[::1]:9464`.
    public var host: String
    /// 0 lets the kernel choose (the bound port is then `MetricsHTTPServer.port`).
    public var port: UInt16
    public var isIPv6: Bool

    /// - Throws: ``MetricsListenAddressError`` saying what is wrong with `text`.
    public init(parsing text: String) throws(MetricsListenAddressError) {
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw .init("an IPv6 address needs its closing ]") }
            hostPart = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw .init("expected host:port, e.g. [::1]:9464") }
            portPart = rest.dropFirst()
            isIPv6 = true
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw .init("expected host:port, e.g. 127.0.0.1:9464") }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
            guard !hostPart.contains(":") else { throw .init("an IPv6 address goes in brackets, e.g. [::1]:9464") }
            isIPv6 = false
        }
        guard !portPart.isEmpty, portPart.utf8.count <= 5, portPart.utf8.allSatisfy({ (48...57).contains($0) }),
            let port = UInt16(portPart)
        else { throw .init("the port must be a number from 0 to 65535") }
        self.port = port
        let literal = hostPart == "localhost" ? "127.0.0.1" : String(hostPart)
        guard !literal.isEmpty else { throw .init("the host is missing (use 0.0.0.0 or [::] for every address)") }
        var scratch = in6_addr()
        guard inet_pton(isIPv6 ? AF_INET6 : AF_INET, literal, &scratch) == 1 else {
            throw .init("\(isIPv6 ? "an IPv6" : "an IPv4") address literal is expected, not a host name")
        }
        host = literal
    }

    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Why a listen address was refused.
public struct MetricsListenAddressError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
