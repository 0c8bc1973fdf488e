import DeliveryCore
import Foundation
import HTTP2
import Synchronization

/// One sender's ``OriginPacing``, shared by its tasks: every answer from an origin is counted, and a request
/// withdrawn unsent from a busy origin (`HTTP2Error.originBusy`) gets the time its delivery comes back
/// (``ProviderTransport``).
final class OriginPacer: Sendable {
    private let pacing: Mutex<OriginPacing>

    /// - Parameter requestTimeout: how long a request may take: an origin answering at all answers at least its
    ///   stream cap (`HTTP2ClientConfiguration.maximumInFlightPerOrigin`) in that time, the pace assumed before its
    ///   first answers.
    init(requestTimeout: Duration) {
        let streams = Double(HTTP2ClientConfiguration().maximumInFlightPerOrigin)
        pacing = Mutex(OriginPacing(minimumRate: streams / max(requestTimeout.inSeconds, 1)))
    }

    /// The origin answered a request (any HTTP status).
    func answered(_ origin: String, now: Date = Date()) {
        pacing.withLock { $0.answered(origin, now: now) }
    }

    /// A request to `origin` was withdrawn unsent: when its delivery may be sent again.
    func withdrawn(_ origin: String, now: Date = Date()) -> Date {
        pacing.withLock { $0.withdrawn(origin, now: now, unitRandom: Double.random(in: 0..<1)) }
    }
}
