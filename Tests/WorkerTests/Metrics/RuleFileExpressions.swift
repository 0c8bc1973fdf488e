import Foundation

/// The `expr:` values of a Prometheus rule file, read line by line (Foundation has no YAML reader): the forms
/// the shipped rules use, a plain or quoted scalar on the key's line or a block scalar (`>-`, `|`) on the
/// lines indented below it. promtool reads the same file, and a test compares the count with its own.
enum RuleFileExpressions {
    static func expressions(in yaml: String) -> [String] {
        let lines = yaml.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var expressions: [String] = []
        var index = 0
        while index < lines.count {
            let line = lines[index]
            index += 1
            let content = line.drop { $0 == " " }
            guard content.hasPrefix("expr:") else { continue }
            let indent = line.count - content.count
            let value = content.dropFirst("expr:".count).trimmingCharacters(in: .whitespaces)
            if value.hasPrefix(">") || value.hasPrefix("|") {
                var block: [String] = []
                while index < lines.count {
                    let next = lines[index]
                    let nextIndent = next.prefix { $0 == " " }.count
                    guard next.trimmingCharacters(in: .whitespaces).isEmpty || nextIndent > indent else { break }
                    block.append(next.trimmingCharacters(in: .whitespaces))
                    index += 1
                }
                // Folded or literal, the line breaks are whitespace to PromQL.
                expressions.append(block.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines))
            } else if value.hasPrefix("'"), value.hasSuffix("'"), value.count >= 2 {
                expressions.append(String(value.dropFirst().dropLast()).replacingOccurrences(of: "''", with: "'"))
            } else if value.hasPrefix("\""), let data = value.data(using: .utf8),
                let decoded = try? JSONSerialization.jsonObject(with: data, options: .fragmentsAllowed) as? String
            {
                expressions.append(decoded)
            } else {
                expressions.append(value)
            }
        }
        return expressions
    }
}
