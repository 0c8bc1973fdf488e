import Foundation
import HTTP2

/// A URL an app's channel chooses to send to: the `app_channels.endpoint` override (APNs, FCM) or an FCM service
/// account's `token_uri`. Whoever can write the app's channel row chooses it, so it passes the egress policy
/// before it is used: `https://` only and a host that is not a forbidden address literal, unless the operator
/// allows private networks (then `http://` h2c and any address, for emulators). Host names are checked again
/// when they are resolved (``EgressPolicy``), by the HTTP/2 client.
public enum ChannelEndpoint {
    /// The origin to connect to.
    /// - Parameters:
    ///   - url: the override, e.g. `https://api.push.apple.com` (a path is ignored).
    ///   - field: the setting's name for the message (`endpoint`, `token_uri`).
    /// - Throws: ``ChannelEndpointError`` naming `field` and what is wrong; the message never repeats the URL
    ///   (it could carry user info).
    public static func origin(_ url: String, field: String = "endpoint", policy: EgressPolicy) throws(ChannelEndpointError)
        -> HTTP2Origin
    {
        guard let origin = try? HTTP2Origin(parsing: url) else {
            throw ChannelEndpointError("\(field) is not an https:// origin URL (without user info)")
        }
        do {
            try policy.check(scheme: origin.scheme.rawValue, host: origin.host)
        } catch {
            throw ChannelEndpointError("\(field) is refused: \(error.message)")
        }
        return origin
    }

    /// The request path of `uri` (an https URL already checked: a `token_uri`), with its query; `/` when it has
    /// none.
    public static func requestPath(of uri: String) -> String {
        guard let components = URLComponents(string: uri) else { return "/" }
        var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { path += "?\(query)" }
        return path
    }
}

/// Why a channel's endpoint override or `token_uri` was refused: a channel configuration error
/// (`invalid_channel_settings`).
public struct ChannelEndpointError: Error, CustomStringConvertible, Sendable {
    public var message: String
    init(_ message: String) { self.message = message }
    public var description: String { "invalid channel endpoint: \(message)" }
}
