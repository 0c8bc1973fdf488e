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
