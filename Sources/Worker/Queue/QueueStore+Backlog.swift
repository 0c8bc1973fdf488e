import Foundation
import Postgres

extension QueueStore {
    /// Extends this worker's claims whose completions wait to be written: `run_at` (the lease's end) moves to
    /// `now() + lease` for each delivery whose fence still matches, so no other worker claims (and
    /// sends again) a delivery whose push was already answered.
    /// - Returns: the ids whose lease was renewed (a missing id was claimed again by another worker, or its
    ///   row is gone).
    public static func renewLeases(
        on connection: PostgresConnection, deliveryIDs: [Int64], fences: [Int64], lease: Duration
    ) throws -> Set<Int64> {
        guard !deliveryIDs.isEmpty else { return [] }
        let rows = try connection.query(
            """
            UPDATE deliveries d SET run_at = now() + make_interval(secs => $3::float8)
            FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
            WHERE d.id = i.id AND d.fence = i.fence
            RETURNING d.id
            """, [deliveryIDs, fences, lease.inSeconds])
        return Set(try rows.map { try $0.decode(Int64.self, "id") })
    }
}
