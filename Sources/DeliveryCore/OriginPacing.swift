import Foundation

/// When deliveries withdrawn from a busy origin come back, as a value without I/O: a ticket per withdrawal, spaced
/// by the rate at which the origin has been answering, so that a push service slower than its backlog sees each
/// of its deliveries claimed again about when it could take it, not every few seconds.
///
/// The HTTP/2 client withdraws a request that waited `maximumQueueWait` for a stream, unsent (`origin_busy`), and
/// the worker gives the delivery's slot back (docs/completions-and-retries.md). Brought back after a fixed or
/// age-based backoff, a backlog of `n` deliveries at an origin answering `r` pushes a second costs about
/// `n / backoff` claims a second for `r` sends: 55,000 claims for 768 sends was measured against one push
/// service answering in 25 s. With tickets, the `k`-th withdrawal of a busy spell comes back about `k / r` seconds
/// from now, so claims per send stay near one whatever the backlog.
///
/// - The rate is the origin's answers (any HTTP response) counted over the last ``rateWindow``, and at least
///   ``minimumRate``: what an origin answering anything at all answers with every stream busy (the streams one
///   origin may hold, over the request timeout), so a backlog withdrawn before the first answers is not spread
///   further than the origin could take it.
/// - Tickets are never less than ``minimumDelay`` ahead and never more than ``maximumDelay`` (a delivery of an
///   origin that stays unreachable comes back at least that often; its `ttl` and the retry bounds end it). A
///   withdrawal whose ticket would lie beyond that gets a time drawn at random from the last half of it, so a
///   backlog too long for the pace is spread there rather than all due in one second.
/// - At most ``maximumOrigins`` origins are remembered (the least recently seen one is forgotten first), so Web
///   Push subscribers choosing push services cannot grow it without bound.
public struct OriginPacing: Sendable {
    /// The span over which answers are counted for the rate: 10 s.
    public static let rateWindow: Duration = .seconds(10)
    /// The rate assumed at least, in answers a second.
    public let minimumRate: Double
    /// The soonest a withdrawn delivery comes back: half a second.
    public static let minimumDelay: Duration = .milliseconds(500)
    /// The latest a withdrawn delivery comes back: 10 minutes.
    public static let maximumDelay: Duration = .seconds(600)
    /// Origins remembered at most.
    public static let maximumOrigins = 4_096

    private struct Origin {
        /// Answers counted in the current half of the window and the one before it, and when the current began.
        var currentCount = 0
        var previousCount = 0
        var currentStart: Double
        /// The next ticket to hand out (seconds since the reference date).
        var nextTicket: Double
        var lastSeen: Double

        init(now: Double) {
            currentStart = now
            nextTicket = now
            lastSeen = now
        }

        mutating func roll(to now: Double) {
            let half = OriginPacing.rateWindow.inSeconds / 2
            guard now - currentStart >= half else { return }
            previousCount = now - currentStart >= 2 * half ? 0 : currentCount
            currentCount = 0
            currentStart = now - (now - currentStart).truncatingRemainder(dividingBy: half)
        }

        /// Answers a second over the counted span (the current half plus the whole previous one), at least `floor`.
        func rate(at now: Double, floor: Double) -> Double {
            let span = OriginPacing.rateWindow.inSeconds / 2 + max(now - currentStart, 0)
            return max(floor, Double(currentCount + previousCount) / max(span, 1))
        }
    }

    private var origins: [String: Origin] = [:]

    /// - Parameter minimumRate: answers a second assumed at least (a positive number; 1 when it is not), e.g. an
    ///   origin's stream cap over the request timeout: 256 / 30 s.
    public init(minimumRate: Double = 1) {
        self.minimumRate = minimumRate.isFinite && minimumRate > 0 ? minimumRate : 1
    }

    /// Origins remembered now.
    public var originCount: Int { origins.count }

    /// The origin answered a request (any HTTP status) at `now`.
    public mutating func answered(_ origin: String, now: Date) {
        let t = now.timeIntervalSinceReferenceDate
        var entry = origins[origin] ?? Origin(now: t)
        entry.roll(to: t)
        entry.currentCount += 1
        entry.lastSeen = t
        store(origin, entry)
    }

    /// A request to `origin` was withdrawn unsent at `now`: the time its delivery may be sent again.
    /// - Parameter unitRandom: a draw in `0..<1`, used only when the ticket would lie beyond ``maximumDelay``.
    public mutating func withdrawn(_ origin: String, now: Date, unitRandom: @autoclosure () -> Double) -> Date {
        let t = now.timeIntervalSinceReferenceDate
        var entry = origins[origin] ?? Origin(now: t)
        entry.roll(to: t)
        let next = max(entry.nextTicket, t + Self.minimumDelay.inSeconds)
        let ticket: Double
        if next <= t + Self.maximumDelay.inSeconds {
            ticket = next
            entry.nextTicket = next + 1 / entry.rate(at: t, floor: minimumRate)
        } else {
            let draw = unitRandom()
            ticket = t + Self.maximumDelay.inSeconds * (0.5 + 0.5 * (draw.isFinite ? min(max(draw, 0), 1) : 0))
        }
        entry.lastSeen = t
        store(origin, entry)
        return Date(timeIntervalSinceReferenceDate: ticket)
    }

    private mutating func store(_ origin: String, _ entry: Origin) {
        if origins[origin] == nil, origins.count >= Self.maximumOrigins,
            let oldest = origins.min(by: { $0.value.lastSeen < $1.value.lastSeen })?.key
        {
            origins[oldest] = nil
        }
        origins[origin] = entry
    }
}
