import Postgres

/// Keeps the planner statistics of the tables the worker's hot statements read current while those tables grow
/// (migration 0021; docs/performance.md, "Planner statistics").
///
/// The worker's claim, completion and expansion statements are prepared; PostgreSQL may keep a generic plan of
/// each per session, made from a table's size when it was made, until an ANALYZE of a table it reads (or DDL)
/// invalidates it. A plan made while the queue was empty scans the whole queue once it holds thousands of rows,
/// and autovacuum's own analyze can be a minute or more away. Every worker therefore asks about once a second
/// (``checkInterval``) for an ANALYZE of each listed table whose file has grown to ``growthFactor`` times the pages
/// its statistics describe plus ``minimumGrowthPages``; the next run of each cached plan is then planned again.
public enum PlannerStatistics {
    /// A table is analyzed once its file holds this many times the pages (8 KiB) of its last statistics...
    public static let growthFactor = 4.0
    /// ...plus this many pages (1 MiB of 8 KiB pages): below that a table is left to autovacuum.
    public static let minimumGrowthPages = 128
    /// Between two checks: a check is one statement comparing four tables' file sizes with `pg_class`.
    public static let checkInterval: Duration = .seconds(1)

    /// Analyzes the tables that grew (``growthFactor``, ``minimumGrowthPages``) through the owner-rights function
    /// `pushizo_refresh_grown_statistics` (migration 0021), skipping a table another session is analyzing or
    /// vacuuming rather than waiting for it.
    /// - Returns: the names of the tables analyzed; empty when none had grown (nearly every call).
    /// - Throws: ``PostgresError`` (e.g. `42883` when the schema predates migration 0021).
    public static func refreshGrown(on connection: PostgresConnection) throws -> [String] {
        try connection.query(
            "SELECT unnest(pushizo_refresh_grown_statistics($1, $2)) AS analyzed", [growthFactor, minimumGrowthPages]
        ).map { $0["analyzed"] ?? "" }
    }
}
