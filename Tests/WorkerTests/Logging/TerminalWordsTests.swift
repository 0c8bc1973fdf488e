import Foundation
import Postgres
import Testing

@testable import Worker

/// Counts, instants and errors as the commands print them for people: one way everywhere.
@Suite("Terminal words and errors")
struct TerminalWordsTests {
    @Test func countsAgreeWithTheirNoun() {
        #expect(TerminalWords.count(1, "pending delivery", "pending deliveries") == "1 pending delivery")
        #expect(TerminalWords.count(0, "pending delivery", "pending deliveries") == "0 pending deliveries")
        #expect(TerminalWords.count(1_234, "delivery", "deliveries") == "1,234 deliveries")
    }

    @Test func instantsAreUTCWithoutFractions() {
        #expect(TerminalWords.instant(Date(timeIntervalSince1970: 1_790_000_000.75)) == "2026-09-21 14:13:20 UTC")
        #expect(OperatorOutcome.untilText(Date(timeIntervalSince1970: 1_790_000_000)) == "until 2026-09-21 14:13:20 UTC")
    }

    /// A database error: PostgreSQL's or libpq's words with the SQLSTATE, libpq's further lines and the server's
    /// detail and hint indented on lines of their own; no Swift type name, no escaped line feed; still safe.
    @Test func databaseErrorsPrintAsLinesOfWords() {
        var error = PostgresError(
            code: .connectionFailed,
            message: "connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?")
        #expect(TerminalError.text(error, prefix: "pushizo-worker status: ") == """
            pushizo-worker status: connection to server at "127.0.0.1", port 1 failed: Connection refused
              Is the server running on that host and accepting TCP/IP connections?
            """)
        error = PostgresError(code: .queryFailed, message: "permission denied for table apps\u{1B}[2J", sqlState: "42501", hint: "run as the owner")
        let text = TerminalError.text(error, prefix: "pushizo-worker pause: ")
        #expect(text == "pushizo-worker pause: permission denied for table apps\\u{1B}[2J (SQLSTATE 42501)\n  hint: run as the owner")
        #expect(!"\(error)".contains("PostgresError"))
        #expect("\(error)" == "permission denied for table apps\u{1B}[2J (SQLSTATE 42501; hint: run as the owner)")
    }

    /// A refusal only an operator can fix (exit 78) prints as the other database errors do: the problem of the
    /// setting with libpq's message and SQLSTATE on its first line, the server's detail and hint on lines of their
    /// own; the log's one-line form keeps them all.
    @Test func aRefusalPrintsItsDetailAndHintOnLinesOfTheirOwn() throws {
        let error = PostgresError(
            code: .queryFailed, message: "permission denied for table fleet_settings", sqlState: "42501",
            detail: "the role is pushizo_reader", hint: "operator commands run as the schema owner")
        let refusal = try #require(ConfigurationError(refusal: error, key: .databaseURL))
        #expect(TerminalError.text(refusal, prefix: "pushizo-worker: ") == """
            pushizo-worker: configuration key PUSHIZO_DATABASE_URL (flag --database-url): PostgreSQL refused it, and trying again will not help: permission denied for table fleet_settings (SQLSTATE 42501)
              detail: the role is pushizo_reader
              hint: operator commands run as the schema owner
            """)
        let logged = "\(refusal)"
        #expect(!logged.contains("\n"))
        #expect(logged.contains("the role is pushizo_reader") && logged.contains("operator commands run as the schema owner"))
        #expect(logged.contains("42501"))
    }
}
