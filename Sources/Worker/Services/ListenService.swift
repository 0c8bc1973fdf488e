import Postgres

/// `LISTEN pushizo_wakeup` on a connection of its own: wakes the expand loops on `notifications`, the claim loop
/// on anything else, and all of them after a reconnection (notifications may have been missed). Hints only: every
/// loop polls as a floor. Returns after a stop request (the listener's shutdown ends its event stream).
struct ListenService: Service {
    let context: WorkerLoopContext
    let listener: PostgresListener

    func run() async {
        let database = context.database
        for await event in listener.events() {
            if context.isStopping { break }
            switch event {
            case .notification(let notification):
                // A hint from one of this worker's own transactions is for the rest of the fleet: the loop that
                // committed it already acts on its work (the expand loops wake the claim loop themselves once
                // deliveries are committed, and keep going while they find notifications). Acted on, each
                // small-notification pass woke the expand loop for an empty pass (its own status update) and
                // the claim loop for an empty claim (its own insert).
                if database.isPooledSession(processID: notification.processID) { continue }
                if notification.payload == "notifications" {
                    context.expansionWake.signal()
                    context.chunkWake.signal()
                } else {
                    context.claimWake.signal()
                }
            case .reconnected:
                // The server may have restarted: the pool's sessions are known again as they are used, so a
                // dead one's process ID, which a new session of another client may get, is not taken for ours.
                database.forgetSessions()
                // Notifications may have been missed while disconnected: look at both queues now.
                context.expansionWake.signal()
                context.chunkWake.signal()
                context.claimWake.signal()
            }
        }
    }
}
