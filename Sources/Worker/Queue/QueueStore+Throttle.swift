import Foundation
import Postgres

extension QueueStore {
    /// Seconds until the bucket of some limited app with due deliveries holds a full burst again
    /// (`pushizo_send_burst`, a tenth of a second's permits), or `nil` when no limited app has due deliveries.
    /// What a worker whose claim came back short waits at most before claiming again, so a limited app is
    /// served at its rate rather than once per poll interval; at most a day (86,400 s), to the microsecond.
    /// Computed in `numeric`: a rate near float8's smallest value would otherwise overflow the division. One
    /// index probe per limited app (`deliveries_claim_throttled`); no row is locked or written. docs/throttle.md.
    public static func throttleWait(on connection: PostgresConnection) throws -> Double? {
        let rows = try connection.preparedQuery(
            """
            SELECT round(min(least(greatest(0, (burst - available)::numeric / rate::numeric), 86400)), 6)::float8 AS wait
            FROM (SELECT a.max_sends_per_second AS rate, pushizo_send_burst(a.max_sends_per_second) AS burst,
                         pushizo_bucket_permits(a.max_sends_per_second, b.tokens, b.refilled_at, clock_timestamp())
                             AS available
                  FROM app_send_buckets b JOIN apps a ON a.id = b.app_id
                  WHERE a.max_sends_per_second IS NOT NULL
                    AND EXISTS (SELECT 1 FROM deliveries d
                                WHERE d.app_id = b.app_id AND d.throttled AND d.run_at <= now())) AS limited
            """)
        return try rows.first?.decodeIfPresent(Double.self, "wait")
    }
}
