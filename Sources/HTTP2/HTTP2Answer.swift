/// One request's result in a burst of ``HTTP2Client/submit(_:to:answers:)``.
public struct HTTP2Answer: Sendable {
    /// The request's index in the submitted array.
    public var index: Int
    public var result: Result<HTTP2Response, any Error>
}
