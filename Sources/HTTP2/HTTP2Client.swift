import Synchronization

/// An HTTP/2 client with a connection pool per origin (RFC 9113). Requests share connections up to the peer's
/// SETTINGS_MAX_CONCURRENT_STREAMS and `maximumInFlightPerOrigin`; the rest wait in the origin's queue, served
/// tenant by tenant in turn (`HTTP2Request.tenant`, each within its share of the origin's streams); up to
/// `maximumConnectionsPerOrigin` connections are opened per origin and `maximumConnections` in all; idle ones
/// close after `idleTimeout` (decisions: `PoolStateMachine`). GOAWAY and REFUSED_STREAM are handled by resending
/// unprocessed requests on a fresh connection (RFC 9113 §6.8, §8.7). Responses are read within the
/// configuration's body and header bounds.
///
/// All connection state lives on `eventLoop`'s thread; `send` only hands work to it and awaits a continuation.
public final class HTTP2Client: Sendable {
    /// The loop whose thread owns this client's connections.
    public let eventLoop: HTTP2EventLoop
    let core: ClientCore
    private let nextID = Atomic<UInt64>(1)

    /// Creates the client; connections open lazily on the first request to each origin. Bad TLS settings (an
    /// unreadable PEM file) surface as `.tlsHandshakeFailed` from `send`.
    public init(eventLoop: HTTP2EventLoop, tls: TLSClientConfiguration = .init(), configuration: HTTP2ClientConfiguration = .init()) {
        self.eventLoop = eventLoop
        self.core = ClientCore(loop: eventLoop, tls: tls, configuration: configuration)
        let core = self.core
        eventLoop.execute { core.attach() }
    }

    /// Sends `request` to `origin` over a pooled connection and returns the complete response (any status).
    /// - Throws: `HTTP2Error` (`.connectFailed`, `.connectTimeout`, `.tlsHandshakeFailed`,
    ///   `.certificateVerificationFailed`, `.alpnNotNegotiated`, `.connectionClosed`, `.goAway`, `.refusedStream`,
    ///   `.streamReset`, `.requestTimeout`, `.protocolError`, `.shutdown`, `.responseTooLarge` past a read bound);
    ///   `.invalidRequest` at once, before
    ///   anything is queued, for a header field HTTP/2 forbids (RFC 9113 §8.2.1, §8.2.2); `CancellationError` when
    ///   the calling task is cancelled (the stream is reset with CANCEL; a task cancelled just before handing the
    ///   request over that then stalls for over a second before handing it over is answered as if never
    ///   cancelled). Once `send` has thrown, the request is never sent afterwards (it is dropped from the
    ///   queue, or its stream reset before its HEADERS leave).
    public func send(_ request: HTTP2Request, to origin: HTTP2Origin) async throws -> HTTP2Response {
        if let invalid = request.validationError() { throw invalid }
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let core = self.core
        let loop = self.eventLoop
        return try await withTaskCancellationHandler {
            // Unchecked: the request resumes it exactly once (`PendingRequest.finish`), or the refusal below does;
            // a checked one costs an allocation per request.
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<HTTP2Response, any Error>) in
                let accepted = loop.execute { core.enqueue(id: id, request, origin, continuation) }
                if !accepted {
                    continuation.resume(throwing: HTTP2Error(.shutdown, "the event loop is shut down"))
                }
            }
        } onCancel: {
            loop.execute { core.cancel(id: id) }
        }
    }

    /// Sends several requests to `origin` with one hand-off to the event loop, and returns when all are done:
    /// cheaper than one `send` per request when a caller already holds a batch (fewer thread wake-ups).
    /// Result `i` belongs to `requests[i]`; failures are `HTTP2Error` as for `send` (an invalid request fails
    /// alone with `.invalidRequest`), or `CancellationError` when the calling task is cancelled.
    public func send(_ requests: [HTTP2Request], to origin: HTTP2Origin) async -> [Result<HTTP2Response, any Error>] {
        if requests.isEmpty { return [] }
        final class Collector: @unchecked Sendable {
            // Written by `submit`'s `answers`, on the loop thread (or the caller's, for invalid requests, before any
            // is queued), under the lock below.
            var results: [Result<HTTP2Response, any Error>]
            var remaining: Int
            var continuation: CheckedContinuation<[Result<HTTP2Response, any Error>], Never>?
            init(count: Int) {
                results = Array(repeating: .failure(CancellationError()), count: count)
                remaining = count
            }
        }
        let collector = Collector(count: requests.count)
        let lock = Mutex(())
        let cancellation = HTTP2SubmissionCancellation()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                collector.continuation = continuation
                cancellation.add(submit(requests, to: origin) { answers in
                    let done = lock.withLock { _ -> Bool in
                        for answer in answers { collector.results[answer.index] = answer.result }
                        collector.remaining -= answers.count
                        return collector.remaining == 0
                    }
                    if done { collector.continuation?.resume(returning: collector.results) }
                })
            }
        } onCancel: {
            cancellation.cancel()
        }
    }

    /// Hands several requests to `origin`'s pool in one hand-off to the event loop and reports their results as
    /// they arrive, so one slow answer holds back none of the others (the worker judges and completes each
    /// delivery the moment its answer is in). Results are reported in bursts: every request of the submission
    /// that finished in one turn of the event loop (the responses of one socket read, say) is reported in one
    /// call at the end of that turn, so a caller that hands them to another thread wakes it once per burst, not
    /// once per response.
    ///
    /// - Parameter answers: called with each burst; every request's result is in exactly one burst, with its
    ///   index in `requests` (failures as for ``send(_:to:)``). Called on the event loop's thread, so it must be
    ///   quick and must not block; requests HTTP/2 refuses to carry (`.invalidRequest`) are reported at once, in
    ///   one call on the caller's thread, before anything is queued.
    /// - Returns: the submission, whose ``HTTP2Submission/cancel()`` abandons every request still pending
    ///   (each then reports `CancellationError`; a stream already open is reset with CANCEL).
    public func submit(
        _ requests: [HTTP2Request], to origin: HTTP2Origin, answers: @escaping @Sendable ([HTTP2Answer]) -> Void
    ) -> HTTP2Submission {
        let first = nextID.wrappingAdd(UInt64(requests.count), ordering: .relaxed).oldValue
        // Labelled as `enqueue` takes them: an unlabelled tuple array would be converted, element by element.
        var valid: [(index: Int, request: HTTP2Request)] = []
        valid.reserveCapacity(requests.count)
        var refused: [HTTP2Answer] = []
        for (index, request) in requests.enumerated() {
            if let invalid = request.validationError(after: valid.last?.request) {
                refused.append(HTTP2Answer(index: index, result: .failure(invalid)))
            } else {
                valid.append((index, request))
            }
        }
        if !refused.isEmpty { answers(refused) }
        let submission = HTTP2Submission(core: core, loop: eventLoop, ids: valid.map { first + UInt64($0.0) })
        if valid.isEmpty { return submission }
        let core = self.core
        let batch = UncheckedBox(valid)
        let accepted = eventLoop.execute {
            core.enqueue(firstID: first, batch.value, origin, burst: AnswerBurst(core: core, deliver: answers))
        }
        if !accepted {
            answers(valid.map { HTTP2Answer(index: $0.0, result: .failure(HTTP2Error(.shutdown, "the event loop is shut down"))) })
        }
        return submission
    }

    /// The pool's figures now, read on the event loop's thread (the caller awaits; nothing blocks). All
    /// zeros once the loop is shut down.
    public func statistics() async -> HTTP2ClientStatistics {
        let core = self.core
        return await withCheckedContinuation { (continuation: CheckedContinuation<HTTP2ClientStatistics, Never>) in
            if !eventLoop.execute({ continuation.resume(returning: core.machine.totals) }) {
                continuation.resume(returning: HTTP2ClientStatistics())
            }
        }
    }

    /// Graceful shutdown: requests already accepted finish (queued ones included), new ones throw `.shutdown`;
    /// then every connection sends GOAWAY(NO_ERROR) and closes. Returns when that is done.
    public func shutdown() async {
        let core = self.core
        let loop = self.eventLoop
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !loop.execute({ core.shutdown(continuation) }) { continuation.resume() }
        }
    }
}
