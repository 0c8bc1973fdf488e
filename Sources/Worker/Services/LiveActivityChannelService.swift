import Foundation
import Postgres

/// Live Activity broadcast channels' loop (docs/live-activity-channels.md), in a worker that sends: it reconciles
/// one `live_activity_channels` row behind its revision with APNs and sends one due channel send, in turn, and
/// polls every `PUSHIZO_POLL_INTERVAL` while there is neither. Each row is leased in a short transaction of its
/// own (``LiveActivityChannelStore``), so across the fleet one worker acts on each change and each send at a time,
/// and no row lock is held during a request. Returns after a stop request, once the request under way is settled.
struct LiveActivityChannelService: Service {
    let context: WorkerLoopContext
    let sender: LiveActivityChannelSender

    init(context: WorkerLoopContext, sender: LiveActivityChannelSender) {
        self.context = context
        self.sender = sender
    }

    func run() async {
        let configuration = context.configuration
        let logger = context.logger.named("live-activity-channels")
        let database = context.database
        // Signalled by a stop request, so a stop is seen at once rather than a poll interval later.
        let wake = context.liveActivityChannelWake
        // Failures in a row: while the database cannot be reached the loop backs off (up to 5 s) and warns once.
        var failures = 0
        while !context.isStopping {
            var worked = false
            do {
                if let change = try await database.withConnection({
                    try LiveActivityChannelStore.leaseChange(lease: configuration.lease, on: $0)
                }) {
                    worked = true
                    let result = await sender.reconcile(change)
                    let written = try await database.withConnection {
                        try LiveActivityChannelStore.record(result, of: change, on: $0)
                    }
                    if written { Self.count(result, in: context.metrics) }
                    logger.info(
                        "live activity channel reconciled",
                        ["channel_row": change.id.uuidString.lowercased(), "desired_state": change.desiredState,
                         "result": "\(result)", "written": "\(written)"])
                }
                if let send = try await database.withConnection({
                    try LiveActivityChannelStore.leaseSend(workerID: configuration.workerID, lease: configuration.lease, on: $0)
                }) {
                    worked = true
                    let settlement = await sender.send(send)
                    let settled = try await database.withConnection {
                        try LiveActivityChannelStore.settle(
                            send, event: settlement.event, reason: settlement.reason, detail: settlement.detail,
                            retryAt: settlement.retryAt, on: $0)
                    }
                    // Counted once written: a settlement another worker's lease overtook is that worker's to count.
                    if settled { context.metrics.liveActivityChannelSendSettled(event: settlement.event, reason: settlement.reason) }
                }
                failures = 0
            } catch {
                // The lease runs out and the row is taken again; nothing is lost.
                if failures == 0 {
                    logger.warning("live activity channel round failed; retried", ["error": "\(error)"])
                } else {
                    logger.debug("live activity channel round failed again", ["failures": "\(failures + 1)", "error": "\(error)"])
                }
                failures += 1
                _ = await wake.wait(timeout: min(configuration.pollInterval * (1 << min(failures, 10)), .seconds(5)))
                continue
            }
            if !worked { _ = await wake.wait(timeout: configuration.pollInterval) }
        }
    }

    /// Counts a reconciliation written (`pushizo_live_activity_channel_changes_total`).
    static func count(_ result: LiveActivityChannelStore.ChangeResult, in metrics: WorkerMetrics) {
        switch result {
        case .active: metrics.liveActivityChannelChanged(.active, reason: nil)
        case .deleted: metrics.liveActivityChannelChanged(.deleted, reason: nil)
        case .failed(let reason, _, _): metrics.liveActivityChannelChanged(.failed, reason: reason)
        case .retry(_, let reason, _): metrics.liveActivityChannelChanged(.retrying, reason: reason)
        }
    }
}
