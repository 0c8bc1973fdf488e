/// A counter's rate per minute over the last minute, from readings of its running total (no I/O): each
/// ``record(_:at:)`` keeps the reading and answers the increase since the oldest reading still inside the window,
/// scaled to a minute. Before a minute has passed, the rate since the first reading. Holds at most one reading per
/// call within the window (a heartbeat every 100 ms keeps about 600).
struct PerMinuteRate: Sendable {
    /// The span the rate is taken over.
    var window: Duration = .seconds(60)
    private var readings: [(at: ContinuousClock.Instant, total: Double)] = []

    init(window: Duration = .seconds(60)) {
        self.window = window
    }

    /// Records the running total `total` read at `now` (instants not earlier than the last one's).
    /// - Returns: the increase per minute since the oldest reading within ``window`` (the one just before it,
    ///   so a full window is covered); 0 for the first reading.
    mutating func record(_ total: Double, at now: ContinuousClock.Instant) -> Double {
        readings.append((now, total))
        // Keep one reading at or before the window's start as the base.
        var dropped = 0
        while readings.count - dropped > 2, readings[dropped + 1].at <= now - window { dropped += 1 }
        if dropped > 0 { readings.removeFirst(dropped) }
        let base = readings[0]
        let seconds = (now - base.at) / .seconds(1)
        guard seconds > 0 else { return 0 }
        return max(0, total - base.total) / seconds * 60
    }
}
