import Postgres

/// Keeps the planner statistics of the tables the worker's hot statements read current while those tables grow
/// (migrations 0021 and 0022; docs/performance.md, "Planner statistics").
///
/// The worker's claim, completion and expansion statements are prepared; PostgreSQL may keep a generic plan of
/// each per session, made from a table's size when it was made, until an ANALYZE of a table it reads (or DDL)
/// invalidates it. A plan made while the queue was empty scans the whole queue once it holds thousands of rows,
/// and autovacuum's own analyze can be a minute or more away. The same happens without any growth of the file
/// when autovacuum recorded a nearly empty queue over many pages: the planner scales that density of almost
/// zero rows a page to the table's size, and estimates one row while the next burst fills the same pages. Every
/// worker therefore asks about once a second (``checkInterval``) which listed table has grown to
/// ``growthFactor`` times the pages its statistics describe plus ``minimumGrowthPages``, or holds
/// ``growthFactor`` times the rows they estimate for its size plus ``minimumGrowthRows`` (``grownTables(on:)``),
/// and has those analyzed (``refresh(on:)``); the next run of each cached plan is then planned again.
public enum PlannerStatistics {
    /// A table is analyzed once its file holds this many times the pages (8 KiB) of its last statistics...
    public static let growthFactor = 4.0
    /// ...plus this many pages (1 MiB of 8 KiB pages): below that a table is left to autovacuum.
    public static let minimumGrowthPages = 128
    /// A table is also analyzed once it holds ``growthFactor`` times the rows its statistics estimate for its
    /// current size, plus this many, while that estimate is under about 25,000 rows (the rule is for estimates
    /// near zero): first by the cumulative statistics' live-row count, which drifts upward on a queue that churns
    /// fast, then by counting the table itself up to that many rows through its primary key
    /// (`pushizo_holds_rows`, migration 0022). Below this the cost of an estimate of one row is small: a
    /// misplanned join of a 500-row batch with 1,000 queued rows is half a million comparisons, a few milliseconds.
    public static let minimumGrowthRows = 1_000
    /// Between two checks while nothing goes wrong: a check is one statement comparing four tables' file sizes
    /// with `pg_class`.
    public static let checkInterval: Duration = .seconds(1)
    /// The longest pause after checks or refreshes that failed or found a grown table held by another session.
    public static let longestPause: Duration = .seconds(60)

    /// What a ``refresh(on:)`` did with each grown table.
    public struct Refresh: Sendable, Equatable {
        /// Tables analyzed.
        public var analyzed: [String] = []
        /// Grown tables another session held (autovacuum, an operator's VACUUM): left for a later check.
        public var skipped: [String] = []

        public init(analyzed: [String] = [], skipped: [String] = []) {
            self.analyzed = analyzed
            self.skipped = skipped
        }
    }

    /// The listed tables that have grown (`pushizo_grown_tables`): names, sorted; empty nearly always.
    /// - Throws: ``PostgresError`` (e.g. `42883` when the schema predates migration 0022).
    public static func grownTables(on connection: PostgresConnection) throws -> [String] {
        try connection.query(
            "SELECT unnest(pushizo_grown_tables($1, $2, $3)) AS relation", [growthFactor, minimumGrowthPages, minimumGrowthRows]
        ).map { $0["relation"] ?? "" }
    }

    /// Analyzes the grown tables through the owner-rights function `pushizo_refresh_grown_statistics`: one
    /// worker of the fleet at a time (when another is at it, nothing is done and the result is empty), a table
    /// another session holds skipped rather than waited for. An ANALYZE can take seconds on a large table: run
    /// it on a connection that can be cancelled without harm to other statements (``PostgresCanceller``).
    /// - Throws: ``PostgresError`` (`42501` when the role may not execute the function, `57014` when cancelled).
    public static func refresh(on connection: PostgresConnection) throws -> Refresh {
        var refresh = Refresh()
        for row in try connection.query(
            "SELECT relation, analyzed FROM pushizo_refresh_grown_statistics($1, $2, $3)",
            [growthFactor, minimumGrowthPages, minimumGrowthRows])
        {
            let relation = row["relation"] ?? ""
            if try row.decode(Bool.self, "analyzed") {
                refresh.analyzed.append(relation)
            } else {
                refresh.skipped.append(relation)
            }
        }
        return refresh
    }

    /// The pause before the next check after `setbacks` checks or refreshes in a row that failed or skipped a
    /// table: ``checkInterval`` after none, then 2, 4, 8... seconds up to ``longestPause``, so that a missing
    /// function or a table held for minutes costs the server a statement a minute, not one a second.
    public static func pause(afterSetbacks setbacks: Int) -> Duration {
        guard setbacks > 0 else { return checkInterval }
        return min(.seconds(1 << min(setbacks, 6)), longestPause)
    }
}
