internal import CCurl
internal import CPushizoCurlShims
import Foundation
import HTTP2
import Synchronization

/// A small HTTP/1.1 and HTTP/2 client for endpoints nobody vouches for (webhook receivers), on libcurl's multi
/// interface driven by a thread of its own (`pushizo-curl`): callers await answers, the cooperative pool never
/// waits on a socket, and one stalled receiver holds only its own transfer, until its timeout.
///
/// Every request: redirects off (a 3xx is an answer), proxies from the environment ignored, `https` only
/// unless the egress policy allows private networks, TLS verified against the system's or the configured CA
/// file, the URL's host checked before anything and every address curl connects to checked as it connects
/// (``CurlHTTPClientConfiguration/egressPolicy``), content and header fields read up to their bounds, no
/// decompression (no `Accept-Encoding`). curl's own threaded resolver looks names up; the connect timeout
/// covers the lookup.
///
/// The provider HTTP/2 client (`HTTP2Client`) stays the providers' own: this one is for plain request-answer
/// exchanges with many unknown hosts, where curl's HTTP/1.1 and its connection cache do the work.
public final class CurlHTTPClient: Sendable {
    public let configuration: CurlHTTPClientConfiguration
    private let multi: MultiHandle
    private let state = Mutex<SharedState>(SharedState())
    private let stopped = Mutex<[CheckedContinuation<Void, Never>]?>([])

    private struct SharedState {
        var submissions: [Submission] = []
        var isShuttingDown = false
        /// The thread has freed the multi handle (and with it every connection).
        var isClosed = false
    }

    private struct Submission: Sendable {
        var request: CurlHTTPRequest
        var host: String
        var completion: @Sendable (Result<CurlHTTPResponse, CurlHTTPError>) -> Void
    }

    /// The multi handle: created here, used only on the client's thread, except `curl_multi_wakeup`, which libcurl
    /// documents as callable from any thread. Woken and freed under the `state` lock (``SharedState/isClosed``),
    /// so a `send` or `shutdown` racing the thread's end never wakes a freed handle.
    private struct MultiHandle: @unchecked Sendable {
        let pointer: UnsafeMutableRawPointer
    }

    /// `curl_global_init` once per process, before the first handle (it is not safe beside other curl calls).
    private static let globalInit: Void = {
        // CURL_GLOBAL_DEFAULT (CURL_GLOBAL_SSL | CURL_GLOBAL_WIN32), a macro Swift does not import.
        let code = curl_global_init(3)
        precondition(code == CURLE_OK, "curl_global_init failed: \(String(cString: curl_easy_strerror(code)))")
    }()

    /// Starts the client's thread, which keeps the client alive until ``shutdown()``.
    public init(configuration: CurlHTTPClientConfiguration = .init()) {
        _ = Self.globalInit
        self.configuration = configuration
        guard let multi = curl_multi_init() else { preconditionFailure("curl_multi_init failed (out of memory)") }
        self.multi = MultiHandle(pointer: multi)
        let thread = Thread { [self] in
            Thread.current.name = "pushizo-curl"
            run()
        }
        thread.start()
    }

    /// Sends `request` and waits for its answer (any status) or the reason there is none. The calling task's
    /// cancellation is not observed: the timeouts bound the wait.
    /// - Throws: ``CurlHTTPError``; checks that need no network (URL, scheme, host spelling, literal address,
    ///   header bytes) fail before anything is sent.
    public func send(_ request: CurlHTTPRequest) async throws(CurlHTTPError) -> CurlHTTPResponse {
        let host = try check(request)
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<CurlHTTPResponse, CurlHTTPError>, Never>) in
            let multi = multi
            let accepted = state.withLock { state -> Bool in
                guard !state.isShuttingDown else { return false }
                state.submissions.append(Submission(request: request, host: host) { continuation.resume(returning: $0) })
                curl_multi_wakeup(multi.pointer)
                return true
            }
            if !accepted {
                continuation.resume(returning: .failure(CurlHTTPError(.shutdown, "\(host): the client is shut down")))
            }
        }
        return try result.get()
    }

    /// Fails what is waiting or running with ``CurlHTTPError/Code/shutdown``, stops the thread and returns when
    /// it has freed every handle.
    public func shutdown() async {
        let multi = multi
        state.withLock { state in
            state.isShuttingDown = true
            if !state.isClosed { curl_multi_wakeup(multi.pointer) }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = stopped.withLock { waiters -> Bool in
                guard waiters != nil else { return true }
                waiters?.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// The checks made before a request is queued; returns the URL's host for messages.
    private func check(_ request: CurlHTTPRequest) throws(CurlHTTPError) -> String {
        let parts = try CurlURLParts(parsing: request.url)
        guard parts.scheme == "https" || parts.scheme == "http" else {
            throw CurlHTTPError(.invalidURL, "\(parts.host): the scheme is neither https nor http")
        }
        let policy = configuration.egressPolicy
        let refusal = Result { () throws(EgressRefusal) in try policy.check(scheme: parts.scheme, host: parts.host) }
        if case .failure(let refusal) = refusal { throw CurlHTTPError(refusal) }
        func isFieldSafe(_ text: String) -> Bool { !text.utf8.contains { $0 == 0 || $0 == 0x0a || $0 == 0x0d } }
        guard !request.method.isEmpty, request.method.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }),
            request.headers.allSatisfy({ !$0.name.isEmpty && !$0.name.contains(":") && isFieldSafe($0.name) && isFieldSafe($0.value) })
        else {
            throw CurlHTTPError(.invalidRequest, "\(parts.host): the method or a header field holds a byte HTTP does not allow there")
        }
        return parts.host
    }

    // MARK: The client's thread

    private func run() {
        let multi = multi.pointer
        _ = pz_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 64)
        var running: [UnsafeMutableRawPointer: CurlTransfer] = [:]
        var waiting: [Submission] = []
        while true {
            let (new, shuttingDown) = state.withLock { state in
                defer { state.submissions = [] }
                return (state.submissions, state.isShuttingDown)
            }
            waiting += new
            if shuttingDown {
                for (easy, transfer) in running {
                    curl_multi_remove_handle(multi, easy)
                    transfer.finish(.failure(CurlHTTPError(.shutdown, "\(transfer.host): the client is shut down")))
                }
                for submission in waiting {
                    submission.completion(.failure(CurlHTTPError(.shutdown, "\(submission.host): the client is shut down")))
                }
                break
            }
            while running.count < max(1, configuration.maximumConcurrentTransfers), !waiting.isEmpty {
                let submission = waiting.removeFirst()
                switch start(submission) {
                case .success(let transfer):
                    running[transfer.easy] = transfer
                    curl_multi_add_handle(multi, transfer.easy)
                case .failure(let error):
                    submission.completion(.failure(error))
                }
            }
            var stillRunning: Int32 = 0
            curl_multi_perform(multi, &stillRunning)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                    let transfer = running.removeValue(forKey: easy)
                else { continue }
                let code = message.pointee.data.result
                curl_multi_remove_handle(multi, easy)
                transfer.finish(transfer.result(of: code))
            }
            // Sleeps until a socket is ready, a curl timer is due or `curl_multi_wakeup` (a new request, shutdown).
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
        // Closes every cached connection too.
        state.withLock { state in
            curl_multi_cleanup(multi)
            state.isClosed = true
        }
        let waiters = stopped.withLock { waiters in
            defer { waiters = nil }
            return waiters ?? []
        }
        for waiter in waiters { waiter.resume() }
    }

    /// An easy handle set up for `submission`, or why none could be.
    private func start(_ submission: Submission) -> Result<CurlTransfer, CurlHTTPError> {
        guard let easy = curl_easy_init() else {
            return .failure(CurlHTTPError(.transferFailed, "\(submission.host): curl_easy_init failed"))
        }
        let request = submission.request
        var headerList: UnsafeMutablePointer<curl_slist>?
        for field in request.headers {
            guard let appended = curl_slist_append(headerList, "\(field.name): \(field.value)") else {
                curl_slist_free_all(headerList)
                curl_easy_cleanup(easy)
                return .failure(CurlHTTPError(.transferFailed, "\(submission.host): out of memory"))
            }
            headerList = appended
        }
        // curl adds `Expect: 100-continue` to larger bodies over HTTP/1.1 and waits for the interim answer: a
        // receiver that never sends one would cost a second per request.
        headerList = curl_slist_append(headerList, "Expect:") ?? headerList
        // Without a type of the caller's, none: curl would otherwise call every body a form.
        if !request.headers.contains(where: { $0.name.lowercased() == "content-type" }) {
            headerList = curl_slist_append(headerList, "Content-Type:") ?? headerList
        }
        let transfer = CurlTransfer(
            easy: easy, host: submission.host, policy: configuration.egressPolicy,
            maximumBodySize: configuration.maximumResponseBodySize, maximumHeaderSize: configuration.maximumResponseHeaderSize,
            headerList: headerList, completion: submission.completion)
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        let policy = configuration.egressPolicy
        var codes: [CURLcode] = [
            pz_curl_easy_setopt_string(easy, CURLOPT_URL, request.url),
            pz_curl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, policy.allowsPrivateNetworks ? "http,https" : "https"),
            pz_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method),
            pz_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1),
            pz_curl_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 0),
            // An empty proxy switches off every proxy, those named by http_proxy and friends in the environment too.
            pz_curl_easy_setopt_string(easy, CURLOPT_PROXY, ""),
            pz_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)),
            pz_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1),
            pz_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2),
            pz_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(configuration.connectTimeout)),
            pz_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Self.milliseconds(configuration.totalTimeout)),
            pz_curl_easy_setopt_string(easy, CURLOPT_USERAGENT, configuration.userAgent),
            pz_curl_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, headerList),
            pz_curl_easy_setopt_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)),
            pz_curl_easy_setopt_write_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteBody),
            pz_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context),
            pz_curl_easy_setopt_write_callback(easy, CURLOPT_HEADERFUNCTION, curlReadHeader),
            pz_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context),
            pz_curl_easy_setopt_opensocket_callback(easy, curlOpenSocket),
            pz_curl_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, context),
        ]
        // COPYPOSTFIELDS copies the body into the handle (after POSTFIELDSIZE, which says how long it is), so
        // nothing here has to outlive this call.
        let content = request.body.isEmpty ? [0] : request.body
        codes.append(content.withUnsafeBytes { pz_curl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress)) })
        if let caFile = configuration.caFile {
            codes.append(pz_curl_easy_setopt_string(easy, CURLOPT_CAINFO, caFile))
        }
        if let failed = codes.first(where: { $0 != CURLE_OK }) {
            let error = CurlTransfer.error(for: failed, host: submission.host)
            transfer.discard()
            return .failure(CurlHTTPError(error.code == .transferFailed ? .invalidRequest : error.code, error.message))
        }
        return .success(transfer)
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        max(1, Int(duration / .milliseconds(1)))
    }
}
