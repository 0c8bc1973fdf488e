protocol MetricFamily: Sendable {
    var name: String { get }
    var help: String { get }
    var type: MetricType { get }
    func renderSamples(into output: inout String)
}
