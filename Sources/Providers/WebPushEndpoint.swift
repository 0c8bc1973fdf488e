import DeliveryCore
import Foundation

/// A Web Push subscription endpoint (the push resource URL, RFC 8030 §5) split into what the transport
/// needs: where to connect and the `:path` to send to.
public struct WebPushEndpoint: Sendable, Hashable {
    /// The push service host in ASCII, lower-cased, without a trailing dot or IPv6 brackets
    /// (`fcm.googleapis.com`, `push.xn--e1afmkfd.com`, `2001:db8::1`): the name the worker resolves and
    /// connects to, and the host of `:authority` and of the VAPID `aud` (``origin``).
    public var host: String
    /// The port, `443` unless the URL names another.
    public var port: Int
    /// The `:path`: the URL's percent-encoded path and query (`/wpush/v2/gAAA...?x=1`), never empty.
    public var path: String

    /// `https://host` (with `:port` when not 443; an IPv6 host in brackets): the push service's origin, the
    /// `aud` claim of a VAPID token (RFC 8292 §2).
    public var origin: String {
        let authority = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? "https://\(authority)" : "https://\(authority):\(port)"
    }

    /// Parses `https://host[:port]/path[?query]`; a fragment is ignored.
    ///
    /// The host is the URL's ASCII serialization (WHATWG URL Standard "host serializing", which Foundation's
    /// `URLComponents.encodedHost` gives): an ASCII host, IDNA A-labels included (`xn--e1afmkfd`, RFC 5890
    /// §2.3.2.1), is kept as written, lower-cased; a Unicode host (`пример.com`) becomes its A-labels
    /// through Foundation's UTS #46 processing (ICU), never through hand-written Punycode. Then one trailing
    /// dot and IPv6 brackets are dropped, so the connection, `:authority` and VAPID `aud` all use one name.
    /// The host's syntax (labels, address literals) is judged by the sender's egress policy.
    /// - Throws: `WebPushRequestError` `invalid_endpoint` for anything but an absolute `https` URL with a
    ///   host (RFC 8030 §8: push is HTTP over TLS), a host that has no ASCII form or is percent-encoded, user
    ///   info, or a path / query that is not visible ASCII. The detail never repeats the URL (it is a
    ///   capability: whoever has it can push to the device).
    public init(parsing endpoint: String) throws(WebPushRequestError) {
        func invalid(_ why: String) -> WebPushRequestError {
            WebPushRequestError(reason: .invalidEndpoint, detail: "the Web Push endpoint \(why)")
        }
        guard let components = URLComponents(string: endpoint) else { throw invalid("is not a URL") }
        guard components.scheme?.lowercased() == "https" else { throw invalid("must be an https URL") }
        guard let host = Self.asciiHost(components.encodedHost) else { throw invalid("has no valid host") }
        guard components.user == nil, components.password == nil else { throw invalid("must not carry user info") }
        if let port = components.port {
            guard (1...65_535).contains(port) else { throw invalid("has an invalid port") }
            self.port = port
        } else {
            self.port = 443
        }
        var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { path += "?" + query }
        guard path.hasPrefix("/"), HTTPFieldValue.isVisibleASCII(path) else {
            throw invalid("path must be visible ASCII")
        }
        self.host = host
        self.path = path
    }

    /// The URL's serialized host made canonical for connecting: lower case, IPv6 brackets and one trailing
    /// dot removed; `nil` when empty, not visible ASCII, or percent-encoded (a browser never hands out such
    /// an endpoint, and `%` could mean another name once decoded).
    static func asciiHost(_ serialized: String?) -> String? {
        guard var host = serialized?.lowercased(), !host.isEmpty, HTTPFieldValue.isVisibleASCII(host), !host.contains("%") else {
            return nil
        }
        if host.hasPrefix("[") {
            guard host.hasSuffix("]"), host.count > 2 else { return nil }
            host = String(host.dropFirst().dropLast())
        } else if host.count > 1, host.hasSuffix(".") {
            host.removeLast()
        }
        return host
    }
}
