import Foundation

/// Removes passwords of a connection string from text destined for errors or logs.
///
/// libpq's messages can quote pieces of the connection string (a parse error echoes the offending
/// token), so every password-looking value of the string, in both libpq syntaxes (libpq docs §34.1.1
/// "Connection Strings": `key=value` and the `postgresql://user:password@host/db?password=...` URI),
/// raw and percent-decoded, is replaced with `********` wherever it occurs.
enum PostgresRedaction {
    static let mask = "********"

    /// Every password-like value found in `connectionString`.
    static func secrets(in connectionString: String) -> [String] {
        var found: [String] = []
        let patterns = [
            // URI user-info: scheme://user:password@
            #"://[^/@:?#\s]*:([^@/?#\s]*)@"#,
            // key=value, quoted: password = 'it''s \' secret'
            #"(?i)password\s*=\s*'((?:[^'\\]|\\.)*)'"#,
            // key=value unquoted, or a URI query parameter (up to & or whitespace)
            #"(?i)password\s*=\s*([^\s'&][^\s&]*)"#,
        ]
        for pattern in patterns {
            guard let regex = try? NSRegularExpression(pattern: pattern) else { continue }
            let range = NSRange(connectionString.startIndex..., in: connectionString)
            for match in regex.matches(in: connectionString, range: range) where match.numberOfRanges > 1 {
                guard let valueRange = Range(match.range(at: 1), in: connectionString) else { continue }
                let value = String(connectionString[valueRange])
                guard !value.isEmpty else { continue }
                found.append(value)
                if let decoded = value.removingPercentEncoding, decoded != value { found.append(decoded) }
                let unescaped = value.replacingOccurrences(of: "\\'", with: "'").replacingOccurrences(of: "\\\\", with: "\\")
                if unescaped != value { found.append(unescaped) }
            }
        }
        // Longest first, so a secret containing another is masked whole.
        return found.sorted { $0.count > $1.count }
    }

    /// `text` with every password of `connectionString` masked.
    static func redact(_ text: String, connectionString: String) -> String {
        var result = text
        for secret in secrets(in: connectionString) {
            result = result.replacingOccurrences(of: secret, with: mask)
        }
        return result
    }
}
