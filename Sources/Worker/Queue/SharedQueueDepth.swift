import Foundation

/// The fleet's current queue sample as one worker found it in `queue_depth_samples`.
public struct SharedQueueDepth: Sendable, Equatable {
    /// The counts (relative to ``sampledAt``: `oldestDueAge` is the age then).
    public var sample: QueueDepthSample
    /// When the sample was measured (the database's clock).
    public var sampledAt: Date
    /// Whether this call measured it (it was due and this worker took the turn) rather than read it.
    public var measuredHere: Bool
}
