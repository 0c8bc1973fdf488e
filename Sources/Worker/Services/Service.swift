/// A long-running part of the worker (a loop), in swift-service-lifecycle's shape: one `run()` holding all its
/// work, which returns once a stop has been requested and the part's own work after it is done (a claim loop's
/// sends, a completer's final flush). Stops are requested through the owner (``WorkerService/requestStop()``),
/// not by cancelling the task: a loop must finish its iteration (a claimed batch is leased and must be sent).
protocol Service: Sendable {
    /// Runs until a stop is requested. Errors are the loop's own to retry or log: the worker's loops do not
    /// throw, a test's may.
    func run() async throws
}
