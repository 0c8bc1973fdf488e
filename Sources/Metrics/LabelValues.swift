/// The values of one series' labels, in the order of its family's label names (at most three).
///
/// A value type of up to three strings, so counting with labels made of string literals or enum raw values
/// allocates nothing. Label values are bounded by the caller (provider, event, reason: never a token or an
/// id) and by the family's series cap (``MetricsRegistry/defaultMaximumSeries``).
public struct LabelValues: Hashable, Sendable {
    public let count: Int
    private let first: String
    private let second: String
    private let third: String

    /// No labels.
    public init() {
        (count, first, second, third) = (0, "", "", "")
    }

    public init(_ first: String) {
        (count, self.first, second, third) = (1, first, "", "")
    }

    public init(_ first: String, _ second: String) {
        (count, self.first, self.second, third) = (2, first, second, "")
    }

    public init(_ first: String, _ second: String, _ third: String) {
        (count, self.first, self.second, self.third) = (3, first, second, third)
    }

    /// Every value set to `value` (the overflow series of a family past its cap).
    init(repeating value: String, count: Int) {
        self.count = count
        first = count > 0 ? value : ""
        second = count > 1 ? value : ""
        third = count > 2 ? value : ""
    }

    /// The value at `index` (0 ..< count).
    public subscript(index: Int) -> String {
        switch index {
        case 0: first
        case 1: second
        default: third
        }
    }

    /// The values as an array, for rendering and sorting (not on the hot path).
    var values: [String] { (0..<count).map { self[$0] } }
}
