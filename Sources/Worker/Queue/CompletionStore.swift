import DeliveryCore
import Foundation
import Postgres

/// Completions written back: a batch of outcomes in one statement, fenced by the fence each delivery was claimed
/// with, and the statements that follow from them (subscription invalidations, channel pauses, frequency-cap
/// releases) in the same transaction.
public enum CompletionStore {
    /// Writes a batch of completions atomically: terminal rows are deleted from the queue, the others
    /// rescheduled, and one `delivery_events` row is appended for each delivery whose fence still matches and
    /// whose completion writes one (``DeliveryCompletion/writesEvent``: a retry that spent no attempt past the
    /// first few writes none). Retries that spent no attempt are counted
    /// (``DeliveryCompletion/countsUncountedRetry``), and each rescheduled delivery's app gets its claim turn no
    /// later than the delivery's next run. Completions whose fence no longer matches (the lease expired and
    /// another worker claimed the delivery) change nothing. Subscription invalidations and channel pauses are
    /// applied in the same transaction, and so are frequency-cap releases (``DeliveryCompletion/capRelease``) of
    /// completions that took effect. A batch that needs none of those is the one statement ``completeSQL``, run
    /// without a transaction block (a statement is atomic on its own; `BEGIN` and `COMMIT` would be two more
    /// round trips).
    ///
    /// Completions of a leased page's deliveries (``DeliverySource/page(_:)``) are written by
    /// ``DeliveryPageStore/complete(on:_:finishedPages:)`` in the same transaction.
    /// - Parameter finishedPages: the pages whose last outstanding deliveries are among `completions`: deleted.
    /// - Parameter lanes: the queue is Citus-distributed (``QueueTopology/lanes(_:)``): the rows' completions are
    ///   written lane by lane (``writeLaneCompletions(on:_:)``), in one transaction with their count deltas.
    /// - Returns: how many completions took effect (the rest lost their lease).
    @discardableResult
    public static func complete(
        on connection: PostgresConnection, _ completions: [DeliveryCompletion], finishedPages: [Int64] = [],
        lanes: Bool = false
    ) throws -> Int {
        // A completion that neither ends its delivery nor writes an event changes nothing (a page's still counts:
        // it may be the page's last).
        let completions = completions.filter { $0.writesEvent || $0.nextRunAt != nil || $0.source.pageID != nil }
        guard !completions.isEmpty else { return 0 }
        if lanes {
            return try connection.transaction {
                try writeCompletions(on: $0, completions, finishedPages: finishedPages, lanes: true)
            }
        }
        if !needsFollowUpStatements(completions) {
            return try writeCompletions(on: connection, completions, finishedPages: finishedPages)
        }
        return try connection.transaction { try writeCompletions(on: $0, completions, finishedPages: finishedPages) }
    }

    /// Whether writing `completions` takes more than one statement: an invalidation, a channel pause or a
    /// frequency-cap release, or both rows' and pages' completions.
    static func needsFollowUpStatements(_ completions: [DeliveryCompletion]) -> Bool {
        completions.contains { $0.invalidation != nil || $0.channelPause != nil || $0.capRelease != nil }
            || (completions.contains { $0.source.pageID != nil } && completions.contains { $0.source.rowID != nil })
    }

    /// The statements of ``complete(on:_:finishedPages:)``, in the caller's transaction when they are more than one.
    static func writeCompletions(
        on connection: PostgresConnection, _ all: [DeliveryCompletion], finishedPages: [Int64] = [], lanes: Bool = false
    ) throws -> Int {
        guard !all.isEmpty else { return 0 }
        let pageCompletions = all.filter { $0.source.pageID != nil }
        let pagesApplied = try DeliveryPageStore.complete(
            on: connection, pageCompletions, finishedPages: finishedPages)
        let completions = all.filter { $0.source.rowID != nil && ($0.writesEvent || $0.nextRunAt != nil) }
        let rowsApplied = completions.isEmpty
            ? 0 : try lanes ? writeLaneCompletions(on: connection, completions) : writeRowCompletions(on: connection, completions)
        try writeFollowUps(on: connection, all, lanes: lanes)
        return pagesApplied + rowsApplied
    }

    /// ``completeSQL`` for completions of `deliveries` rows.
    private static func writeRowCompletions(on connection: PostgresConnection, _ completions: [DeliveryCompletion])
        throws -> Int
    {
        let result = try connection.preparedQuery(completeSQL, completeParameters(completions))
        return try result.first?.decode(Int.self, "applied") ?? 0
    }

    /// ``completeSQL(lane:)`` for each lane of `completions` (a router statement on the lane's shard), then the
    /// count deltas of the events written, one row per notification in one multi-row `VALUES` (the rows go to
    /// their notifications' shards: a second node, and two-phase commit, when those are elsewhere). In the
    /// caller's transaction.
    static func writeLaneCompletions(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws
        -> Int
    {
        var applied = 0
        var deltas: [UUID: [Int64]] = [:]
        for (lane, ofLane) in Dictionary(grouping: completions, by: \.lane).sorted(by: { $0.key < $1.key }) {
            let rows = try connection.preparedQuery(completeLaneSQL, completeParameters(ofLane) + [lane])
            for row in rows {
                guard let notification = try row.decodeIfPresent(UUID.self, "notification_id") else {
                    applied += try row.decode(Int.self, "applied")
                    continue
                }
                let counts = try ["sent", "failed", "skipped", "deferred"].map { try row.decode(Int64.self, $0) }
                deltas[notification] = zip(deltas[notification] ?? [0, 0, 0, 0], counts).map { $0 + $1 }
            }
        }
        guard !deltas.isEmpty else { return applied }
        let ordered = deltas.sorted { $0.key.uuidString < $1.key.uuidString }
        let values = ordered.indices.map { index in
            "(" + (1...5).map { "$\(index * 5 + $0)" + ($0 == 1 ? "::uuid" : "::bigint") }.joined(separator: ", ") + ")"
        }
        _ = try connection.query(
            "INSERT INTO notification_event_counts (notification_id, sent, failed, skipped, deferred) VALUES "
                + values.joined(separator: ", "),
            ordered.flatMap { [$0.key] + $0.value.map { $0 as any PostgresEncodable } })
        return applied
    }

    static let completeLaneSQL = completeSQL(lane: true)

    /// The parameters `$1` ... `$14` of ``completeSQL(lane:)`` for `completions`.
    static func completeParameters(_ completions: [DeliveryCompletion]) -> [any PostgresEncodable] {
        // In binary format, each typed as `completeSQL` casts it: neither side writes or parses an
        // array literal and its elements' text (timestamps and uuids above all) for every delivery.
        [
            PostgresBinaryArray.bigint(completions.compactMap { $0.source.rowID }),
            PostgresBinaryArray.bigint(completions.map(\.fence)),
            PostgresBinaryArray.text(completions.map(\.event.rawValue)),
            PostgresBinaryArray.text(completions.map(\.reason?.rawValue)),
            PostgresBinaryArray.text(completions.map(\.detailJSON)),
            PostgresBinaryArray.timestamptz(completions.map(\.nextRunAt)),
            PostgresBinaryArray.text(completions.map { $0.nextRunAt == nil ? nil : $0.reason?.rawValue }),
            PostgresBinaryArray.boolean(completions.map(\.refundsAttempt)),
            PostgresBinaryArray.uuid(completions.map(\.claimedAs?.appID)),
            PostgresBinaryArray.uuid(completions.map(\.claimedAs?.notificationID)),
            PostgresBinaryArray.uuid(completions.map(\.claimedAs?.subscriptionID)),
            PostgresBinaryArray.integer(completions.map(\.claimedAs?.attempt)),
            PostgresBinaryArray.boolean(completions.map(\.writesEvent)),
            PostgresBinaryArray.boolean(completions.map { $0.countsUncountedRetry && $0.nextRunAt != nil }),
        ]
    }

    /// The statements that follow from `completions`: subscription invalidations, channel pauses, frequency-cap
    /// releases. With `lanes` (a Citus-distributed queue) the invalidations are one router `UPDATE` per lane, by
    /// `(lane, id)`: the subscription is in its delivery's lane.
    private static func writeFollowUps(
        on connection: PostgresConnection, _ completions: [DeliveryCompletion], lanes: Bool = false
    ) throws {
        let invalidating = completions.filter { $0.invalidation != nil }
        // On a single node one statement for all (every lane is 0 there, and no lane is named).
        for (lane, ofLane) in Dictionary(grouping: invalidating, by: { lanes ? $0.lane : 0 }) {
            let invalidations = ofLane.compactMap(\.invalidation)
            var parameters: [any PostgresEncodable] = [
                invalidations.map(\.subscriptionID), invalidations.map(\.reason.rawValue),
                invalidations.map(\.tokenUpdatedAt),
            ]
            if lanes { parameters.append(lane) }
            _ = try connection.query(
                """
                UPDATE subscriptions s
                SET status = 'invalid', invalid_reason = i.reason
                FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS i(id, reason, token_seen)
                WHERE s.id = i.id AND s.status = 'active' AND s.token_updated_at <= i.token_seen\(lanes ? " AND s.lane = $4::integer" : "")
                """, parameters)
        }
        for pause in completions.compactMap(\.channelPause) {
            _ = try connection.query(
                channelPauseSQL, [pause.appID, pause.provider.rawValue, pause.until, pause.reason.rawValue])
        }
        // Last: a transaction waiting for a key's advisory lock may hold row locks, but one holding such a
        // lock then waits only for other such locks (taken in hash order), so no cycle can form.
        let releases = completions.compactMap(\.capRelease)
        if !releases.isEmpty {
            try FrequencyCapStore.releaseGrants(on: connection, releases)
        }
    }

    /// A channel paused by the provider's answer: `$1` app, `$2` provider, `$3` until, `$4` the reason. The pause
    /// only grows; an operator's pause (reason `operator`, docs/operations.md) that outlasts it stays the
    /// operator's, so `resume` still lifts it.
    static let channelPauseSQL = """
        UPDATE app_channels
        SET paused_until = greatest(coalesce(paused_until, now()), $3),
            paused_reason = CASE WHEN paused_reason = 'operator' AND paused_until >= $3 THEN paused_reason ELSE $4 END,
            updated_at = now()
        WHERE app_id = $1 AND provider = $2
        """

    static let completeSQL = completeSQL(lane: false)

    /// ``completeSQL``, or with `lane` its Citus form for one lane's completions (docs/scale-out.md, "The hot
    /// statements"), one more parameter (`$15`, the lane): `lane = $15` on every distributed table it reads or
    /// writes, so that it runs whole on the lane's shard; the rescheduled rows' turns upserted on `(lane, app_id)`
    /// and the events inserted with the lane (no default drawn); a vanished row's event written when its
    /// subscription is gone (its notification is on another shard; on Citus deleting a notification does not delete
    /// its deliveries). The `delivery_events` count triggers are dropped on Citus: the statement returns, besides
    /// the row with `applied` (and a null `notification_id`), one row per notification with its counted events
    /// (`sent`, `failed`, `skipped`, `deferred`), which ``writeLaneCompletions(on:_:)`` appends as count deltas.
    static func completeSQL(lane: Bool) -> String {
        let inLane = lane ? " AND d.lane = $15::integer" : ""
        let turns = lane
            ? """
            INSERT INTO app_claim_turns (lane, app_id, turn_at)
                SELECT $15::integer, app_id, min(run_at) FROM rescheduled GROUP BY app_id ORDER BY app_id
                ON CONFLICT (lane, app_id) DO UPDATE SET turn_at = least(app_claim_turns.turn_at, excluded.turn_at)
            """
            : """
            INSERT INTO app_claim_turns (app_id, turn_at)
                SELECT app_id, min(run_at) FROM rescheduled GROUP BY app_id ORDER BY app_id
                ON CONFLICT (app_id) DO UPDATE SET turn_at = least(app_claim_turns.turn_at, excluded.turn_at)
            """
        let parentGone = lane
            ? "NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = m.subscription_id AND s.lane = $15::integer)"
            : """
            (NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = m.notification_id)
                       OR NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = m.subscription_id))
            """
        let (eventLane, eventLaneValue) = lane ? (", lane", ", $15::integer") : ("", "")
        let result = lane
            ? """
            SELECT NULL::uuid AS notification_id, count(*) AS applied, 0::bigint AS sent, 0::bigint AS failed,
                   0::bigint AS skipped, 0::bigint AS deferred
            FROM settled WHERE writes_event OR NOT deleted
            UNION ALL
            SELECT notification_id, 0, count(*) FILTER (WHERE event = 'sent'), count(*) FILTER (WHERE event = 'failed'),
                   count(*) FILTER (WHERE event = 'skipped'), count(*) FILTER (WHERE event = 'deferred')
            FROM written WHERE event IN ('sent', 'failed', 'skipped', 'deferred') GROUP BY notification_id
            """
            : "SELECT count(*) AS applied FROM settled WHERE writes_event OR NOT deleted"
        return """
        WITH input AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                                 $6::timestamptz[], $7::text[], $8::bool[],
                                 $9::uuid[], $10::uuid[], $11::uuid[], $12::integer[], $13::bool[], $14::bool[])
                AS i(id, fence, event, reason, detail, next_run_at, last_error, refund,
                     app_id, notification_id, subscription_id, attempt, writes_event, uncounted)
        ), terminal AS (
            DELETE FROM deliveries d USING input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NULL\(inLane)
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail,
                      i.writes_event
        ), rescheduled AS (
            UPDATE deliveries d
            SET run_at = i.next_run_at, leased_by = NULL, last_error = i.last_error,
                attempt = d.attempt - CASE WHEN i.refund THEN 1 ELSE 0 END,
                uncounted_retries = d.uncounted_retries + CASE WHEN i.uncounted THEN 1 ELSE 0 END
            FROM input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NOT NULL\(inLane)
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt, i.event, i.reason, i.detail,
                      i.writes_event, d.run_at
        ), turns AS (
            -- A rescheduled delivery's app has its turn no later than the delivery's next run (claims visit apps
            -- by turn). Each row is written even when its time stays, so that a claim that computed a later turn
            -- without seeing this reschedule keeps the earlier one (docs/fairness.md); in app order, as the
            -- deliveries insert trigger takes them.
            \(turns)
        ), missing AS MATERIALIZED (
            -- Only completions that settled nothing (usually none) are looked up: is their queue row gone?
            SELECT i.id, i.app_id, i.notification_id, i.subscription_id, i.attempt, i.event, i.reason, i.detail,
                   i.writes_event
            FROM input i
            WHERE i.notification_id IS NOT NULL
              AND i.id NOT IN (SELECT id FROM terminal UNION ALL SELECT id FROM rescheduled)
              AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = i.id\(inLane))
        ), vanished AS (
            -- The row is gone because its subscription or notification (or their app) was deleted while the
            -- push was in flight (ON DELETE CASCADE): the outcome is still written. A row another worker
            -- completed is gone too, but its parents exist (or that worker wrote the final event): ignored.
            SELECT m.* FROM missing m
            WHERE \(parentGone)
              AND NOT EXISTS (SELECT 1 FROM delivery_events e
                              WHERE e.notification_id = m.notification_id AND e.subscription_id = m.subscription_id
                                AND e.event IN ('sent', 'failed', 'skipped')\(lane ? " AND e.lane = $15::integer" : ""))
        ), settled AS (
            -- Each settled row carries its input's event, so no join back to the input is planned (a prepared
            -- plan that guesses a few rows may make it a nested loop: 83,000 comparisons for 289 rows, seen).
            SELECT id, app_id, notification_id, subscription_id, attempt, event, reason, detail, writes_event,
                   false AS deleted FROM terminal
            UNION ALL SELECT id, app_id, notification_id, subscription_id, attempt, event, reason, detail, writes_event,
                             false FROM rescheduled
            UNION ALL SELECT *, true FROM vanished
        ), written AS (
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail\(eventLane))
            -- jsonb refuses the escape \\u0000 that JSON allows (a NUL from a provider's answer): never fail on it.
            SELECT s.app_id, s.notification_id, s.subscription_id, s.event, s.reason, s.attempt,
                   coalesce(replace(s.detail, '\\u0000', '\\ufffd')::jsonb, '{}'::jsonb)
                       || CASE WHEN s.deleted THEN '{"delivery_deleted": true}'::jsonb ELSE '{}'::jsonb END\(eventLaneValue)
            FROM settled s
            WHERE s.writes_event\(lane ? "\n    RETURNING notification_id, event" : "")
        )
        -- The completions that took effect: their queue row changed, or their event was written for a row gone.
        \(result)
        """
    }
}
