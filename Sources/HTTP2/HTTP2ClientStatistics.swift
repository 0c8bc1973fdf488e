/// A snapshot of an ``HTTP2Client``'s pool (for metrics).
public struct HTTP2ClientStatistics: Sendable, Equatable {
    /// Connections open or opening (closing ones not counted).
    public var connections = 0
    /// Streams open on those connections (requests sent and not yet answered).
    public var openStreams = 0
    /// Requests waiting in origin queues for a stream or a connection.
    public var waitingRequests = 0

    public init() {}
}
