import DeliveryCore
import Foundation
import MetricsServer

/// Serves the status page (``FleetStatusPage``) from a report read at most once per ``cacheLifetime``: whatever
/// the number of viewers, a worker runs one ``FleetStatusStore/read(on:limits:app:)`` (the `status` command's
/// queries, bounded as they are: docs/status.md) per ``cacheLifetime`` at most, on the listener's own session
/// (``ListenerDatabase``), never on a connection of the pool the claims use. Called on the listener connection's
/// thread (never Swift's cooperative pool): the first request that finds the report stale reads it; requests
/// meanwhile get the previous report at once or, when there is none yet, wait for that read (at most
/// ``firstReadWait``).
///
/// `@unchecked Sendable`: ``cached`` and ``reading`` are read and written only while ``condition`` is locked.
final class StatusPageSource: @unchecked Sendable {
    /// How long a report is served before it is read again.
    static let cacheLifetime: Duration = .seconds(5)
    /// The page's `refresh` interval, in seconds.
    static let refreshSeconds = 10
    /// How long a request waits for the first report before it is answered that there is none yet.
    static let firstReadWait: TimeInterval = 30

    /// A report, or why it could not be read (already free of secrets), and when.
    private struct Cached {
        var outcome: Result<FleetStatus, ReadFailure>
        var readAt: ContinuousClock.Instant
    }

    /// Why no report could be read: one line, free of secrets.
    struct ReadFailure: Error {
        var reason: String
    }

    private let read: @Sendable () -> Result<FleetStatus, ReadFailure>
    private let condition = NSCondition()
    private var cached: Cached?
    private var reading = false

    /// - Parameter read: reads a report (blocking: on the calling thread).
    init(read: @escaping @Sendable () -> Result<FleetStatus, ReadFailure>) {
        self.read = read
    }

    /// Reads on `database`'s session, telling `onRead` whether the read reached the database (readiness news).
    convenience init(database: ListenerDatabase, onRead: @escaping @Sendable (_ succeeded: Bool) -> Void) {
        self.init {
            do {
                let status = try database.withSession { try FleetStatusStore.read(on: $0) }
                onRead(true)
                return .success(status)
            } catch {
                if !(error is FleetStatusSchemaError) { onRead(false) }
                return .failure(ReadFailure(reason: WorkerProbes.reason(error)))
            }
        }
    }

    /// `GET /`: 200 with the page, or 503 with a page that says why no report could be read.
    func page(now: ContinuousClock.Instant = .now) -> ListenerPage {
        condition.lock()
        if let current = cached, now - current.readAt < Self.cacheLifetime {
            condition.unlock()
            return render(current, now: now)
        }
        if !reading {
            reading = true
            condition.unlock()
            let fresh = Cached(outcome: read(), readAt: now)
            condition.lock()
            cached = fresh
            reading = false
            condition.broadcast()
            condition.unlock()
            return render(fresh, now: now)
        }
        // Another request is reading: the previous report now, or the first one when it comes.
        let deadline = Date(timeIntervalSinceNow: Self.firstReadWait)
        while cached == nil, reading, condition.wait(until: deadline) {}
        let current = cached
        condition.unlock()
        guard let current else {
            return html(status: 503, FleetStatusPage.unavailable(reason: "not read yet", refreshSeconds: Self.refreshSeconds))
        }
        return render(current, now: now)
    }

    private func render(_ cached: Cached, now: ContinuousClock.Instant) -> ListenerPage {
        switch cached.outcome {
        case .success(let status):
            let freshness = FleetStatusPage.Freshness(
                ageSeconds: max(0, (now - cached.readAt).inSeconds), refreshSeconds: Self.refreshSeconds)
            return html(status: 200, FleetStatusPage.html(status, freshness: freshness))
        case .failure(let failure):
            return html(status: 503, FleetStatusPage.unavailable(reason: failure.reason, refreshSeconds: Self.refreshSeconds))
        }
    }

    private func html(status: Int, _ body: String) -> ListenerPage {
        ListenerPage(status: status, contentType: "text/html; charset=utf-8", body: body)
    }
}
