import Postgres

/// Keeps `time_zone_names` (migration 0023) what PostgreSQL's tz database lists, for local-time expansion to
/// look zone names up by key (docs/local-time-delivery.md). Reading `pg_timezone_names` opens every zone file
/// (about 30 ms); the table turns that into one read an hour per fleet instead of one per expansion statement.
public enum TimeZoneNames {
    /// Between two refreshes by one worker: a zone a tz database update adds is known within this time (until
    /// then its subscribers fall back to the app's zone, as for any unknown name). A zone it removes is unknown
    /// at once: `pushizo_known_zones` also loads each name it finds.
    public static let refreshInterval: Duration = .seconds(3_600)
    /// From a worker's start to its first refresh: the migration filled the table, and a start after a tz
    /// database update refreshes it once the worker is up rather than among its start-up's first statements.
    public static let firstRefreshDelay: Duration = .seconds(10)
    /// Before another try after a refresh that failed.
    public static let retryInterval: Duration = .seconds(60)

    /// Makes `time_zone_names` what `pg_timezone_names` lists now (`pushizo_refresh_time_zone_names`). Rows
    /// change only where the tz database did; when another session is refreshing, nothing is done.
    /// - Returns: how many names were added or removed (0 nearly always).
    /// - Throws: ``PostgresError`` (`42883` when the schema predates migration 0023).
    public static func refresh(on connection: PostgresConnection) throws -> Int {
        try connection.query("SELECT pushizo_refresh_time_zone_names() AS changed")[0].decode(Int.self, "changed")
    }
}
