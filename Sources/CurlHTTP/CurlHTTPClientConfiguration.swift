import HTTP2

/// How a ``CurlHTTPClient`` reaches untrusted endpoints: where it may connect, how long it waits and how much
/// of an answer it reads.
public struct CurlHTTPClientConfiguration: Sendable {
    /// Checked for the URL's host before the request starts and for every address curl is about to connect to
    /// (docs/egress.md); `http://` only when it allows private networks.
    public var egressPolicy: EgressPolicy = .publicInternetOnly
    /// Name lookup, TCP connect and the TLS handshake together (`CURLOPT_CONNECTTIMEOUT_MS`).
    public var connectTimeout: Duration = .seconds(5)
    /// The whole request, connect included, until the last byte of the answer (`CURLOPT_TIMEOUT_MS`): a receiver
    /// that stalls costs at most this.
    public var totalTimeout: Duration = .seconds(15)
    /// The most response content kept, in bytes; a longer answer fails with
    /// ``CurlHTTPError/Code/responseTooLarge`` when the byte past the bound arrives.
    public var maximumResponseBodySize: Int = 64 * 1024
    /// The most bytes of response header fields read (all header lines together, status line included).
    public var maximumResponseHeaderSize: Int = 16 * 1024
    /// A PEM file of the certificate authorities to trust instead of the system's (`CURLOPT_CAINFO`), for tests
    /// and private receivers; nil: the system's bundle. Verification itself is never switched off.
    public var caFile: String?
    /// Transfers under way at once; more wait in the client's queue (each transfer's timeout starts when it starts).
    public var maximumConcurrentTransfers: Int = 64
    /// Sent as `User-Agent` (RFC 9110 §10.1.5).
    public var userAgent: String = "pushizo-worker"

    public init() {}
}
