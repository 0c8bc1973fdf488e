import Synchronization

/// A histogram family with fixed buckets (Prometheus: "Metric types", histogram): `_bucket{le=...}`
/// (cumulative, ending with `le="+Inf"`), `_sum` and `_count` per series.
public final class HistogramFamily: MetricFamily, Sendable {
    struct Series {
        /// Observations per bucket, not cumulative; the last one is `+Inf`.
        var counts: [UInt64]
        var sum: Double = 0
    }

    public let name: String
    public let help: String
    var type: MetricType { .histogram }
    let labelNames: [String]
    /// Upper bounds, ascending, without `+Inf`.
    public let buckets: [Double]
    private let table: Mutex<SeriesTable<Series>>

    init(
        name: String, help: String, labelNames: [String], buckets: [Double],
        maximumSeries: Int = MetricsRegistry.defaultMaximumSeries
    ) {
        precondition(labelNames.count <= 3 && labelNames.allSatisfy(MetricName.isValidLabelName) && !labelNames.contains("le"),
                     "invalid labels of \(name)")
        precondition(zip(buckets, buckets.dropFirst()).allSatisfy { $0 < $1 } && buckets.allSatisfy(\.isFinite),
                     "buckets of \(name) must be finite and ascending")
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.buckets = buckets
        table = Mutex(SeriesTable(labelCount: labelNames.count, maximumSeries: maximumSeries))
    }

    /// Records one observation (`NaN` is ignored).
    public func observe(_ value: Double, _ labels: LabelValues = LabelValues()) {
        guard !value.isNaN else { return }
        var index = 0
        while index < buckets.count && value > buckets[index] { index += 1 }
        let bucketCount = buckets.count + 1
        table.withLock { table in
            let key = table.key(for: labels)
            if table.series[key] == nil { table.series[key] = Series(counts: Array(repeating: 0, count: bucketCount)) }
            table.series[key]!.counts[index] += 1
            table.series[key]!.sum += value
        }
    }

    /// Observations recorded in `labels`' series.
    public func count(_ labels: LabelValues = LabelValues()) -> UInt64 {
        table.withLock { $0.series[labels]?.counts.reduce(0, +) ?? 0 }
    }

    func renderSamples(into output: inout String) {
        var series = table.withLock { $0.series }
        if labelNames.isEmpty && series.isEmpty {
            series[LabelValues()] = Series(counts: Array(repeating: 0, count: buckets.count + 1))
        }
        for (labels, values) in Exposition.sorted(series) {
            var cumulative: UInt64 = 0
            for (index, count) in values.counts.enumerated() {
                cumulative += count
                let bound = index < buckets.count ? Exposition.format(buckets[index]) : "+Inf"
                output += "\(name)_bucket\(Exposition.labels(labelNames, labels, extra: ("le", bound))) \(cumulative)\n"
            }
            let plain = Exposition.labels(labelNames, labels)
            output += "\(name)_sum\(plain) \(Exposition.format(values.sum))\n"
            output += "\(name)_count\(plain) \(cumulative)\n"
        }
    }
}
