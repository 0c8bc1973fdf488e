import Foundation
internal import CCurl
internal import CPushizoCurlShims
import HTTP2

/// One request in flight on the client's thread: its easy handle, what the callbacks have read so far, and the
/// continuation its caller waits on. Touched only on the client's thread (curl calls the callbacks there too).
final class CurlTransfer {
    let easy: UnsafeMutableRawPointer
    /// For error messages: the URL's host, never more of it.
    let host: String
    let policy: EgressPolicy
    let maximumBodySize: Int
    let maximumHeaderSize: Int
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let completion: @Sendable (Result<CurlHTTPResponse, CurlHTTPError>) -> Void

    var body: [UInt8] = []
    var headerBytes = 0
    var retryAfter: String?
    /// Set when a callback stopped the transfer, so the curl error it causes is reported as what happened.
    var stoppedFor: CurlHTTPError?

    init(easy: UnsafeMutableRawPointer, host: String, policy: EgressPolicy, maximumBodySize: Int, maximumHeaderSize: Int,
         headerList: UnsafeMutablePointer<curl_slist>?,
         completion: @escaping @Sendable (Result<CurlHTTPResponse, CurlHTTPError>) -> Void) {
        self.easy = easy
        self.host = host
        self.policy = policy
        self.maximumBodySize = maximumBodySize
        self.maximumHeaderSize = maximumHeaderSize
        self.headerList = headerList
        self.completion = completion
    }

    /// Reports the outcome once and frees the handle (already removed from the multi handle).
    func finish(_ result: Result<CurlHTTPResponse, CurlHTTPError>) {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        headerList = nil
        completion(result)
    }

    /// Frees the handle of a transfer that never started; its caller reports the failure itself.
    func discard() {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        headerList = nil
    }

    /// The outcome of a transfer curl reports done with `code`.
    func result(of code: CURLcode) -> Result<CurlHTTPResponse, CurlHTTPError> {
        if let stoppedFor { return .failure(stoppedFor) }
        guard code == CURLE_OK else { return .failure(Self.error(for: code, host: host)) }
        var status = 0
        var version = 0
        _ = pz_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        _ = pz_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        return .success(CurlHTTPResponse(status: status, retryAfter: retryAfter, body: body,
                                         httpVersion: version == Int(CURL_HTTP_VERSION_2_0) ? 2 : 1))
    }

    /// Classifies a curl result code; the message is curl's generic text for it (`curl_easy_strerror`), which
    /// holds no part of the URL, and the host.
    static func error(for code: CURLcode, host: String) -> CurlHTTPError {
        let text = String(cString: curl_easy_strerror(code))
        let kind: CurlHTTPError.Code
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST: kind = .resolveFailed
        case CURLE_COULDNT_CONNECT: kind = .connectFailed
        case CURLE_OPERATION_TIMEDOUT: kind = .timedOut
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            kind = .tlsFailed
        case CURLE_FILESIZE_EXCEEDED: kind = .responseTooLarge
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL: kind = .invalidURL
        default: kind = .transferFailed
        }
        return CurlHTTPError(kind, "\(host): \(text)")
    }
}

// MARK: The callbacks, in C's calling convention: `userdata` is the transfer (unretained; the client's table of
// running transfers keeps it alive until curl is done with its handle).

/// CURLOPT_WRITEFUNCTION: keeps content up to the bound; returning less than it was given stops the transfer.
func curlWriteBody(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let data, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    guard transfer.body.count + length <= transfer.maximumBodySize else {
        transfer.stoppedFor = CurlHTTPError(
            .responseTooLarge, "\(transfer.host): the answer's content is longer than \(transfer.maximumBodySize) bytes")
        return 0
    }
    data.withMemoryRebound(to: UInt8.self, capacity: length) {
        transfer.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

/// CURLOPT_HEADERFUNCTION: counts header bytes against the bound and keeps `Retry-After`. curl hands over one
/// whole field line at a time (HTTP/2 fields formatted as HTTP/1.1 lines), and again for each interim answer.
func curlReadHeader(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let data, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    transfer.headerBytes += length
    guard transfer.headerBytes <= transfer.maximumHeaderSize else {
        transfer.stoppedFor = CurlHTTPError(
            .responseTooLarge, "\(transfer.host): the answer's header fields are longer than \(transfer.maximumHeaderSize) bytes")
        return 0
    }
    let line = data.withMemoryRebound(to: UInt8.self, capacity: length) {
        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
    }
    if line.hasPrefix("HTTP/") {
        // A new status line (after a 1xx, say): fields of an earlier answer do not belong to this one.
        transfer.retryAfter = nil
    } else if let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == "retry-after" {
        transfer.retryAfter = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
    }
    return length
}

/// CURLOPT_OPENSOCKETFUNCTION: every address curl is about to connect to, whichever resolver gave it, is checked
/// against the egress policy here, so a name that resolves (or re-resolves) to a forbidden address never gets a
/// connection. A refusal fails the whole transfer, as an answer that mixes allowed and forbidden addresses is
/// refused as a whole elsewhere (docs/egress.md).
func curlOpenSocket(_ userdata: UnsafeMutableRawPointer?, _ purpose: curlsocktype, _ address: UnsafeMutablePointer<curl_sockaddr>?) -> curl_socket_t {
    guard let userdata, let address else { return CURL_SOCKET_BAD }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    if transfer.stoppedFor != nil { return CURL_SOCKET_BAD }
    var bytes = [UInt8](repeating: 0, count: 16)
    let count = Int(pz_curl_sockaddr_ip(address, &bytes))
    guard count > 0, let ip = IPAddress(bytes: Array(bytes.prefix(count))) else {
        transfer.stoppedFor = CurlHTTPError(.forbiddenAddress, "\(transfer.host) resolved to an address that is not IPv4 or IPv6")
        return CURL_SOCKET_BAD
    }
    if let refusal = transfer.policy.refusal(for: ip) {
        transfer.stoppedFor = CurlHTTPError(.forbiddenAddress, "\(transfer.host) resolves to \(refusal.message)")
        return CURL_SOCKET_BAD
    }
    return pz_curl_open_socket(address)
}
