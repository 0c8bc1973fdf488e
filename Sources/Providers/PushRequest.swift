/// One HTTP header as it goes on the wire. HTTP/2 names are lower-case (RFC 9113 §8.2.1).
public struct PushHeader: Sendable, Hashable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A provider request built without any I/O: what the transport sends to the provider's origin.
/// `path` is the `:path` pseudo-header (e.g. `/3/device/<token>`); `body` is the exact UTF-8 payload.
public struct PushRequest: Sendable, Hashable {
    public var method: String
    public var path: String
    public var headers: [PushHeader]
    public var body: [UInt8]

    public init(method: String = "POST", path: String, headers: [PushHeader], body: [UInt8]) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }

    /// The first header named `name` (case-insensitive), if any.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// A provider response as the transport received it: `:status`, headers and body bytes.
public struct PushResponse: Sendable, Hashable {
    public var status: Int
    public var headers: [PushHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [PushHeader] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first header named `name` (case-insensitive), if any.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}
