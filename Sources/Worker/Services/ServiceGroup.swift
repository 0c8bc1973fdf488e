/// Runs a worker's services and shuts them down in one documented order (swift-service-lifecycle's
/// `ServiceGroup`, reduced to what the worker needs):
///
/// 1. every service of ``background`` starts, and ``lead`` (the claim loop) with them;
/// 2. a stop request makes ``lead`` stop claiming; it returns once its in-flight sends have finished (or its
///    shutdown timeout cancelled them);
/// 3. then ``afterLead``'s steps run one after another, in order (the `LISTEN` connection closes, the completer
///    is told to flush what is left by the shutdown deadline, the expand loops are woken to see the stop);
/// 4. ``run()`` returns once every background service has returned (the completer after its final flush).
///
/// Closing the connections (HTTP/2 clients, the database pool) is the caller's, after ``run()`` returns
/// (``WorkerRuntime/run()``). A service that throws is logged by the caller's `failed` and does not stop the others.
struct ServiceGroup: Sendable {
    /// Services that run until a stop request, beside the lead.
    var background: [any Service]
    /// The service whose end starts the shutdown steps: the claim loop (or the expand-only worker's wait).
    var lead: any Service
    /// Steps run in order once ``lead`` has returned.
    var afterLead: [@Sendable () async -> Void]
    /// Called with a service's error (none of the worker's own throw).
    var failed: @Sendable (any Error) -> Void = { _ in }

    func run() async {
        await withTaskGroup(of: Void.self) { group in
            for service in background {
                group.addTask { await run(service) }
            }
            await run(lead)
            for step in afterLead { await step() }
            await group.waitForAll()
        }
    }

    private func run(_ service: any Service) async {
        do { try await service.run() } catch { failed(error) }
    }
}
