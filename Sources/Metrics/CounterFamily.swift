/// A counter family: values only go up (Prometheus: "Metric types", counter).
public final class CounterFamily: MetricFamily, Sendable {
    public let name: String
    public let help: String
    var type: MetricType { .counter }
    private let series: ScalarSeries

    init(name: String, help: String, labelNames: [String], maximumSeries: Int = MetricsRegistry.defaultMaximumSeries) {
        self.name = name
        self.help = help
        series = ScalarSeries(name: name, labelNames: labelNames, maximumSeries: maximumSeries)
    }

    /// Adds `amount` (>= 0; negative amounts are ignored) to the series of `labels`.
    public func add(_ amount: Double = 1, _ labels: LabelValues = LabelValues()) {
        guard amount >= 0 else { return }
        series.add(amount, labels)
    }

    /// Makes the series of `labels` appear with 0 if it does not exist yet (so a rate can start at zero).
    public func touch(_ labels: LabelValues = LabelValues()) {
        series.add(0, labels)
    }

    /// The current value of `labels`' series (0 when it does not exist).
    public func value(_ labels: LabelValues = LabelValues()) -> Double {
        series.value(labels) ?? 0
    }

    func renderSamples(into output: inout String) {
        series.render(into: &output)
    }
}
