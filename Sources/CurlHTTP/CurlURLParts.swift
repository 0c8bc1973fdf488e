internal import CCurl

/// The scheme and host of a URL as libcurl's own URL parser (`curl_url`) reads them, so the host checked by the
/// egress policy is the host curl connects to, whatever the spelling.
struct CurlURLParts {
    /// Lower case, e.g. `https`.
    var scheme: String
    /// As curl reads it: a name, an IPv4 literal, or an IPv6 literal in brackets.
    var host: String

    /// - Throws: ``CurlHTTPError/Code/invalidURL`` for a URL curl does not parse, one without a host, or one with
    ///   user information (credentials in a URL end up in places URLs are shown; receivers authenticate by the
    ///   signature instead).
    init(parsing url: String) throws(CurlHTTPError) {
        guard let handle = curl_url() else { throw CurlHTTPError(.invalidURL, "curl_url failed (out of memory)") }
        defer { curl_url_cleanup(handle) }
        // Not CURLU_NON_SUPPORT_SCHEME: a scheme this libcurl cannot speak fails here already.
        guard curl_url_set(handle, CURLUPART_URL, url, UInt32(CURLU_DISALLOW_USER)) == CURLUE_OK else {
            throw CurlHTTPError(.invalidURL, "the URL does not parse as an absolute URL without user information")
        }
        func part(_ which: CURLUPart) -> String? {
            var value: UnsafeMutablePointer<CChar>?
            guard curl_url_get(handle, which, &value, 0) == CURLUE_OK, let value else { return nil }
            defer { curl_free(value) }
            return String(cString: value)
        }
        guard let scheme = part(CURLUPART_SCHEME), let host = part(CURLUPART_HOST), !host.isEmpty else {
            throw CurlHTTPError(.invalidURL, "the URL has no scheme or no host")
        }
        self.scheme = scheme.lowercased()
        self.host = host
    }
}
