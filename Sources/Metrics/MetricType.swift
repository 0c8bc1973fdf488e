/// The `# TYPE` of a family.
public enum MetricType: String, Sendable {
    case counter, gauge, histogram
}
