import Synchronization

/// Cancels submissions made from a task when that task is cancelled, whether the cancellation comes before or
/// after a submission is made: call ``add(_:)`` with each submission and ``cancel()`` from the task's
/// cancellation handler.
public final class HTTP2SubmissionCancellation: Sendable {
    private let state = Mutex<(cancelled: Bool, submissions: [HTTP2Submission])>((false, []))

    public init() {}

    /// Keeps `submission` to cancel later, or cancels it at once when ``cancel()`` was already called.
    public func add(_ submission: HTTP2Submission) {
        let cancelled = state.withLock { state -> Bool in
            if !state.cancelled { state.submissions.append(submission) }
            return state.cancelled
        }
        if cancelled { submission.cancel() }
    }

    /// Cancels every submission added so far and every one added from now on.
    public func cancel() {
        let submissions = state.withLock { state in
            state.cancelled = true
            defer { state.submissions = [] }
            return state.submissions
        }
        for submission in submissions { submission.cancel() }
    }
}
