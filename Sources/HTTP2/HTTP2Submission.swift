/// Requests handed over together by ``HTTP2Client/submit(_:to:answers:)``: a handle to abandon those still pending.
public struct HTTP2Submission: Sendable {
    let core: ClientCore
    let loop: HTTP2EventLoop
    let ids: [UInt64]

    /// Abandons every request of the submission still pending: each reports `CancellationError` (a request
    /// already answered is not affected). Returns at once; the work runs on the event loop.
    public func cancel() {
        guard !ids.isEmpty else { return }
        let core = self.core
        let ids = self.ids
        // Queued by `submit` before this can run (the loop runs its work in order), so an id that is not
        // pending has finished: nothing to remember for it.
        loop.execute { for id in ids { core.cancelIfPending(id: id) } }
    }
}
