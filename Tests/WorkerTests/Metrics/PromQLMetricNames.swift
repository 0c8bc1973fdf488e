/// The metric names a PromQL expression selects, found by a scan rather than a parse (promtool parses the same
/// expressions separately, so a scan that only has to be right on valid PromQL is enough).
///
/// A name is an identifier (`[a-zA-Z_:][a-zA-Z0-9_:]*`, Prometheus: "Querying basics") that is not a function
/// (followed by `(`), not an aggregation operator, keyword or modifier (`sum`, `by`, `on`, `group_left`,
/// `offset`, `and`, `bool`, `inf`, ...; case-insensitive as in PromQL) and not inside a label matcher block `{...}`, a range or
/// subquery `[...]`, a string, a comment or the label list after `by`/`without`/`on`/`ignoring`/`group_left`/
/// `group_right`. A number or duration (`0.99`, `5m`, `1e3`, `0x1f`) starts with a digit and is never a name.
enum PromQLMetricNames {
    /// Keywords followed by a parenthesized list of label names, which are not metric names.
    static let labelListKeywords: Set<String> = ["by", "without", "on", "ignoring", "group_left", "group_right"]
    /// Aggregation operators, keywords of PromQL's lexer: `sum by (x) (...)` puts `by`, not `(`, after one.
    static let aggregationOperators: Set<String> = [
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
        "limitk", "limit_ratio",
    ]
    /// Other words that are never metric names where they stand: set operators, modifiers, special numbers.
    static let keywords: Set<String> = labelListKeywords.union(aggregationOperators)
        .union(["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"])

    static func names(in expression: String) -> Set<String> {
        let text = Array(expression.unicodeScalars)
        var names = Set<String>()
        var index = 0
        var braceDepth = 0
        var bracketDepth = 0
        while index < text.count {
            let character = text[index]
            switch character {
            case "\"", "'", "`":
                index = endOfString(text, from: index)
            case "#":
                while index < text.count, text[index] != "\n" { index += 1 }
            case "{": braceDepth += 1; index += 1
            case "}": braceDepth -= 1; index += 1
            case "[": bracketDepth += 1; index += 1
            case "]": bracketDepth -= 1; index += 1
            case _ where isDigit(character) || (character == "." && index + 1 < text.count && isDigit(text[index + 1])):
                while index < text.count, isIdentifierCharacter(text[index]) || text[index] == "." { index += 1 }
            case _ where isIdentifierStart(character):
                let start = index
                while index < text.count, isIdentifierCharacter(text[index]) { index += 1 }
                guard braceDepth == 0, bracketDepth == 0 else { continue }
                let word = String(String.UnicodeScalarView(text[start..<index]))
                var next = index
                while next < text.count, text[next].properties.isWhitespace { next += 1 }
                let opensParenthesis = next < text.count && text[next] == "("
                if labelListKeywords.contains(word.lowercased()), opensParenthesis {
                    index = next
                    while index < text.count, text[index] != ")" { index += 1 }
                } else if !opensParenthesis, !keywords.contains(word.lowercased()) {
                    names.insert(word)
                }
            default:
                index += 1
            }
        }
        return names
    }

    /// The index after the string literal opening at `start`: `"` and `'` strings end at an unescaped quote,
    /// raw `` ` `` strings at the next backtick.
    private static func endOfString(_ text: [Unicode.Scalar], from start: Int) -> Int {
        let quote = text[start]
        var index = start + 1
        while index < text.count, text[index] != quote {
            index += (text[index] == "\\" && quote != "`") ? 2 : 1
        }
        return index + 1
    }

    private static func isDigit(_ character: Unicode.Scalar) -> Bool { ("0"..."9").contains(character) }

    private static func isIdentifierStart(_ character: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(character) || ("A"..."Z").contains(character) || character == "_" || character == ":"
    }

    private static func isIdentifierCharacter(_ character: Unicode.Scalar) -> Bool {
        isIdentifierStart(character) || isDigit(character)
    }
}
