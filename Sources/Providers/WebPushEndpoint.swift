import DeliveryCore
import Foundation

/// A Web Push subscription endpoint (the push resource URL, RFC 8030 §5) split into what the transport
/// needs: where to connect and the `:path` to send to.
public struct WebPushEndpoint: Sendable, Hashable {
    /// The push service host, lower-cased (e.g. `fcm.googleapis.com`).
    public var host: String
    /// The port, `443` unless the URL names another.
    public var port: Int
    /// The `:path`: the URL's percent-encoded path and query (`/wpush/v2/gAAA...?x=1`), never empty.
    public var path: String

    /// `https://host` (with `:port` when not 443): the push service's origin, the `aud` claim of a VAPID
    /// token (RFC 8292 §2).
    public var origin: String { port == 443 ? "https://\(host)" : "https://\(host):\(port)" }

    /// Parses `https://host[:port]/path[?query]`; a fragment is ignored.
    /// - Throws: `WebPushRequestError` `invalid_endpoint` for anything but an absolute `https` URL with a
    ///   host (RFC 8030 §8: push is HTTP over TLS), user info, or a path / query that is not visible ASCII.
    ///   The detail never repeats the URL (it is a capability: whoever has it can push to the device).
    public init(parsing endpoint: String) throws(WebPushRequestError) {
        func invalid(_ why: String) -> WebPushRequestError {
            WebPushRequestError(reason: "invalid_endpoint", detail: "the Web Push endpoint \(why)")
        }
        guard let components = URLComponents(string: endpoint) else { throw invalid("is not a URL") }
        guard components.scheme?.lowercased() == "https" else { throw invalid("must be an https URL") }
        guard let host = components.host, !host.isEmpty, HTTPFieldValue.isVisibleASCII(host) else {
            throw invalid("has no valid host")
        }
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
        self.host = host.lowercased()
        self.path = path
    }
}
