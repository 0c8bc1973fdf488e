extension Duration {
    /// The duration as a decimal number of seconds: the one conversion used where a span leaves the typed code
    /// (a SQL parameter that takes seconds, an event's `deadline_s`, a metric's seconds, an API taking
    /// `TimeInterval`).
    public var inSeconds: Double {
        self / .seconds(1)
    }
}
