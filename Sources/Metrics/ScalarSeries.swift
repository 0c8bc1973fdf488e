import Synchronization

/// One number per label set: the storage and rendering counters and gauges share.
final class ScalarSeries: Sendable {
    let name: String
    let labelNames: [String]
    private let table: Mutex<SeriesTable<Double>>

    init(name: String, labelNames: [String], maximumSeries: Int) {
        precondition(labelNames.count <= 3 && labelNames.allSatisfy(MetricName.isValidLabelName), "invalid labels of \(name)")
        self.name = name
        self.labelNames = labelNames
        table = Mutex(SeriesTable(labelCount: labelNames.count, maximumSeries: maximumSeries))
    }

    func add(_ amount: Double, _ labels: LabelValues) {
        table.withLock { table in table.series[table.key(for: labels), default: 0] += amount }
    }

    func set(_ value: Double, _ labels: LabelValues) {
        table.withLock { table in table.series[table.key(for: labels)] = value }
    }

    func replaceAll(_ values: [LabelValues: Double]) {
        table.withLock { table in
            table.series = [:]
            for (labels, value) in values { table.series[table.key(for: labels)] = value }
        }
    }

    func value(_ labels: LabelValues) -> Double? {
        table.withLock { $0.series[labels] }
    }

    /// Without labels and before any value: one sample of 0, so the series exists from the start.
    func render(into output: inout String) {
        let series = table.withLock { $0.series }
        if labelNames.isEmpty && series.isEmpty {
            output += "\(name) 0\n"
            return
        }
        for (labels, value) in Exposition.sorted(series) {
            output += "\(name)\(Exposition.labels(labelNames, labels)) \(Exposition.format(value))\n"
        }
    }
}
