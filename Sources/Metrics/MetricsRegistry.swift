import Synchronization

/// A set of metric families and their rendering in the Prometheus text exposition format, version 0.0.4
/// (Prometheus: "Exposition formats"). No I/O: a server asks ``render()`` for the text and sends it.
///
/// Families are rendered in registration order, each as `# HELP`, `# TYPE` and its series sorted by label
/// values, so the output is stable. Every family keeps its series under its own `Mutex`, held only to read
/// or bump a value (never while the text is sent), so a scrape and the hot path barely meet.
public final class MetricsRegistry: Sendable {
    /// Series one family keeps at most; label sets beyond it are counted in one overflow series whose every
    /// label value is ``overflowLabelValue``, so a bug feeding unbounded values cannot grow memory.
    public static let defaultMaximumSeries = 256
    /// The label value of the overflow series.
    public static let overflowLabelValue = "other"
    /// `Content-Type` of ``render()``'s text (Prometheus text format 0.0.4).
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    private let families = Mutex<[any MetricFamily]>([])

    public init() {}

    /// A counter family (a value that only goes up; its name should end in `_total`).
    /// - Precondition: `name` and `labelNames` are valid Prometheus names and `name` is not registered yet.
    public func counter(_ name: String, help: String, labels labelNames: [String] = []) -> CounterFamily {
        let family = CounterFamily(name: name, help: help, labelNames: labelNames)
        add(family)
        return family
    }

    /// A gauge family (a value that goes up and down).
    public func gauge(_ name: String, help: String, labels labelNames: [String] = []) -> GaugeFamily {
        let family = GaugeFamily(name: name, help: help, labelNames: labelNames)
        add(family)
        return family
    }

    /// A histogram family with fixed bucket upper bounds (ascending; `+Inf` is added).
    public func histogram(_ name: String, help: String, labels labelNames: [String] = [], buckets: [Double])
        -> HistogramFamily
    {
        let family = HistogramFamily(name: name, help: help, labelNames: labelNames, buckets: buckets)
        add(family)
        return family
    }

    /// A family without labels whose one value is read at render time (`nil`: no sample this time), e.g. a
    /// process's resident memory. `type` is `.gauge` or `.counter`. `read` runs on the rendering thread.
    public func callback(_ name: String, help: String, type: MetricType, read: @escaping @Sendable () -> Double?) {
        add(CallbackFamily(name: name, help: help, type: type, read: read))
    }

    private func add(_ family: any MetricFamily) {
        precondition(MetricName.isValidMetricName(family.name), "invalid metric name \(family.name)")
        families.withLock { families in
            precondition(!families.contains { $0.name == family.name }, "metric \(family.name) registered twice")
            families.append(family)
        }
    }

    /// Every family in the text exposition format 0.0.4 (lines ending in `\n`).
    public func render() -> String {
        let snapshot = families.withLock { $0 }
        var output = ""
        output.reserveCapacity(snapshot.count * 200)
        for family in snapshot {
            output += "# HELP \(family.name) \(Exposition.escapeHelp(family.help))\n"
            output += "# TYPE \(family.name) \(family.type.rawValue)\n"
            family.renderSamples(into: &output)
        }
        return output
    }
}

/// The `# TYPE` of a family.
public enum MetricType: String, Sendable {
    case counter, gauge, histogram
}

protocol MetricFamily: Sendable {
    var name: String { get }
    var help: String { get }
    var type: MetricType { get }
    func renderSamples(into output: inout String)
}

/// Names as Prometheus accepts them (Prometheus: "Data model", metric and label names).
enum MetricName {
    static func isValidMetricName(_ name: String) -> Bool {
        valid(name, extra: ":")
    }

    static func isValidLabelName(_ name: String) -> Bool {
        valid(name, extra: "") && !name.hasPrefix("__")
    }

    private static func valid(_ name: String, extra: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            (scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "_"))
                || extra.unicodeScalars.contains(scalar)
        }
    }
}

/// Text escaping and number formatting of the exposition format.
enum Exposition {
    /// `# HELP` text: backslash and line feed escaped.
    static func escapeHelp(_ text: String) -> String {
        guard text.contains(where: { $0 == "\\" || $0 == "\n" }) else { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// A label value: backslash, double quote and line feed escaped.
    static func escapeLabelValue(_ text: String) -> String {
        guard text.contains(where: { $0 == "\\" || $0 == "\n" || $0 == "\"" }) else { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\"": escaped += "\\\""
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// A sample value as Go's `strconv.ParseFloat` reads it: `NaN`, `+Inf`, `-Inf`, whole numbers without a
    /// fraction, others in Swift's shortest round-trip form (`0.005`, `1e-05`).
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// `{a="x",b="y"}` (empty when there are no labels), with `extra` (e.g. `le`) appended.
    static func labels(_ names: [String], _ values: LabelValues, extra: (String, String)? = nil) -> String {
        if names.isEmpty && extra == nil { return "" }
        var text = "{"
        for index in 0..<names.count {
            if index > 0 { text += "," }
            text += "\(names[index])=\"\(escapeLabelValue(values[index]))\""
        }
        if let extra {
            if !names.isEmpty { text += "," }
            text += "\(extra.0)=\"\(escapeLabelValue(extra.1))\""
        }
        return text + "}"
    }

    static func sorted<Value>(_ series: [LabelValues: Value]) -> [(LabelValues, Value)] {
        series.map { ($0.key, $0.value) }.sorted { $0.0.values.lexicographicallyPrecedes($1.0.values) }
    }
}

/// Series storage shared by the families: values by label set, capped (see
/// ``MetricsRegistry/defaultMaximumSeries``).
struct SeriesTable<Value> {
    var series: [LabelValues: Value] = [:]
    let labelCount: Int
    let maximumSeries: Int

    /// The key to store `labels` under: itself, or the overflow key once the table is full.
    func key(for labels: LabelValues) -> LabelValues {
        precondition(labels.count == labelCount, "wrong number of label values")
        if series.count < maximumSeries || series[labels] != nil { return labels }
        return LabelValues(repeating: MetricsRegistry.overflowLabelValue, count: labelCount)
    }
}

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

/// A family without labels whose value is read when rendering.
final class CallbackFamily: MetricFamily, Sendable {
    let name: String
    let help: String
    let type: MetricType
    private let read: @Sendable () -> Double?

    init(name: String, help: String, type: MetricType, read: @escaping @Sendable () -> Double?) {
        precondition(type != .histogram, "a callback family is a counter or a gauge")
        self.name = name
        self.help = help
        self.type = type
        self.read = read
    }

    func renderSamples(into output: inout String) {
        guard let value = read() else { return }
        output += "\(name) \(Exposition.format(value))\n"
    }
}
