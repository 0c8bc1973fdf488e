import Postgres

/// An error as the commands print it on stderr, the same way everywhere (`status`, `check`, `migrate`, the
/// operator commands): the words of whoever raised it, never a Swift type name; a database error with its
/// SQLSTATE and libpq's further lines, detail and hint indented on lines of their own
/// (``PostgresError/terminalLines``), and so a setting PostgreSQL refused (``ConfigurationError/terminalLines``); every line made safe by ``TerminalText``, so a newline in a message becomes
/// a line, not an escape.
public enum TerminalError {
    /// `error` as lines, prefixed on the first with `prefix` (`pushizo-worker status: `), joined by line feeds,
    /// without a final one.
    public static func text(_ error: any Error, prefix: String) -> String {
        text(lines(error), prefix: prefix)
    }

    /// `lines` (a message and its indented details) prefixed and made safe, joined by line feeds.
    public static func text(_ lines: [String], prefix: String) -> String {
        guard let first = lines.first else { return TerminalText.sanitized(prefix) }
        return ([prefix + first] + lines.dropFirst()).map(TerminalText.sanitized).joined(separator: "\n")
    }

    /// The lines of `error` before they are made safe.
    public static func lines(_ error: any Error) -> [String] {
        if let error = error as? PostgresError { return error.terminalLines }
        if let error = error as? ConfigurationError { return error.terminalLines }
        return "\(error)".split(whereSeparator: \.isNewline).map(String.init)
    }
}
