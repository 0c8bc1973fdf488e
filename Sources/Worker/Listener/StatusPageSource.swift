import DeliveryCore
import Foundation
import MetricsServer
import Synchronization

/// Serves the status page (``FleetStatusPage``) from a report read at most once per ``cacheLifetime``: whatever
/// the number of viewers, a worker runs one ``FleetStatusStore/read(on:limits:app:)`` (the `status` command's
/// queries, bounded as they are: docs/status.md) per ``cacheLifetime`` at most, on the listener's own session
/// (``ListenerDatabase``), never on a connection of the pool the claims use. Called on the listener connection's
/// thread (never Swift's cooperative pool): the first request that finds the report stale reads it; requests
/// meanwhile get the previous report at once, or, when there is none yet, wait for that read.
final class StatusPageSource: Sendable {
    /// How long a report is served before it is read again.
    static let cacheLifetime: Duration = .seconds(5)
    /// The page's `refresh` interval, in seconds.
    static let refreshSeconds = 10

    private struct Cached {
        /// The report, or why it could not be read (already free of secrets).
        var outcome: Result<FleetStatus, ReadFailure>
        var readAt: ContinuousClock.Instant
    }

    private struct ReadFailure: Error {
        var reason: String
    }

    private let database: ListenerDatabase
    /// Told whether each read reached the database (readiness news).
    private let onRead: @Sendable (_ succeeded: Bool) -> Void
    private let cached = Mutex<Cached?>(nil)
    private let reading = Atomic<Bool>(false)

    init(database: ListenerDatabase, onRead: @escaping @Sendable (Bool) -> Void = { _ in }) {
        self.database = database
        self.onRead = onRead
    }

    /// `GET /`: 200 with the page, or 503 with a page that says why no report could be read.
    func page() -> ListenerPage {
        let now = ContinuousClock.now
        let current = cached.withLock { $0 }
        if let current, now - current.readAt < Self.cacheLifetime { return render(current, now: now) }
        if !reading.exchange(true, ordering: .acquiringAndReleasing) {
            defer { reading.store(false, ordering: .releasing) }
            let read = self.read()
            cached.withLock { $0 = read }
            return render(read, now: .now)
        }
        if let current { return render(current, now: now) }
        // The first read is under way: its end releases the session.
        try? database.withSession { _ in }
        guard let read = cached.withLock({ $0 }) else {
            return html(status: 503, FleetStatusPage.unavailable(reason: "not read yet", refreshSeconds: Self.refreshSeconds))
        }
        return render(read, now: .now)
    }

    private func read() -> Cached {
        do {
            let status = try database.withSession { try FleetStatusStore.read(on: $0) }
            onRead(true)
            return Cached(outcome: .success(status), readAt: .now)
        } catch {
            if !(error is FleetStatusSchemaError) { onRead(false) }
            return Cached(outcome: .failure(ReadFailure(reason: WorkerProbes.reason(error))), readAt: .now)
        }
    }

    private func render(_ cached: Cached, now: ContinuousClock.Instant) -> ListenerPage {
        switch cached.outcome {
        case .success(let status):
            let freshness = FleetStatusPage.Freshness(
                ageSeconds: (now - cached.readAt).inSeconds, refreshSeconds: Self.refreshSeconds)
            return html(status: 200, FleetStatusPage.html(status, freshness: freshness))
        case .failure(let failure):
            return html(status: 503, FleetStatusPage.unavailable(reason: failure.reason, refreshSeconds: Self.refreshSeconds))
        }
    }

    private func html(status: Int, _ body: String) -> ListenerPage {
        ListenerPage(status: status, contentType: "text/html; charset=utf-8", body: body)
    }
}
