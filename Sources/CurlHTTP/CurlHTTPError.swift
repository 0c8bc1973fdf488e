import HTTP2

/// Why a ``CurlHTTPRequest`` got no answer. An open struct of codes (as APNSwift's error reasons): callers
/// classify by ``code`` and show ``message``, which names at most the URL's host, never its path, query or
/// any header value.
public struct CurlHTTPError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// Snake-case name, usable as a bounded metric label.
        public let name: String

        /// The URL does not parse, has user information, or its scheme is neither `https` nor (with private
        /// networks allowed) `http`.
        public static let invalidURL = Code(name: "invalid_url")
        /// A header field or the method holds a byte that could split the request.
        public static let invalidRequest = Code(name: "invalid_request")
        /// `http://` where the egress policy allows only `https://`.
        public static let cleartext = Code(name: "cleartext")
        /// The host's spelling, its literal address or an address it resolved to is refused by the egress policy
        /// (docs/egress.md): no connection was made to it.
        public static let forbiddenAddress = Code(name: "forbidden_address")
        /// The host name did not resolve.
        public static let resolveFailed = Code(name: "resolve_failed")
        /// No TCP connection could be made (refused, unreachable).
        public static let connectFailed = Code(name: "connect_failed")
        /// The connect timeout or the whole request's timeout ran out (a receiver that stalls).
        public static let timedOut = Code(name: "timed_out")
        /// The TLS handshake failed or the certificate did not verify for the host.
        public static let tlsFailed = Code(name: "tls_failed")
        /// The answer's content or header fields went past the client's bounds; the rest was not read.
        public static let responseTooLarge = Code(name: "response_too_large")
        /// The connection broke or the peer spoke something that is not HTTP.
        public static let transferFailed = Code(name: "transfer_failed")
        /// The client was shut down before the answer came.
        public static let shutdown = Code(name: "shutdown")

        public var description: String { name }
    }

    public let code: Code
    /// For the operator: the host and what went wrong; never the URL's path or query, nor a header value.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.name): \(message)" }

    init(_ refusal: EgressRefusal) {
        switch refusal.kind {
        case .cleartext: self.init(.cleartext, refusal.message)
        case .invalidHost, .forbiddenAddress: self.init(.forbiddenAddress, refusal.message)
        }
    }
}
