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
