import Foundation
import Postgres

extension QueueStore {
    /// Writes one batch of completions atomically: those with an event through ``complete(on:_:)``, those
    /// without (``DeliveryCompletion/writesEvent`` false) as a queue change only, and counts the retries that
    /// spent no attempt (``DeliveryCompletion/countsUncountedRetry``). Every change is fenced: a completion
    /// whose delivery was claimed again since changes nothing. The usual batch, sent deliveries only, is one
    /// statement without a transaction block: one round trip instead of five (`BEGIN`, a savepoint and its
    /// release, `COMMIT`), which under a steady stream of small batches was most of the completer's traffic.
    /// - Returns: how many completions took effect.
    /// - Throws: ``PostgresError``; the whole batch is then rolled back.
    public static func completeBatch(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
        guard !completions.isEmpty else { return 0 }
        let withEvent = completions.filter(\.writesEvent)
        let withoutEvent = completions.filter { !$0.writesEvent }
        let uncounted = completions.filter { $0.countsUncountedRetry && $0.nextRunAt != nil }
        if withoutEvent.isEmpty && uncounted.isEmpty { return try complete(on: connection, withEvent) }
        return try connection.transaction { connection in
            var applied = try writeCompletions(on: connection, withEvent)
            applied += try rescheduleWithoutEvent(on: connection, withoutEvent)
            try countUncountedRetries(on: connection, uncounted)
            return applied
        }
    }

    /// Non-terminal completions that write no `delivery_events` row: the delivery is rescheduled (and its
    /// attempt refunded where the completion says so), nothing else.
    /// - Returns: how many took effect (fence still matching).
    static func rescheduleWithoutEvent(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
        let rescheduled = completions.filter { $0.nextRunAt != nil }
        guard !rescheduled.isEmpty else { return 0 }
        return try connection.query(
            """
            UPDATE deliveries d
            SET run_at = i.next_run_at, leased_by = NULL, last_error = i.reason,
                attempt = d.attempt - CASE WHEN i.refund THEN 1 ELSE 0 END
            FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::text[], $5::bool[])
                AS i(id, fence, next_run_at, reason, refund)
            WHERE d.id = i.id AND d.fence = i.fence
            """,
            [
                rescheduled.map(\.deliveryID), rescheduled.map(\.fence), rescheduled.map(\.nextRunAt),
                rescheduled.map(\.reason), rescheduled.map(\.refundsAttempt),
            ]
        ).affectedRows
    }

    /// Adds one to `deliveries.uncounted_retries` of each delivery (fenced).
    static func countUncountedRetries(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws {
        guard !completions.isEmpty else { return }
        _ = try connection.query(
            """
            UPDATE deliveries d SET uncounted_retries = d.uncounted_retries + 1
            FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
            WHERE d.id = i.id AND d.fence = i.fence
            """, [completions.map(\.deliveryID), completions.map(\.fence)])
    }

    /// Extends this worker's claims whose completions wait to be written: `run_at` (the lease's end) moves to
    /// `now() + leaseSeconds` for each delivery whose fence still matches, so no other worker claims (and
    /// sends again) a delivery whose push was already answered.
    /// - Returns: the ids whose lease was renewed (a missing id was claimed again by another worker, or its
    ///   row is gone).
    public static func renewLeases(
        on connection: PostgresConnection, deliveryIDs: [Int64], fences: [Int64], leaseSeconds: Double
    ) throws -> Set<Int64> {
        guard !deliveryIDs.isEmpty else { return [] }
        let rows = try connection.query(
            """
            UPDATE deliveries d SET run_at = now() + make_interval(secs => $3::float8)
            FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
            WHERE d.id = i.id AND d.fence = i.fence
            RETURNING d.id
            """, [deliveryIDs, fences, leaseSeconds])
        return Set(try rows.map { try $0.decode(Int64.self, "id") })
    }
}
