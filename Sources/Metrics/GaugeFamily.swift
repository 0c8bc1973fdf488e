/// A gauge family: values go up and down (Prometheus: "Metric types", gauge).
public final class GaugeFamily: MetricFamily, Sendable {
    public let name: String
    public let help: String
    var type: MetricType { .gauge }
    private let series: ScalarSeries

    init(name: String, help: String, labelNames: [String], maximumSeries: Int = MetricsRegistry.defaultMaximumSeries) {
        self.name = name
        self.help = help
        series = ScalarSeries(name: name, labelNames: labelNames, maximumSeries: maximumSeries)
    }

    public func set(_ value: Double, _ labels: LabelValues = LabelValues()) {
        series.set(value, labels)
    }

    public func add(_ amount: Double, _ labels: LabelValues = LabelValues()) {
        series.add(amount, labels)
    }

    /// Replaces every series at once (a sampler's snapshot: label sets missing from `values` disappear).
    public func replaceAll(_ values: [LabelValues: Double]) {
        series.replaceAll(values)
    }

    public func value(_ labels: LabelValues = LabelValues()) -> Double? {
        series.value(labels)
    }

    func renderSamples(into output: inout String) {
        series.render(into: &output)
    }
}
