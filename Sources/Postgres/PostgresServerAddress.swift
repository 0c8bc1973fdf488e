/// The server a connection reached, as libpq names it: `PQhost` and `PQport` (libpq docs §34.2, "Connection
/// Status Functions"). With a multi-host connection string (`host=a,b`, `postgresql://a:5432,b:5432/db`) it is
/// the host that answered and passed `target_session_attrs`, so after a failover it names the new primary.
/// Never holds the user or password: only the host (a name, an address, or a Unix-socket directory) and port.
public struct PostgresServerAddress: Sendable, Equatable, Codable, CustomStringConvertible {
    /// The host as written in the connection string (or the socket directory, for a Unix-domain socket).
    public var host: String
    /// The port, as text (libpq keeps it so; `5432` when the string gave none).
    public var port: String

    public init(host: String, port: String) {
        self.host = host
        self.port = port
    }

    /// `host:port`, or `[host]:port` for an IPv6 address.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
