/// One HTTP request for ``CurlHTTPClient``: a method, an absolute `http(s)://` URL, header fields and a body.
///
/// The URL may carry a secret in its path or query (receivers often put a token there), so nothing built from a
/// request names more of the URL than its host: not errors, not logs.
public struct CurlHTTPRequest: Sendable {
    /// An HTTP method token (RFC 9110 §9), e.g. `POST`.
    public var method: String
    /// The absolute URL, `https://host[:port]/path?query` (`http://` only where the egress policy allows private
    /// networks). No user information: a URL with `user:password@` is refused (``CurlHTTPError/Code/invalidURL``).
    public var url: String
    /// Header fields in order, names in any case (HTTP/2 sends them in lower case, RFC 9113 §8.2.2). A name or
    /// value holding CR, LF or NUL is refused (``CurlHTTPError/Code/invalidRequest``), so no field can split
    /// another off.
    public var headers: [(name: String, value: String)]
    /// The request content (sent with `Content-Length`, never chunked).
    public var body: [UInt8]

    public init(method: String = "POST", url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// The answer to a ``CurlHTTPRequest``: any status (a 4xx or 5xx is an answer, not an error), the
/// `Retry-After` field when there was one, and the content up to the client's bound.
public struct CurlHTTPResponse: Sendable, Equatable {
    /// The HTTP status code (RFC 9110 §15), e.g. 204.
    public var status: Int
    /// The `Retry-After` field's value as sent (RFC 9110 §10.2.3: seconds or an HTTP-date), trimmed; nil without one.
    public var retryAfter: String?
    /// The response content, at most ``CurlHTTPClientConfiguration/maximumResponseBodySize`` bytes (a longer one
    /// fails the request with ``CurlHTTPError/Code/responseTooLarge`` instead).
    public var body: [UInt8]
    /// The HTTP version the answer came over: 1 (HTTP/1.x) or 2.
    public var httpVersion: Int

    public init(status: Int, retryAfter: String? = nil, body: [UInt8] = [], httpVersion: Int = 2) {
        self.status = status
        self.retryAfter = retryAfter
        self.body = body
        self.httpVersion = httpVersion
    }
}
