import Foundation
import Testing

/// The PromQL of a Grafana dashboard model (JSON): every panel target's `expr` and the selector inside each
/// `label_values(selector, label)` variable query, with Grafana's variables replaced so that Prometheus can
/// parse them.
struct GrafanaDashboardQueries {
    /// The dashboard's JSON object.
    let model: [String: Any]

    init(contentsOf url: URL) throws {
        model = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    /// Every panel target's `expr`, rows' nested panels included, as written (variables not replaced).
    var targetExpressions: [String] {
        Self.panels(in: model).flatMap { panel in
            (panel["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String }
        }
    }

    /// The template variables, in order.
    var variables: [[String: Any]] {
        (model["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []
    }

    /// The series selector of each `label_values(selector, label)` query variable; `nil` for a variable query
    /// of another form (which a test should refuse until this reads it).
    var variableSelectors: [String?] {
        variables.filter { $0["type"] as? String == "query" }.map { variable in
            let query = (variable["query"] as? [String: Any])?["query"] as? String ?? variable["query"] as? String ?? ""
            guard query.hasPrefix("label_values("), query.hasSuffix(")"), let comma = query.lastIndex(of: ",") else {
                return nil
            }
            return String(query[query.index(query.startIndex, offsetBy: "label_values(".count)..<comma])
        }
    }

    /// Panels at the top level and inside collapsed rows.
    static func panels(in model: [String: Any]) -> [[String: Any]] {
        (model["panels"] as? [[String: Any]] ?? []).flatMap { panel in
            [panel] + (panel["panels"] as? [[String: Any]] ?? [])
        }
    }

    /// `expression` with Grafana's interval variables (`$__rate_interval`, `$__interval`, `$__range`, also as
    /// `${...}`) replaced by `5m` and every other variable (`$job`, `${instance}`, `[[app]]`) by `.+`: a value
    /// that is valid inside a label matcher's string and nowhere else, so a variable used outside one fails
    /// the parse.
    static func substitutingVariables(_ expression: String) -> String {
        var text = expression
        for interval in ["__rate_interval", "__interval", "__range"] {
            text = text.replacingOccurrences(of: "${\(interval)}", with: "5m")
                .replacingOccurrences(of: "$\(interval)", with: "5m")
        }
        return text.replacingOccurrences(
            of: #"\$\{[A-Za-z0-9_]+(:[a-z]+)?\}|\$[A-Za-z0-9_]+|\[\[[A-Za-z0-9_]+\]\]"#, with: ".+",
            options: .regularExpression)
    }
}
