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
