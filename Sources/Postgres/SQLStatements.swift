import Foundation

/// Splits a script of SQL statements at its top-level semicolons, as `psql` does, so the migrator sends a
/// migration one statement at a time: outside a transaction because PostgreSQL runs a simple-query message holding
/// several statements as one implicit transaction block, which `CREATE INDEX CONCURRENTLY` refuses; inside one
/// because Citus propagates a distributed table's DDL with the statement's text, which must be that one statement.
///
/// Lexical rules followed (PostgreSQL documentation, "Lexical Structure"): `-- …` line comments and nested
/// `/* … */` block comments are dropped; a `;` inside `'…'` (with `''`, and `\'` in `E'…'`), `"…"` or a
/// dollar-quoted `$tag$ … $tag$` string does not end a statement. Statements come back trimmed, without their
/// `;`; empty ones (comments only) are left out.
public enum SQLStatements {
    public static func split(_ script: String) -> [String] {
        let text = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0
        func finish() {
            let statement = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !statement.isEmpty { statements.append(statement) }
            current = String.UnicodeScalarView()
        }
        /// Copies from `index` through the end of the quoted text that starts there with `quote`.
        func copyQuoted(_ quote: Unicode.Scalar, backslashEscapes: Bool) {
            current.append(text[index])
            index += 1
            while index < text.count {
                let scalar = text[index]
                current.append(scalar)
                index += 1
                if backslashEscapes && scalar == "\\" && index < text.count {
                    current.append(text[index])
                    index += 1
                } else if scalar == quote {
                    // A doubled quote is one quote character inside the text.
                    if index < text.count && text[index] == quote {
                        current.append(text[index])
                        index += 1
                    } else {
                        return
                    }
                }
            }
        }
        /// The `$tag$` starting at `index`, if one does (a tag: letters, digits, `_`, not starting with a digit).
        func dollarTag() -> [Unicode.Scalar]? {
            var end = index + 1
            while end < text.count, text[end] == "_" || text[end].properties.isAlphabetic || ("0"..."9").contains(text[end]) {
                if end == index + 1 && ("0"..."9").contains(text[end]) { return nil }
                end += 1
            }
            guard end < text.count, text[end] == "$" else { return nil }
            return Array(text[index...end])
        }
        while index < text.count {
            let scalar = text[index]
            let next: Unicode.Scalar? = index + 1 < text.count ? text[index + 1] : nil
            if scalar == "-" && next == "-" {
                while index < text.count && text[index] != "\n" { index += 1 }
            } else if scalar == "/" && next == "*" {
                var depth = 0
                repeat {
                    if text[index] == "/" && index + 1 < text.count && text[index + 1] == "*" {
                        depth += 1
                        index += 2
                    } else if text[index] == "*" && index + 1 < text.count && text[index + 1] == "/" {
                        depth -= 1
                        index += 2
                    } else {
                        index += 1
                    }
                } while depth > 0 && index < text.count
                current.append(" ")
            } else if scalar == "'" {
                let previous = current.last
                copyQuoted("'", backslashEscapes: previous == "E" || previous == "e")
            } else if scalar == "\"" {
                copyQuoted("\"", backslashEscapes: false)
            } else if scalar == "$", let tag = dollarTag(),
                      !(current.last.map { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) } ?? false)
            {
                current.append(contentsOf: tag)
                index += tag.count
                while index < text.count {
                    if text[index] == "$" && index + tag.count <= text.count && Array(text[index..<index + tag.count]) == tag {
                        current.append(contentsOf: tag)
                        index += tag.count
                        break
                    }
                    current.append(text[index])
                    index += 1
                }
            } else if scalar == ";" {
                finish()
                index += 1
            } else {
                current.append(scalar)
                index += 1
            }
        }
        finish()
        return statements
    }
}
