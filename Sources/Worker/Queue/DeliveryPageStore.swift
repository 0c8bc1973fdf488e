import DeliveryCore
import Foundation
import Postgres

/// Pages of broadcasts leased whole at expansion (`delivery_pages`, docs/performance.md, "Pages leased at
/// expansion"): their completions fenced on the page row, their leases renewed, and the pages of a worker whose
/// lease ran out rescued by another.
///
/// A page's deliveries have no queue row: each is settled by its terminal `delivery_events` row, written only while
/// the page still holds the fence its deliveries were handed out with, or by the `deliveries` row it becomes when
/// it must wait (a retry, a deferral). The worker counts each page's deliveries; the completion that settles the
/// last of them deletes the page.
public enum DeliveryPageStore {
    /// Writes page-sourced completions (``DeliverySource/page(_:)``) in one statement (``completeSQL``), in the
    /// caller's transaction when it has one: each page still holding the completion's fence is locked
    /// (`FOR SHARE`, so a rescue's fence update waits for this statement's transaction, and reads its events
    /// once it commits) or, when it is among `finishedPages`, deleted; the events of its completions that write
    /// one are appended, and its completions that must wait (``DeliveryCompletion/nextRunAt``) become
    /// `deliveries` rows (due then, `attempt` and `uncounted_retries` as the completion leaves them, the page's
    /// priority, the delivery's `apns_id`). A completion whose page lost that fence (rescued by another worker,
    /// or gone) writes nothing, unless its notification or subscription was deleted while its push was in flight
    /// and the pair has no final event: its event is then appended with `detail.delivery_deleted: true`, as
    /// ``CompletionStore/complete(on:_:finishedPages:)`` does for a claimed row whose row is gone.
    /// - Parameter finishedPages: pages whose last outstanding deliveries are among `completions`.
    /// - Returns: how many completions took effect.
    static func complete(
        on connection: PostgresConnection, _ completions: [DeliveryCompletion], finishedPages: [Int64]
    ) throws -> Int {
        guard !completions.isEmpty else { return 0 }
        let result = try connection.preparedQuery(
            completeSQL,
            [
                PostgresBinaryArray.bigint(completions.compactMap { $0.source.pageID }),
                PostgresBinaryArray.bigint(completions.map(\.fence)),
                PostgresBinaryArray.text(completions.map(\.event.rawValue)),
                PostgresBinaryArray.text(completions.map(\.reason?.rawValue)),
                PostgresBinaryArray.text(completions.map(\.detailJSON)),
                PostgresBinaryArray.timestamptz(completions.map(\.nextRunAt)),
                PostgresBinaryArray.text(completions.map { $0.nextRunAt == nil ? nil : $0.reason?.rawValue }),
                PostgresBinaryArray.uuid(completions.map { $0.claimedAs?.apnsID }),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.appID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.notificationID)),
                PostgresBinaryArray.uuid(completions.map(\.claimedAs?.subscriptionID)),
                PostgresBinaryArray.integer(completions.map {
                    $0.claimedAs.map { $0.attempt } ?? 1
                }),
                PostgresBinaryArray.integer(completions.map {
                    ($0.claimedAs?.attempt ?? 1) - ($0.refundsAttempt && $0.nextRunAt != nil ? 1 : 0)
                }),
                PostgresBinaryArray.integer(completions.map { $0.countsUncountedRetry && $0.nextRunAt != nil ? 1 : 0 }),
                PostgresBinaryArray.boolean(completions.map(\.writesEvent)),
                PostgresBinaryArray.bigint(finishedPages),
            ])
        return try result.first?.decode(Int.self, "applied") ?? 0
    }

    /// `$1` page ids, `$2` fences, `$3` events, `$4` reasons, `$5` details, `$6` next runs (NULL: terminal),
    /// `$7` the waiting rows' `last_error`, `$8` apns ids, `$9`-`$11` app, notification and subscription ids,
    /// `$12` the events' attempts, `$13` the waiting rows' attempts, `$14` their uncounted retries, `$15` whether
    /// each writes an event, `$16` the pages to delete.
    static let completeSQL = """
        WITH input AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
                                 $7::text[], $8::uuid[], $9::uuid[], $10::uuid[], $11::uuid[], $12::integer[],
                                 $13::integer[], $14::integer[], $15::bool[])
                AS i(page_id, fence, event, reason, detail, next_run_at, last_error, apns_id, app_id, notification_id,
                     subscription_id, attempt, next_attempt, uncounted, writes_event)
        ), fences AS MATERIALIZED (
            SELECT DISTINCT page_id, fence FROM input
        ), finished AS (
            DELETE FROM delivery_pages p USING fences f
            WHERE p.id = f.page_id AND p.fence = f.fence AND p.id = ANY($16::bigint[])
            RETURNING p.id, p.priority, p.lane
        ), held AS (
            -- FOR SHARE: a rescue's fence update (FOR NO KEY UPDATE) waits for this transaction, so it never
            -- reads the page's events before they are committed.
            SELECT p.id, p.priority, p.lane FROM delivery_pages p JOIN fences f ON p.id = f.page_id AND p.fence = f.fence
            WHERE p.id <> ALL($16::bigint[])
            FOR SHARE OF p
        ), live AS MATERIALIZED (
            SELECT id, priority, lane FROM finished UNION ALL SELECT id, priority, lane FROM held
        ), waiting AS (
            -- The deliveries insert trigger gives each app its claim turn no later than these rows' run. A waiting
            -- delivery keeps its page's lane (its subscription's).
            INSERT INTO deliveries (lane, notification_id, subscription_id, app_id, priority, run_at, attempt, last_error,
                                    uncounted_retries, apns_id)
            SELECT l.lane, i.notification_id, i.subscription_id, i.app_id, l.priority, i.next_run_at, i.next_attempt,
                   i.last_error, i.uncounted, coalesce(i.apns_id, gen_random_uuid())
            FROM input i JOIN live l ON l.id = i.page_id
            WHERE i.next_run_at IS NOT NULL
            ORDER BY i.subscription_id
            ON CONFLICT (notification_id, subscription_id) DO NOTHING
            RETURNING 1
        ), unheld AS MATERIALIZED (
            -- Only completions whose page lost their fence (usually none) are looked into further.
            SELECT i.* FROM input i
            WHERE i.writes_event AND i.notification_id IS NOT NULL AND i.page_id NOT IN (SELECT id FROM live)
        ), vanished AS MATERIALIZED (
            -- The page went with its notification (or app), deleted while the push was in flight (ON DELETE
            -- CASCADE), or the subscription was deleted: the outcome is still written, as for a claimed row whose
            -- row is gone (CompletionStore.completeSQL), unless the pair has a final event. A page another worker
            -- rescued has both parents (or that worker's final event exists): ignored.
            SELECT u.* FROM unheld u
            WHERE (NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = u.notification_id)
                   OR NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = u.subscription_id))
              AND NOT EXISTS (SELECT 1 FROM delivery_events e
                              WHERE e.notification_id = u.notification_id AND e.subscription_id = u.subscription_id
                                AND e.event IN ('sent', 'failed', 'skipped'))
        ), written AS (
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
            -- jsonb refuses the escape \\u0000 that JSON allows (a NUL from a provider's answer): never fail on it.
            SELECT i.app_id, i.notification_id, i.subscription_id, i.event, i.reason, i.attempt,
                   coalesce(replace(i.detail, '\\u0000', '\\ufffd')::jsonb, '{}'::jsonb) || i.deleted
            FROM (SELECT i.*, '{}'::jsonb AS deleted FROM input i JOIN live l ON l.id = i.page_id WHERE i.writes_event
                  UNION ALL SELECT v.*, '{"delivery_deleted": true}'::jsonb FROM vanished v) i
            RETURNING 1
        )
        -- The completions that took effect: those whose page held their fence, and the events written for a
        -- page gone with its notification or subscription.
        SELECT (SELECT count(*) FROM input i WHERE i.page_id IN (SELECT id FROM live))
               + (SELECT count(*) FROM vanished) AS applied
        """

    /// How many deliveries of the page row `page` (an alias of `delivery_pages`) in its range up to `upTo` (an SQL
    /// expression; the page's `up_to` for the whole page) have an outcome: a terminal event of the notification
    /// (`sent`, `failed`, `skipped`) or a `deliveries` row a waiting one became. One range of
    /// `delivery_events_notification` and of the deliveries' unique key, each no longer than a page: what `status`,
    /// the metrics' queue sample and a rescue's cut subtract from the page's `deliveries`.
    static func settledSQL(page: String, upTo: String) -> String {
        // Both ends of the range are index conditions: the lower written as `>=` the cursor (the nil UUID from the
        // start) with the cursor itself left out by a filter. As `after_id IS NULL OR id > after_id` it was a
        // filter, and each page read its notification's entries from the first: 9,500 of 10,500 entries thrown
        // away for the 20th page of 1,000.
        """
        ((SELECT count(*) FROM delivery_events e
          WHERE e.notification_id = \(page).notification_id AND e.subscription_id <= \(upTo)
            AND e.subscription_id >= coalesce(\(page).after_id, '\(nilUUID)'::uuid)
            AND e.subscription_id IS DISTINCT FROM \(page).after_id
            AND e.event IN ('sent', 'failed', 'skipped'))
         + (SELECT count(*) FROM deliveries d
            WHERE d.notification_id = \(page).notification_id AND d.subscription_id <= \(upTo)
              AND d.subscription_id >= coalesce(\(page).after_id, '\(nilUUID)'::uuid)
              AND d.subscription_id IS DISTINCT FROM \(page).after_id))
        """
    }

    /// The least UUID: the expansion's cursor before a notification's first page.
    static let nilUUID = "00000000-0000-0000-0000-000000000000"

    /// Extends this worker's page leases whose completions wait to be written: `lease_until` moves to
    /// `now() + lease` for each page whose fence still matches.
    /// - Returns: the pages whose lease was renewed.
    public static func renewLeases(
        on connection: PostgresConnection, pageIDs: [Int64], fences: [Int64], lease: Duration
    ) throws -> Set<Int64> {
        guard !pageIDs.isEmpty else { return [] }
        let rows = try connection.query(
            """
            UPDATE delivery_pages p SET lease_until = now() + make_interval(secs => $3::float8)
            FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
            WHERE p.id = i.id AND p.fence = i.fence
            RETURNING p.id
            """, [pageIDs, fences, lease.inSeconds])
        return Set(try rows.map { try $0.decode(Int64.self, "id") })
    }

    /// Takes the page whose lease ran out first (its worker died or was cut off), if any, for this worker: it gets
    /// `fence` + 1, the new lease, and `rescued_from` the worker whose lease ran out, committed on its own. Then
    /// reads, in a transaction of its own (whose snapshot sees every completion the old lease committed: those
    /// held the page `FOR SHARE` until their commit), the page's subscriptions its earlier leases did not settle
    /// (``AudienceQuery/Rescue``): they are sent again. A page with none left is deleted.
    ///
    /// The page is taken before it is read so that a page that cannot be read (a data error: ``RescueUnreadable``)
    /// stays leased to this worker until its new lease runs out, and is tried again only then, by any worker:
    /// it never fails every claim of every worker in turn.
    ///
    /// At most `limit` deliveries are read (the first in `subscriptions.id` order), so a rescue never admits more
    /// than the claim asked for: when that many are read, the page is cut after the last of them and the rest of
    /// its range becomes a page of its own (``cut(on:pageID:fence:after:handedOut:)``) whose lease has run out,
    /// taken by the next rescue of any worker.
    /// - Parameter limit: the most deliveries to take (> 0).
    /// - Returns: the rescued deliveries in the claim's row shape (``LeasedRows/pages``), for
    ///   ``ClaimStore/leasedRows(_:on:)``, and the page with how many deliveries it handed out (nil: none taken,
    ///   or none of its deliveries was left).
    /// - Throws: ``RescueUnreadable`` when the taken page's read fails with a data error; other errors as they come.
    public static func rescue(
        on connection: PostgresConnection, workerID: String, lease: Duration, limit: Int
    ) throws -> (rows: LeasedRows, page: (id: Int64, deliveries: Int)?) {
        guard limit > 0 else { return (.none, nil) }
        // Prepared: asked before every claim, it nearly always finds no page, and planning was most of its 0.2 ms.
        let taken = try connection.preparedQuery(
            """
            UPDATE delivery_pages p
            SET fence = p.fence + 1, leased_by = $1, lease_until = now() + make_interval(secs => $2::float8),
                rescued_from = p.leased_by
            FROM (SELECT id FROM delivery_pages WHERE lease_until <= now()
                  ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED) x
            WHERE p.id = x.id
            RETURNING p.id, p.fence, p.app_id, p.notification_id, p.priority, p.after_id, p.up_to, p.created_at,
                      p.rescued_from
            """, [workerID, lease.inSeconds])
        guard let page = taken.first else { return (.none, nil) }
        let pageID = try page.decode(Int64.self, "id")
        do {
            return try connection.transaction(localSettings: ["jit": "off"]) { connection in
                let notificationID = try page.decode(UUID.self, "notification_id")
                guard
                    let notification = try connection.query(
                        "SELECT \(ExpansionStore.pickColumns), xmin::text AS version FROM notifications WHERE id = $2",
                        [ExpansionStore.schedulingMemberBytes, notificationID]
                    ).first,
                    let selection = try ExpansionStore.audience(of: notification)
                else {
                    // A target no longer readable (it was read when the page was leased): nothing can be sent again.
                    _ = try connection.query("DELETE FROM delivery_pages WHERE id = $1", [pageID])
                    return (.none, nil)
                }
                let version = try notification.decode(String.self, "version")
                let after = try page.decodeIfPresent(UUID.self, "after_id")
                let fence = try page.decode(Int64.self, "fence")
                let query = AudienceQuery(
                    selection: selection, first: after == nil, upTo: try page.decode(UUID.self, "up_to"),
                    rescue: .init(
                        pageID: pageID, fence: fence, createdAt: try page.decode(Date.self, "created_at"),
                        rescuedFrom: try page.decodeIfPresent(String.self, "rescued_from"), limit: limit))
                let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
                let sent = DatabaseClockReading.StatementTiming()
                let rows = try connection.query(
                    query.sql,
                    [
                        notificationID, try page.decode(UUID.self, "app_id"), after ?? nilUUID,
                        ExpansionStore.expansionChunkSize, try page.decode(Int.self, "priority"), selection.platforms,
                    ] + query.parameters)
                let created = try rows[0].decode(Int.self, "created")
                if created == 0 {
                    _ = try connection.query("DELETE FROM delivery_pages WHERE id = $1", [pageID])
                    return (.none, nil)
                }
                if created >= limit, let last = try rows[0].decodeIfPresent(UUID.self, "last_id") {
                    try cut(on: connection, pageID: pageID, fence: fence, after: last, handedOut: created)
                }
                return (
                    LeasedRows(rows: rows, sent: sent, messageVersions: [notificationID: version], pages: true),
                    (pageID, created)
                )
            }
        } catch let error as PostgresError where error.isDataError {
            throw RescueUnreadable(pageID: pageID, error: error)
        }
    }

    /// Ends the rescued page `pageID` (still holding `fence`) at the subscription `after`, the last of the
    /// `handedOut` deliveries its rescue read, and makes the rest of its range (`after`, `up_to`] a page of its
    /// own: the same notification, priority and `created_at`, leased to the worker whose lease ran out and due
    /// for rescue at once (`lease_until` now), with the fence before this rescue, so that its own rescue sends its
    /// deliveries as the same attempt (no completion names the new page: its old fence admits none). The two pages' `deliveries` add up to the old one's: the
    /// first keeps those handed out and those of its range already settled (a terminal event or a `deliveries`
    /// row: one range of each index, as `status` counts them), the second the rest (at least 1; its rescue
    /// deletes it when nothing is left). Nothing is split when `after` is the page's last subscription.
    static func cut(on connection: PostgresConnection, pageID: Int64, fence: Int64, after: UUID, handedOut: Int) throws {
        _ = try connection.query(
            """
            WITH old AS (
                SELECT * FROM delivery_pages WHERE id = $1 AND fence = $2 AND up_to > $3
            ), first_part AS (
                UPDATE delivery_pages p
                SET up_to = $3, deliveries = $4 + \(settledSQL(page: "o", upTo: "$3"))
                FROM old o WHERE p.id = o.id
                RETURNING p.deliveries
            )
            INSERT INTO delivery_pages (app_id, notification_id, priority, after_id, up_to, deliveries, created_at,
                                        leased_by, lease_until, fence)
            SELECT o.app_id, o.notification_id, o.priority, $3, o.up_to, greatest(1, o.deliveries - f.deliveries),
                   o.created_at, coalesce(o.rescued_from, o.leased_by), now(), o.fence - 1
            FROM old o CROSS JOIN first_part f
            """, [pageID, fence, after, handedOut])
    }

    /// A rescued page whose deliveries could not be read (a data error in its notification's audience or its
    /// subscriptions): it stays leased to the worker that took it until that lease runs out.
    public struct RescueUnreadable: Error, CustomStringConvertible {
        /// The page (`delivery_pages.id`).
        public var pageID: Int64
        /// PostgreSQL's answer.
        public var error: PostgresError
        public var description: String { "delivery page \(pageID) could not be read for its rescue: \(error)" }
    }

    /// ``setAside(on:page:fence:subscriptionID:error:)``, tolerating a data error of its own: the delivery is then
    /// sent again by the page's rescue, never stalling anything.
    static func setAsideIfPossible(
        on connection: PostgresConnection, page: Int64, fence: Int64, subscriptionID: UUID, error: PostgresError
    ) throws {
        do {
            try setAside(on: connection, page: page, fence: fence, subscriptionID: subscriptionID, error: error)
        } catch let failure as PostgresError where failure.isDataError {
            return
        }
    }

    /// Appends the `failed` event of one delivery of a leased page that cannot be read
    /// (``ClaimStore/setAsideReason(_:)``), under the page's fence.
    static func setAside(
        on connection: PostgresConnection, page: Int64, fence: Int64, subscriptionID: UUID, error: PostgresError
    ) throws {
        let (reason, detail) = ClaimStore.setAsideReason(error)
        _ = try connection.query(
            """
            INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
            SELECT app_id, notification_id, $3, 'failed', $4, fence, $5::jsonb
            FROM delivery_pages WHERE id = $1 AND fence = $2
            """, [page, fence, subscriptionID, reason, detail.jsonText])
    }
}
