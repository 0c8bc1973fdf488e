import Foundation

/// The `-- pushizo:` directives at the head of a migration file (``PostgresMigrator``): the comment lines before
/// its first statement.
///
/// - `-- pushizo:no-transaction`: run outside a transaction, one statement at a time.
/// - `-- pushizo:oldest-worker NNNN`: workers built with migrations below NNNN no longer run once it is applied.
///
/// Any other `-- pushizo:` line there is refused, so a misspelt directive never goes unseen.
struct MigrationHeader: Equatable {
    var noTransaction = false
    var oldestWorker: Int?

    init(noTransaction: Bool = false, oldestWorker: Int? = nil) {
        self.noTransaction = noTransaction
        self.oldestWorker = oldestWorker
    }

    /// - Throws: `.migrationFailed` naming `fileName` for an unknown directive, a malformed `oldest-worker`, or a
    ///   `CREATE INDEX` of a no-transaction file that could not run again after an interruption.
    init(sql: String, fileName: String) throws {
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            guard trimmed.hasPrefix("--") else { break }
            let comment = trimmed.dropFirst(2).trimmingCharacters(in: .whitespaces)
            guard comment.hasPrefix("pushizo:") else { continue }
            let words = comment.dropFirst("pushizo:".count).split(separator: " ", omittingEmptySubsequences: true)
            switch (words.first, words.count) {
            case ("no-transaction"?, 1):
                noTransaction = true
            case ("oldest-worker"?, 2) where Int(words[1]).map { $0 > 0 } == true:
                oldestWorker = Int(words[1])
            default:
                throw PostgresError(
                    code: .migrationFailed,
                    message: "migration file \(fileName): unknown or malformed directive `-- \(comment)` (known: `-- pushizo:no-transaction`, `-- pushizo:oldest-worker NNNN`)")
            }
        }
        guard noTransaction else { return }
        for statement in SQLStatements.split(sql)
        where statement.firstMatch(of: Self.createIndex) != nil && Self.concurrentIndexName(statement) == nil {
            throw PostgresError(
                code: .migrationFailed,
                message: "migration file \(fileName) runs outside a transaction, so it must be safe to run again: write `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON …`, not `\(statement.prefix(80))`")
        }
    }

    nonisolated(unsafe) private static let createIndex = /^CREATE\s+(UNIQUE\s+)?INDEX\b/.ignoresCase()
    nonisolated(unsafe) private static let concurrentIndex =
        /^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)\s/
        .ignoresCase()

    /// The index name of a `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name …` statement (comments already
    /// removed, as ``SQLStatements/split(_:)`` returns it), as written (quoted or not); nil for any other statement.
    static func concurrentIndexName(_ statement: String) -> String? {
        statement.firstMatch(of: concurrentIndex).map { String($0.1) }
    }
}
