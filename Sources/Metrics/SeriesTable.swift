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
