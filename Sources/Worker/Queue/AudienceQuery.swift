import DeliveryCore
import Foundation
import Postgres

/// The SQL of one expansion chunk for an ``AudienceSelection``, built only from fixed fragments: every value
/// (ids, tag keys, tag values, platforms) is a bound parameter, never text pasted into the statement.
///
/// Parameters: `$1` notification id, `$2` app id, `$3` cursor (last `subscriptions.id` done, or the nil UUID
/// on the first chunk), `$4` chunk size, `$5` delivery priority, `$6` platforms (`text[]` or NULL), `$7...`
/// the target's own values, then, for a local-time notification, its `delivery_time_of_day` and `ttl`.
struct AudienceQuery {
    /// The re-read of a page whose lease ran out, taken by another worker (``DeliveryPageStore/rescue(on:workerID:lease:limit:)``):
    /// the page's range (`$3` its `after_id`, `upTo` its `up_to`) read with the same audience, only subscriptions
    /// created no later than the page, and only those the page's earlier leases did not settle. The rows come in
    /// the claim's row shape with the page's id and new fence, `attempt` the fence, `rescued_from` the worker
    /// whose lease ran out.
    struct Rescue {
        var pageID: Int64
        var fence: Int64
        /// `delivery_pages.created_at`.
        var createdAt: Date
        var rescuedFrom: String?
        /// The most deliveries the re-read returns (the rescuing claim's limit): the first ones in
        /// `subscriptions.id` order; ``DeliveryPageStore/rescue(on:workerID:lease:limit:)`` cuts the rest off into a
        /// page of its own.
        var limit: Int
    }

    /// The whole statement; returns one row: `scanned` (subscriptions looked at), `last_id` (the new cursor,
    /// NULL when none) and `created` (deliveries inserted; existing ones are skipped by `ON CONFLICT`). With a
    /// lease, one row per delivery inserted (all leased; one row of NULLs beside the three when none), each with
    /// those three and the claim's columns (``ClaimStore/claimedRowsSelect``, read as a claim's rows are): the
    /// insert hands its rows to the worker itself, and no statement reads them back.
    let sql: String
    /// `$7...` in order.
    let parameters: [any PostgresEncodable]
    /// Whether to run ``sql`` prepared on its connection (`PostgresConnection.preparedQuery`): a leased page of
    /// listed ids, external ids or every subscription, whose texts are a handful per connection (filters'
    /// texts are as many as their combinations). Parsing and planning the page's statement were a third of its
    /// CPU (docs/performance.md, "Pages leased at expansion").
    private(set) var prepared = false

    /// The end of a statement whose `claimed` CTE (and `page`) came before: the claim's row shape of the
    /// `claimed` rows (``ClaimStore/claimedRowsSelect``), each with the statement's own figures (`last_id` the
    /// page's last subscription with `lastID`, else the last one `claimed` holds), and one row of NULLs beside
    /// those figures when `claimed` is empty.
    /// `leased`: the CTEs that end in `leased` (the rows), by default the claim's (``ClaimStore/claimedRowsTail``).
    private static func claimedTail(
        lastID: Bool,
        leased: String = "\(ClaimStore.claimedRowsSources),\nleased AS (\n\(ClaimStore.claimedRowsSelect)\n)"
    ) -> String {
        """
        ,
        \(leased)
        SELECT (SELECT count(*) FROM page) AS scanned,
               \(lastID ? "(SELECT id FROM page ORDER BY id DESC LIMIT 1)"
                         : "(SELECT subscription_id FROM claimed ORDER BY subscription_id DESC LIMIT 1)") AS last_id,
               (SELECT count(*) FROM claimed) AS created,
               l.*
        FROM (SELECT) chunk LEFT JOIN leased l ON true
        """
    }

    /// - Parameter first: `true` for the first chunk (`id >= nil UUID`, so even that id is included),
    ///   `false` afterwards (`id > cursor`).
    /// - Parameter localTime: the notification's local-time schedule: each delivery's `run_at` and
    ///   `local_due_at` are computed in the statement, once per distinct zone of the page
    ///   (``LocalTimeSQL``; docs/local-time-delivery.md).
    /// - Parameter upTo: the last `subscriptions.id` the page may reach (inclusive): a slice's upper bound
    ///   (``ExpansionStore/Slicing``), or a leased page's (``Rescue``).
    /// - Parameter lease: every row inserted is leased to `workerID` until `now() + seconds`, attempt and fence 1,
    ///   as a first claim leaves them; the caller makes the page (`$4`) no longer than the rows it may lease, and
    ///   leases only an app without a send limit (`apps.max_sends_per_second`: its claims charge its token
    ///   bucket). Ignored with `localTime` (those rows are due at each subscriber's local time).
    /// - Parameter leasePage: with `lease`, the page is leased whole instead (docs/performance.md, "Pages leased
    ///   at expansion"): one `delivery_pages` row, no `deliveries` row; the statement returns the page's matching
    ///   subscriptions in the claim's row shape, each with the page's id and fence (`created` counts them).
    /// - Parameter rescue: instead of a chunk, the re-read of a rescued page (``Rescue``): nothing is written.
    init(
        selection: AudienceSelection, first: Bool, localTime: ExpansionStore.LocalTimeSchedule? = nil, upTo: UUID? = nil,
        lease: (workerID: String, seconds: Double)? = nil, leasePage: Bool = false, rescue: Rescue? = nil
    ) {
        var parameters: [any PostgresEncodable] = []
        func bind(_ value: any PostgresEncodable, _ type: String) -> String {
            parameters.append(value)
            return "$\(6 + parameters.count)::\(type)"
        }
        // Id-list forms build the page from the list itself (index lookups); filter forms page over the app's
        // active subscriptions in id order and test each, so one chunk never scans more than `chunk size` rows.
        var listedIDs: String?
        var listedUsers: String?
        var matchPredicates: [String] = []
        var needsUsers = false
        switch selection.target {
        case .subscriptionIDs(let ids):
            // Binary: a page of 1,000 ids is neither written nor parsed as text.
            listedIDs = bind(PostgresBinaryArray.uuid(ids), "uuid[]")
        case .externalIDs(let ids):
            listedUsers = bind(PostgresBinaryArray.text(ids), "text[]")
        case .all:
            break
        case .filters(let filters):
            for filter in filters {
                let subject: String
                switch filter.field {
                case .tag(let key):
                    needsUsers = true
                    let keyParameter = bind(key, "text")
                    switch filter.relation {
                    case .exists:
                        matchPredicates.append("coalesce(u.tags ? \(keyParameter), false)")
                        continue
                    case .notExists:
                        matchPredicates.append("NOT coalesce(u.tags ? \(keyParameter), false)")
                        continue
                    // pushizo_tag_number (migration 0004) is total: a tag that is not a sane number in range
                    // is NULL and does not match; `number` is the text of an Int64 or a finite Double, so its
                    // cast cannot fail either.
                    case .greaterThan(let number):
                        matchPredicates.append(
                            "pushizo_tag_number(u.tags -> \(keyParameter)) > \(bind(number, "numeric"))")
                        continue
                    case .lessThan(let number):
                        matchPredicates.append(
                            "pushizo_tag_number(u.tags -> \(keyParameter)) < \(bind(number, "numeric"))")
                        continue
                    default:
                        subject = "(u.tags ->> \(keyParameter))"
                    }
                case .language: subject = "s.language"
                case .country: subject = "s.country"
                case .platform: subject = "s.platform"
                }
                switch filter.relation {
                case .equals(let text): matchPredicates.append("\(subject) = \(bind(text, "text"))")
                case .notEquals(let text): matchPredicates.append("\(subject) IS DISTINCT FROM \(bind(text, "text"))")
                case .exists: matchPredicates.append("\(subject) IS NOT NULL")
                case .notExists: matchPredicates.append("\(subject) IS NULL")
                case .oneOf(let texts): matchPredicates.append("\(subject) = ANY(\(bind(texts, "text[]")))")
                // Parsing refuses > and < outside tags; never reached.
                case .greaterThan, .lessThan: matchPredicates.append("FALSE")
                }
            }
        }
        // Tested per row of the page (not in the page's WHERE), so a chunk still scans at most `chunk size`
        // subscriptions when few hold the kind (a VoIP push to a large app).
        matchPredicates.append("s.kind = \(bind(selection.subscriptionKind, "text"))")
        let match = matchPredicates.isEmpty ? "TRUE" : matchPredicates.joined(separator: "\n      AND ")
        // Local time: the due instant per distinct zone of the page, found by each row under its key.
        var localCTE = ""
        var localColumns = ""
        var localValues = ""
        var localJoin = ""
        if let localTime {
            let timeOfDay = bind(localTime.timeOfDay, "time")
            let ttl = bind(localTime.ttl, "integer")
            localCTE = LocalTimeSQL.ctes(
                pairs: "SELECT DISTINCT $1::uuid AS notification_id, \(LocalTimeSQL.zoneKey("p.timezone")) AS zone_key FROM page p",
                notifications: """
                    SELECT n.id, coalesce(n.send_after, n.created_at) AS start_at, a.default_timezone AS app_zone,
                           \(timeOfDay) AS time_of_day, \(ttl) AS ttl
                    FROM notifications n JOIN apps a ON a.id = n.app_id WHERE n.id = $1
                    """)
            localColumns = ", run_at, local_due_at"
            let entry = LocalTimeSQL.scheduleEntry(schedule: "ls", notification: "$1::uuid", zone: LocalTimeSQL.zoneKey("s.timezone"))
            localValues = ", \(LocalTimeSQL.runAt(entry: entry)), \(LocalTimeSQL.dueAt(entry: entry))"
            localJoin = " CROSS JOIN local_schedule ls"
        }
        // `lane`: each delivery takes its subscription's lane (docs/scale-out.md, "The shape: queue lanes"), written here
        // rather than left to the column's default, a function call per row.
        // A leased page's rows carry each subscription's columns from this read (``ClaimStore/pageRowsTail``).
        let pageLeased = lease != nil && localTime == nil && leasePage && rescue == nil
        let carried = Set(ClaimStore.pageSubscriptionColumns).subtracting(["user_id", "platform", "language", "country", "timezone"])
        let columns = "s.id, s.app_id, s.user_id, s.platform, s.language, s.country, s.timezone, s.kind, s.lane"
            + (pageLeased ? carried.sorted().map { ", s.\($0)" }.joined() : "")
        let after = first ? ">=" : ">"
        let bounded = upTo.map { " AND s.id <= \(bind($0, "uuid"))" } ?? ""
        // A rescued page holds only the subscriptions that existed when it was leased.
        let existed = rescue.map { " AND s.created_at <= \(bind($0.createdAt, "timestamptz"))" } ?? ""
        let page: String
        if let listedIDs {
            // The listed ids in order, each looked up by primary key: a chunk costs the list, never the app.
            // Left to the planner, `s.id = ANY(...)` beside `ORDER BY s.id LIMIT` could walk the app's whole
            // active index and test each row against the list (52 ms for 1,000 ids in an app of 20,000). The
            // lookup's only condition is the key, and OFFSET 0 keeps the outer conditions out of it (and the
            // lookup from becoming a join), so no statistics can make it an index walk.
            page = """
                SELECT \(columns)
                FROM (SELECT DISTINCT l.id FROM unnest(\(listedIDs)) AS l(id) WHERE l.id \(after) $3::uuid) l
                CROSS JOIN LATERAL (SELECT \(columns), s.status, s.created_at FROM subscriptions s WHERE s.id = l.id OFFSET 0) s
                WHERE s.app_id = $2 AND s.status = 'active'\(bounded)\(existed)
                ORDER BY l.id
                LIMIT $4
                """
        } else if let listedUsers {
            // The listed users (by the unique key on app and external id), then each one's subscriptions through
            // `subscriptions_user`, the lookup's only condition (as above): a chunk costs the users' devices,
            // never the app's.
            page = """
                SELECT \(columns)
                FROM (SELECT DISTINCT x.id FROM users x WHERE x.app_id = $2 AND x.external_id = ANY(\(listedUsers))) u
                CROSS JOIN LATERAL (SELECT \(columns), s.status, s.created_at FROM subscriptions s WHERE s.user_id = u.id OFFSET 0) s
                WHERE s.app_id = $2 AND s.status = 'active' AND s.id \(after) $3::uuid\(bounded)\(existed)
                ORDER BY s.id
                LIMIT $4
                """
        } else {
            page = """
                SELECT \(columns)
                FROM subscriptions s
                WHERE s.app_id = $2 AND s.status = 'active' AND s.id \(after) $3::uuid\(bounded)\(existed)
                ORDER BY s.id
                LIMIT $4
                """
        }
        // A tag filter reads each page row's user by key (a lookup, OFFSET 0 keeping it one): as a join, the planner
        // could hash the whole users table for every chunk of 5,000, so that a broadcast read the table once per
        // chunk.
        let users = needsUsers ? " LEFT JOIN LATERAL (SELECT tags FROM users WHERE id = s.user_id OFFSET 0) u ON true" : ""
        // Whether a subscription of the page (`s`, with its user as `u`) is in the audience: every form below.
        let matches = "($6::text[] IS NULL OR s.platform = ANY($6::text[])) AND \(match)"
        if let rescue {
            let pageID = bind(rescue.pageID, "bigint")
            let fence = bind(rescue.fence, "bigint")
            let rescuedFrom = bind(rescue.rescuedFrom, "text")
            let limit = bind(rescue.limit, "integer")
            // What the page's earlier leases settled is left out: a terminal event (sent, failed, skipped) of the
            // notification for the subscription (delivery_events_notification), or a `deliveries` row a waiting
            // delivery became. The rest is sent again: at least once.
            sql = """
                WITH page AS (
                \(page)
                ), claimed AS (
                    SELECT \(pageID) AS id, \(fence) AS fence, \(fence)::integer AS attempt, $1::uuid AS notification_id,
                           s.id AS subscription_id, s.app_id, gen_random_uuid() AS apns_id, 0 AS uncounted_retries,
                           NULL::timestamptz AS local_due_at, \(rescuedFrom) AS rescued_from, $5::smallint AS priority
                    FROM page s\(users)
                    WHERE \(matches)
                      AND NOT EXISTS (SELECT 1 FROM delivery_events e
                                      WHERE e.notification_id = $1 AND e.subscription_id = s.id
                                        AND e.event IN ('sent', 'failed', 'skipped'))
                      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = $1 AND d.subscription_id = s.id)
                    ORDER BY s.id
                    LIMIT \(limit)
                )\(Self.claimedTail(lastID: false))
                """
            self.parameters = parameters
            return
        }
        if let lease, localTime == nil, leasePage {
            let seconds = bind(lease.seconds, "float8")
            let worker = bind(lease.workerID, "text")
            let subscriptionColumns = ClaimStore.pageSubscriptionColumns.map { "s.\($0)" }.joined(separator: ", ")
            // One row for the page, only when it has a delivery: its range is what a rescue reads again.
            sql = """
                WITH page AS (
                \(page)
                ), matched AS MATERIALIZED (
                    SELECT s.id, s.app_id, s.lane, \(subscriptionColumns) FROM page s\(users)
                    WHERE \(matches)
                ), leased_page AS (
                    -- A page's subscriptions share one lane (a page reads one lane; on a single node every lane is 0).
                    INSERT INTO delivery_pages (lane, app_id, notification_id, priority, after_id, up_to, deliveries,
                                                leased_by, lease_until)
                    SELECT m.lane, $2, $1, $5::smallint, \(first ? "NULL::uuid" : "$3::uuid"),
                           (SELECT id FROM page ORDER BY id DESC LIMIT 1), m.n, \(worker),
                           now() + make_interval(secs => \(seconds))
                    FROM (SELECT count(*)::integer AS n, min(lane) AS lane FROM matched) m
                    WHERE m.n > 0
                    RETURNING id, fence
                ), claimed AS (
                    SELECT p.id, p.fence, 1 AS attempt, $1::uuid AS notification_id, s.id AS subscription_id, s.app_id,
                           gen_random_uuid() AS apns_id, 0 AS uncounted_retries, NULL::timestamptz AS local_due_at,
                           NULL::text AS rescued_from, \(subscriptionColumns)
                    FROM matched s CROSS JOIN leased_page p
                )\(Self.claimedTail(lastID: true, leased: ClaimStore.pageRowsTail))
                """
            self.parameters = parameters
            if case .filters = selection.target {} else { prepared = true }
            return
        }
        if let lease, localTime == nil {
            let seconds = bind(lease.seconds, "float8")
            let worker = bind(lease.workerID, "text")
            // Every row inserted is leased: the caller makes the page no longer than the worker's room, so the
            // expansion goes as far as the room and no further. The leased rows are written as a first claim leaves
            // them (run_at the lease's end, attempt and fence 1), so a worker that dies before sending them loses
            // nothing: they fall due at the lease's end and any worker claims them (the insert trigger sets the
            // app's turn to the earliest run_at inserted).
            sql = """
                WITH page AS (
                \(page)
                ), claimed AS (
                    INSERT INTO deliveries (lane, notification_id, subscription_id, app_id, priority, run_at, attempt, fence,
                                            leased_by)
                    SELECT s.lane, $1::uuid, s.id, s.app_id, $5::smallint, now() + make_interval(secs => \(seconds)), 1, 1,
                           \(worker)
                    FROM page s\(users)
                    WHERE \(matches)
                    ORDER BY s.id
                    ON CONFLICT (notification_id, subscription_id) DO NOTHING
                    RETURNING id, fence, attempt, notification_id, subscription_id, app_id, apns_id, uncounted_retries,
                              local_due_at, NULL::text AS rescued_from
                )\(Self.claimedTail(lastID: true))
                """
            self.parameters = parameters
            return
        }
        sql = """
            WITH page AS (
            \(page)
            )\(localCTE), inserted AS (
                INSERT INTO deliveries (lane, notification_id, subscription_id, app_id, priority\(localColumns))
                SELECT s.lane, $1::uuid, s.id, s.app_id, $5::smallint\(localValues)
                FROM page s\(users)\(localJoin)
                WHERE \(matches)
                ORDER BY s.id
                ON CONFLICT (notification_id, subscription_id) DO NOTHING
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM page) AS scanned,
                   (SELECT id FROM page ORDER BY id DESC LIMIT 1) AS last_id,
                   (SELECT count(*) FROM inserted) AS created
            """
        self.parameters = parameters
    }
}
