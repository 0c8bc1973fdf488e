import DeliveryCore
import Foundation
import Synchronization

/// One sender's ``OriginPacing``, shared by its tasks: every answer from an origin is counted, and a request
/// withdrawn unsent from a busy origin (`HTTP2Error.originBusy`) gets the time its delivery comes back
/// (``ProviderTransport``).
final class OriginPacer: Sendable {
    private let pacing = Mutex(OriginPacing())

    /// The origin answered a request (any HTTP status).
    func answered(_ origin: String, now: Date = Date()) {
        pacing.withLock { $0.answered(origin, now: now) }
    }

    /// A request to `origin` was withdrawn unsent: when its delivery may be sent again.
    func withdrawn(_ origin: String, now: Date = Date()) -> Date {
        pacing.withLock { $0.withdrawn(origin, now: now, unitRandom: Double.random(in: 0..<1)) }
    }
}
