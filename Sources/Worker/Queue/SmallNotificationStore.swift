import DeliveryCore
import Foundation
import Postgres

/// The small notifications' lane: due notifications with short id-list targets expanded many at once, in one
/// transaction a pass (docs/targets.md, "Small notifications in bulk").
public enum SmallNotificationStore {
    /// Most small notifications one ``expandSmallNotifications(on:limit:suspects:)`` call takes (one
    /// transaction, two statements).
    public static let smallNotificationBatch = 500

    /// Largest `target` (bytes of JSON text as PostgreSQL prints it) a notification may have to be expanded in
    /// bulk: about 200 UUIDs. A batch then reads at most ``smallNotificationBatch`` x 8 KiB = 4 MiB of targets.
    public static let smallTargetBytes = 8_192

    /// Most deliveries one bulk pass may create, counted as an upper bound before the insert (each listed
    /// subscription id; each subscription of each listed user): the same bound as a chunk's, so a pass stays a
    /// short transaction whatever the listed users own. A target's size bounds its ids, not its audience: 8 KiB
    /// of external ids can name 800 users, and each user any number of devices.
    public static let smallPassDeliveryBudget = ExpansionStore.expansionChunkSize

    /// A notification that costs at least this much of ``smallPassDeliveryBudget`` (a tenth: listed ids or
    /// devices) and does not fit what a pass has left goes the chunked way rather than waiting for a later pass.
    public static let smallPassHeavyCost = smallPassDeliveryBudget / 10

    /// A notification expanded in bulk: never touched by expansion (so no suspect, nothing to resume), an
    /// id-list target of at most ``smallTargetBytes``. Total: it reads columns and tests key presence only,
    /// so it cannot fail on data. Swift still validates the target before any statement uses it. Written word
    /// for word into the predicates of the indexes `notifications_to_expand_small` and
    /// `notifications_to_expand_large` (migration 0017), which the two picks need: change them together.
    static let smallNotificationPredicate = """
        status = 'pending' AND expansion_touched_at IS NULL AND expansion_cursor IS NULL
        AND (target ? 'include_subscription_ids' OR target ? 'include_external_ids')
        AND octet_length(target::text) <= \(smallTargetBytes)
        """

    /// What one ``expandSmallNotifications(on:limit:suspects:)`` call did.
    public struct SmallExpansionResult: Sendable, Equatable {
        /// Notifications picked (locked) by the bulk statement.
        public var picked = 0
        /// Notifications now `expanded`, and the deliveries they created.
        public var expanded = 0
        public var created = 0
        /// The notifications of the bulk statement that created deliveries (not those of a fall-back).
        public var withDeliveries: [UUID] = []
        /// Of `created`, the deliveries inserted leased to this worker (``ExpansionStore/InsertLease``); the others
        /// are due for any claim.
        public var leased = 0
        /// Notifications failed (refused target or message, expired, or convicted of a data error), with reason.
        public var failed: [Failed] = []
        /// Notifications whose insert failed on data without evidence yet: pushed behind the others.
        public var setAside: [UUID] = []
        /// Set when every notification's insert failed on data (``ExpansionStore/ExpansionResult/stalled(notificationID:sqlState:)``).
        public var stalledSQLState: String?
        /// Notifications whose audience is larger than a pass may create (``smallPassDeliveryBudget``), such as
        /// a few external ids of users with thousands of devices: moved to the chunked path (touched, so no
        /// longer small), which expands them a chunk at a time between passes.
        public var chunked: [UUID] = []
        /// Notifications picked but left pending for the next pass, because the pass's budget was spent.
        public var deferred = 0
        /// `true` when the bulk insert failed on data and the group was expanded one at a time.
        public var fellBack = false
        /// Transactions committed (1 for a bulk pass; more after a fall-back).
        public var transactions = 0

        public struct Failed: Sendable, Equatable {
            public var notificationID: UUID
            public var reason: String
        }
    }
    /// Expands up to `limit` small notifications at once (docs/targets.md, "Small notifications in bulk"): due,
    /// never touched by expansion, with an id-list target of at most ``smallTargetBytes``. One transaction: one
    /// statement picks them `FOR UPDATE SKIP LOCKED` (oldest first), Swift validates each (a refused one is
    /// marked `failed` in the same transaction), one `INSERT ... SELECT` creates every delivery (subscription
    /// ids by primary key, external ids through `users (app_id, external_id)` and `subscriptions (user_id)`),
    /// `ON CONFLICT DO NOTHING`, and marks them `expanded` with their `targeted_count` in the same statement. A crash
    /// rolls the whole pass back; nothing is half-expanded. A pass creates at most ``smallPassDeliveryBudget``
    /// deliveries, counted before the insert: in pick order, a notification whose own audience is larger goes the
    /// chunked way (``SmallExpansionResult/chunked``), and so does one of at least ``smallPassHeavyCost`` that no
    /// longer fits; a lighter one that no longer fits is left for the next pass (``SmallExpansionResult/deferred``).
    ///
    /// If the insert fails on data (SQLSTATE class 22/23), the pass is rolled back and every picked
    /// notification is expanded one at a time (``ExpansionStore/expandNext(on:chunkSize:suspects:pick:)`` with `.only`), so
    /// the poison-row rules of ``ExpansionSuspects`` apply to each alone: the faulty one is set aside (and
    /// failed on evidence later), the others expand.
    /// - Returns: what was done; `picked == 0` when no small notification was due.
    /// - Throws: ``PostgresError`` other than a data error of the insert (the transaction is rolled back).
    public static func expandSmallNotifications(
        on connection: PostgresConnection, limit: Int = smallNotificationBatch, suspects: inout ExpansionSuspects
    ) throws -> SmallExpansionResult {
        var leased = LeasedRows.none
        return try expandSmallNotifications(
            on: connection, limit: limit, suspects: &suspects, lease: nil, leased: &leased)
    }

    /// ``expandSmallNotifications(on:limit:suspects:)`` in a worker that sends: the deliveries of each notification
    /// that `lease` has room for are inserted leased to this worker, as a first claim leaves them, and returned by
    /// the insert in the claim's row shape (``LeasedRows``), so no claim takes them: a notification's rows all or
    /// none, its app's room held for its listed ids (``InsertLease/reserve``; the caller gives back what was not
    /// leased). Never leased (due for the claim loop, as without a lease): a notification delivered at local time,
    /// one of an app with a send limit, and one of an app or a fleet an operator paused (``ClaimPauses``).
    /// - Parameter leased: set to the leased deliveries once the pass commits (``LeasedRows/none`` when none, after
    ///   a fall-back, or when the call throws); read them with ``ClaimStore/leasedRows(_:on:)``.
    public static func expandSmallNotifications(
        on connection: PostgresConnection, limit: Int = smallNotificationBatch, suspects: inout ExpansionSuspects,
        lease: ExpansionStore.InsertLease?, leased: inout LeasedRows
    ) throws -> SmallExpansionResult {
        leased = .none
        var committed = LeasedRows.none
        var result = SmallExpansionResult()
        var pickedIDs: [UUID] = []
        var now = Date()
        do {
            // Generic plans for the pass's prepared statements, made once per connection: PostgreSQL kept
            // planning the insert afresh for every pass (its estimate for the generic plan, ten elements per
            // array, costs more than a custom plan for a pass of two), and planning took longer than running
            // it: 0.4-0.5 ms against 0.2-0.3 for 2-20 notifications. For a full pass of 500 the generic plan
            // also ran faster: 4.5-5 ms against 8-10 (EXPLAIN ANALYZE, PostgreSQL 15). But a generic plan is
            // kept, and one made while the tables held a few rows scanned the whole table inside each lookup
            // by key once they had grown (800,000 rows read for 30 listed ids among 20,000): sequential scans
            // are off for the pass, so each lookup stays an index probe whatever the statistics said. JIT is off
            // with them: a scan left without an index to use costs 10^10 more once they are off, which would set
            // off JIT compilation (a chunk's slice pick spent about 160 ms a call compiling that way).
            try connection.transaction(localSettings: ["plan_cache_mode": "force_generic_plan", "enable_seqscan": "off", "jit": "off"]) { connection in
                // Prepared with the limit in its text (one text per limit; the worker always passes the same):
                // a generic plan with `LIMIT $2` unknown may give up the index order, as the claim's did (see
                // ClaimStore.claim), and planning cost more than running it.
                let rows = try connection.preparedQuery(smallPickSQL(limit: max(1, limit)), [ExpansionStore.schedulingMemberBytes])
                guard !rows.isEmpty else { return }
                var accepted: [AcceptedSmall] = []
                var refused: [SmallExpansionResult.Failed] = []
                for row in rows {
                    let id = try row.decode(UUID.self, "id")
                    now = try row.decode(Date.self, "now")
                    switch try ExpansionStore.checkPicked(row) {
                    case .refused(let reason):
                        refused.append(.init(notificationID: id, reason: reason))
                    case .channelSend:
                        // The bulk pick takes id-list targets only, and a channel target stands alone: never here.
                        refused.append(.init(notificationID: id, reason: "invalid_target: live_activity_channel stands alone"))
                    case .accepted(let selection, let priority, let localTime):
                        accepted.append(AcceptedSmall(
                            id: id, appID: try row.decode(UUID.self, "app_id"), selection: selection, priority: priority,
                            localTime: localTime))
                    }
                }
                // The audience each may create, bounded before anything is inserted; what does not fit this pass
                // waits for the next, what fits no pass goes the chunked way. Every listed id costs a lookup by
                // key whether or not it names anything, so it counts against the budget even when it reaches no
                // device: 500 notifications of 500 unknown users would otherwise cost nothing and take 250,000
                // lookups, twice. Devices are counted only for the notifications whose ids fit at all.
                let countable = Self.listedIDsWithinBudget(accepted)
                let devices = try listedUsersDevices(Array(accepted[..<countable]), on: connection)
                var spent = 0
                var included: [AcceptedSmall] = []
                for (index, notification) in accepted.enumerated() {
                    // Its listed ids, or for external ids the devices their users own when that is more (at least
                    // that many for one whose count stopped at the heavy cost: it goes the chunked way).
                    let cost = max(notification.selection.target.listedIDCount, devices.counted[notification.id] ?? 0)
                    if cost > smallPassDeliveryBudget {
                        result.chunked.append(notification.id)
                    } else if index >= countable || devices.partial.contains(notification.id)
                        || spent + cost > smallPassDeliveryBudget {
                        // Left for the next pass when light; a heavy one goes the chunked way now: passes of a
                        // few heavy notifications each would otherwise pick, lock and parse the same hundreds of
                        // targets again and again (1,000 notifications of 1,000 unknown users: 201 passes, 31.5 s),
                        // and new notifications behind them would wait for the whole backlog.
                        if cost >= smallPassHeavyCost { result.chunked.append(notification.id) } else { result.deferred += 1 }
                    } else {
                        spent += cost
                        included.append(notification)
                    }
                }
                pickedIDs = refused.map(\.notificationID) + result.chunked + included.map(\.id)
                let leasing = lease.map { leasedNotifications(included, lease: $0, devices: devices.counted) } ?? []
                if !result.chunked.isEmpty { try ExpansionStore.pushBehind(result.chunked, on: connection) }
                var notifications: (ids: [UUID], apps: [UUID], priorities: [Int], platforms: [String?], kinds: [String], leased: [Bool]) =
                    ([], [], [], [], [], [])
                var localTimes: (timesOfDay: [String?], ttls: [Int?]) = ([], [])
                var listedSubscriptions: (notifications: [UUID], ids: [UUID]) = ([], [])
                var listedUsers: (notifications: [UUID], externalIDs: [String]) = ([], [])
                for notification in included {
                    let id = notification.id
                    localTimes.timesOfDay.append(notification.localTime?.timeOfDay)
                    localTimes.ttls.append(notification.localTime?.ttl)
                    notifications.ids.append(id)
                    notifications.apps.append(notification.appID)
                    notifications.priorities.append(notification.priority)
                    // Validated platform names (ios, android, web): no comma can occur in one.
                    notifications.platforms.append(notification.selection.platforms?.joined(separator: ","))
                    notifications.kinds.append(notification.selection.subscriptionKind)
                    notifications.leased.append(leasing.contains(id))
                    switch notification.selection.target {
                    case .subscriptionIDs(let ids):
                        listedSubscriptions.notifications += repeatElement(id, count: ids.count)
                        listedSubscriptions.ids += ids
                    case .externalIDs(let ids):
                        listedUsers.notifications += repeatElement(id, count: ids.count)
                        listedUsers.externalIDs += ids
                    case .all, .filters:
                        // The pick asked for id lists, but a target naming one plus another form is refused
                        // above; should one still get here, it expands with no audience rather than wrongly.
                        break
                    }
                }
                result.picked = pickedIDs.count
                if !refused.isEmpty {
                    _ = try connection.query(
                        """
                        UPDATE notifications n SET status = 'failed', status_reason = f.reason
                        FROM unnest($1::uuid[], $2::text[]) AS f(id, reason) WHERE n.id = f.id
                        """, [refused.map(\.notificationID), refused.map(\.reason)])
                    result.failed = refused
                }
                guard !notifications.ids.isEmpty else { return }
                // In binary format, each typed as the statement casts it (no array literals written or parsed).
                var insertParameters: [any PostgresEncodable] = [
                    PostgresBinaryArray.uuid(notifications.ids), PostgresBinaryArray.uuid(notifications.apps),
                    PostgresBinaryArray.smallint(notifications.priorities), PostgresBinaryArray.text(notifications.platforms),
                    PostgresBinaryArray.uuid(listedSubscriptions.notifications), PostgresBinaryArray.uuid(listedSubscriptions.ids),
                    PostgresBinaryArray.uuid(listedUsers.notifications), PostgresBinaryArray.text(listedUsers.externalIDs),
                    PostgresBinaryArray.text(notifications.kinds), PostgresBinaryArray.boolean(notifications.leased),
                    lease?.lease.inSeconds ?? 0, lease?.workerID ?? "",
                ]
                let withLocalTime = localTimes.timesOfDay.contains { $0 != nil }
                if withLocalTime {
                    insertParameters += [PostgresBinaryArray.text(localTimes.timesOfDay), PostgresBinaryArray.integer(localTimes.ttls)]
                }
                // One statement inserts the deliveries, marks the notifications expanded and returns the leased rows.
                let sent = DatabaseClockReading.StatementTiming()
                let created = try connection.preparedQuery(withLocalTime ? smallInsertWithLocalTimeSQL : smallInsertPlainSQL, insertParameters)
                var versions: [UUID: String] = [:]
                var leasedCount = 0
                for row in created {
                    guard let id = try row.decodeIfPresent(UUID.self, "counted_notification") else {
                        leasedCount += 1
                        continue
                    }
                    versions[id] = try row.decode(String.self, "notification_version")
                    result.created += try row.decode(Int.self, "counted")
                    result.withDeliveries.append(id)
                }
                result.expanded = notifications.ids.count
                if leasedCount > 0 {
                    result.leased = leasedCount
                    committed = LeasedRows(rows: created, sent: sent, messageVersions: versions)
                }
            }
        } catch let error as PostgresError where error.isDataError && !pickedIDs.isEmpty {
            return try expandOneAtATime(pickedIDs, on: connection, suspects: &suspects)
        }
        leased = committed
        if result.picked > 0 {
            result.transactions = 1
            if result.created > 0 {
                for id in pickedIDs { suspects.chunkCommitted(id, created: 1, at: now) }
            }
        }
        return result
    }

    /// Most deliveries one pass leases (``leasedNotifications(_:lease:devices:)``); the rest of a larger pass is
    /// the claim loop's. Under the pass's generic plan, which expects a row or so, the claim's tail joins the leased
    /// rows to their notifications by a nested loop: 500 one-device notifications leased at once compared each row
    /// with each notification (249,500 comparisons, as costly as the claims they spared). A steady stream's passes
    /// hold a few notifications each, all leased.
    static let maximumLeasedPerPass = 100

    /// The notifications of `included` whose rows a pass leases: not delivered at local time, and within the room
    /// `lease` holds for their app (``ExpansionStore/InsertLease/reserve``) and ``maximumLeasedPerPass``, asked once
    /// per app for all of its notifications' audiences (their listed ids, or for external ids the devices counted
    /// when more) and given to them in pick order, a notification all or nothing. Whether the app's rows may be
    /// leased at all (a send limit, a pause) the insert decides.
    static func leasedNotifications(
        _ included: [AcceptedSmall], lease: ExpansionStore.InsertLease, devices: [UUID: Int]
    ) -> Set<UUID> {
        guard !lease.noRoom else { return [] }
        var budget = maximumLeasedPerPass
        var wanted: [UUID: [(id: UUID, cost: Int)]] = [:]
        var apps: [UUID] = []
        for notification in included where notification.localTime == nil {
            let cost = max(notification.selection.target.listedIDCount, devices[notification.id] ?? 0)
            if wanted[notification.appID] == nil { apps.append(notification.appID) }
            wanted[notification.appID, default: []].append((notification.id, cost))
        }
        var leasing: Set<UUID> = []
        for app in apps where budget > 0 {
            let notifications = wanted[app] ?? []
            var room = lease.reserve(app, min(budget, notifications.reduce(0) { $0 + $1.cost }))
            budget -= room
            for notification in notifications where notification.cost <= room {
                room -= notification.cost
                leasing.insert(notification.id)
            }
        }
        return leasing
    }

    /// A picked small notification that passed the checks.
    struct AcceptedSmall {
        var id: UUID
        var appID: UUID
        var selection: AudienceSelection
        var priority: Int
        var localTime: ExpansionStore.LocalTimeSchedule?
    }

    /// How many of `accepted`, from the first, have listed ids (subscription or external) that fit
    /// ``smallPassDeliveryBudget`` together: the rest cannot fit this pass whatever their users own. At least one,
    /// so a pass always makes progress (a target's size keeps its ids below the budget anyway).
    static func listedIDsWithinBudget(_ accepted: [AcceptedSmall]) -> Int {
        var listed = 0
        for (index, notification) in accepted.enumerated() {
            listed += notification.selection.target.listedIDCount
            if listed > smallPassDeliveryBudget { return max(index, 1) }
        }
        return accepted.count
    }

    /// The subscriptions the listed users of each external-id notification of `accepted` own (any status, app or
    /// kind: an upper bound of its deliveries), read at most about one pass's worth plus a bounded amount per
    /// notification, so that users with thousands of devices each cannot make a pass read millions of index
    /// entries before it inserts anything:
    /// - In pick order, no further than one past ``smallPassDeliveryBudget`` in all: past that the pass is full.
    ///   When the first notification counted passes the budget alone (it goes the chunked way and spends
    ///   nothing), the count starts again after it, up to ``maxOrderedDeviceCounts`` counts.
    /// - The notification the last count stopped in and those after it are then counted in pick order, each up
    ///   to ``smallPassHeavyCost`` and all together up to ``classifyingDeviceCount``: enough to tell a light one
    ///   (counted exactly; it may still fit) from a heavy one (which goes the chunked way rather than blocking
    ///   later picks). Those that count does not reach wait for the next pass, uncounted.
    /// At most ``maxOrderedDeviceCounts`` times the budget plus ``classifyingDeviceCount`` entries (about 40,000)
    /// whatever the users own, against 25 million when each user's devices were counted up to the budget; a
    /// backlog of notifications that wait is not counted again in full on every pass.
    /// Lookups by key, as in the insert.
    /// - Returns: `counted`, each notification's devices (absent: none, or not counted); `partial`, the
    ///   notifications whose count stopped before their end (they own at least that many) or never began.
    static func listedUsersDevices(
        _ accepted: [AcceptedSmall], on connection: PostgresConnection
    ) throws -> (counted: [UUID: Int], partial: Set<UUID>) {
        let listed: [ListedUsers] = accepted.compactMap {
            guard case .externalIDs(let ids) = $0.selection.target, !ids.isEmpty else { return nil }
            return ListedUsers(id: $0.id, appID: $0.appID, externalIDs: ids)
        }
        var counted: [UUID: Int] = [:]
        var partial: Set<UUID> = []
        var start = 0
        var ordered = 0
        while start < listed.count {
            let (devices, cut) = try countListedUsersDevices(
                Array(listed[start...]), upTo: smallPassDeliveryBudget + 1, total: smallPassDeliveryBudget + 1, on: connection)
            counted.merge(devices) { _, new in new }
            guard let cut else { return (counted, partial) }
            ordered += 1
            if cut == 0 {
                // The first one counted passed the budget alone: it goes the chunked way and spends nothing,
                // so the budget is still whole for the rest. Counted so again a few times; past that, the rest
                // is counted the bounded way below.
                partial.insert(listed[start].id)
                start += 1
                if ordered < maxOrderedDeviceCounts { continue }
            } else {
                // The one the count stopped in is counted again with the rest.
                start += cut
            }
            break
        }
        if start < listed.count {
            let rest = Array(listed[start...])
            let (devices, stoppedIn) = try countListedUsersDevices(
                rest, upTo: smallPassHeavyCost, total: classifyingDeviceCount, on: connection)
            counted.merge(devices) { _, new in new }
            partial.formUnion(devices.filter { $0.value >= smallPassHeavyCost }.keys)
            // Those after the one the total stopped in are unknown; so is that one, unless it reached the heavy
            // cost (it is heavy then, whatever else it owns).
            let reached = stoppedIn.map { (devices[rest[$0].id] ?? 0) >= smallPassHeavyCost ? $0 + 1 : $0 } ?? rest.count
            partial.formUnion(rest[reached...].map(\.id))
        }
        return (counted, partial)
    }

    /// How many ordered counts of ``listedUsersDevices(_:on:)`` a pass runs at most: each passes over one
    /// notification whose users own more than the budget, reading one past the budget for it.
    static let maxOrderedDeviceCounts = 4

    /// Most devices ``listedUsersDevices(_:on:)`` reads to tell light notifications from heavy ones after the
    /// budget's count: four times the budget, at most ``smallPassHeavyCost`` per notification, so 40 heavy ones
    /// are sent the chunked way per pass (150 to a user with 3,000 devices clear in four passes).
    static let classifyingDeviceCount = 4 * smallPassDeliveryBudget

    /// An external-id notification's listed users, for counting their devices.
    struct ListedUsers {
        var id: UUID
        var appID: UUID
        var externalIDs: [String]
    }

    /// The devices of each of `notifications`' listed users, in order, each notification's counted up to `limit`
    /// and all of them together up to `total`: the budget's count (both one past the budget) and the classifying
    /// count of ``listedUsersDevices(_:on:)``.
    /// - Returns: `devices`, each notification's count (absent: none, or not reached); `stoppedIn`, the index of
    ///   the notification the total was reached in (`nil`: every one was counted to its end or to `limit`).
    private static func countListedUsersDevices(
        _ notifications: [ListedUsers], upTo limit: Int, total: Int, on connection: PostgresConnection
    ) throws -> (devices: [UUID: Int], stoppedIn: Int?) {
        var externalIDs: [String] = []
        var bounds: (first: [Int], last: [Int]) = ([], [])
        for notification in notifications {
            bounds.first.append(externalIDs.count + 1)
            externalIDs += notification.externalIDs
            bounds.last.append(externalIDs.count)
        }
        // Rows in ordinality order: the function scan's own order, kept by the nested loops (the plan has no
        // sort), and what `ORDER BY ... LIMIT` means whatever the plan, so the limit cuts at one point of it.
        let rows = try connection.preparedQuery(
            """
            SELECT c.notification_id, count(*) AS devices, max(c.ord) AS last_ordinality
            FROM (
                SELECT g.id AS notification_id, g.ord
                FROM unnest($1::uuid[], $2::uuid[], $4::integer[], $5::integer[]) WITH ORDINALITY AS g(id, app_id, first, last, ord)
                CROSS JOIN LATERAL (
                    SELECT 1
                    FROM unnest(($3::text[])[g.first:g.last]) AS e(external_id)
                    CROSS JOIN LATERAL (SELECT id FROM users WHERE app_id = g.app_id AND external_id = e.external_id OFFSET 0) u
                    CROSS JOIN LATERAL (SELECT 1 FROM subscriptions WHERE user_id = u.id OFFSET 0) s
                    LIMIT $6
                ) d
                ORDER BY g.ord
                LIMIT $7
            ) c
            GROUP BY c.notification_id
            """,
            [notifications.map(\.id), notifications.map(\.appID), externalIDs, bounds.first, bounds.last, limit, total])
        var devices: [UUID: Int] = [:]
        var counted = 0
        var last = 0
        for row in rows {
            let count = try row.decode(Int.self, "devices")
            devices[try row.decode(UUID.self, "notification_id")] = count
            counted += count
            last = max(last, try row.decode(Int.self, "last_ordinality"))
        }
        return (devices, counted >= total ? last - 1 : nil)
    }

    /// The fall-back of a bulk pass whose insert failed on data: each notification alone, under the poison-row
    /// rules. Stops at a stall (every insert failing: a fault of the table, not of a notification).
    private static func expandOneAtATime(
        _ ids: [UUID], on connection: PostgresConnection, suspects: inout ExpansionSuspects
    ) throws -> SmallExpansionResult {
        var result = SmallExpansionResult(picked: ids.count, fellBack: true)
        for id in ids {
            switch try ExpansionStore.expandNext(on: connection, suspects: &suspects, pick: .only(id)) {
            case .expanded(_, let created)?, .expanding(_, let created)?:
                result.expanded += 1
                result.created += created
                result.transactions += 1
            case .failed(let id, let reason)?:
                result.failed.append(.init(notificationID: id, reason: reason))
                result.transactions += 1
            case .setAside(let ids)?:
                result.setAside += ids
            case .stalled(_, let sqlState)?:
                result.stalledSQLState = sqlState
                return result
            case nil, .waitingForRoom?:
                // Canceled or taken by another worker meanwhile (no lease: never waits for room).
                break
            }
        }
        return result
    }

    /// The pick of a bulk pass: up to `limit` small notifications, oldest first, locked (`$1` =
    /// ``ExpansionStore/schedulingMemberBytes``), through the partial index `notifications_to_expand_small` (migration 0017),
    /// whose predicate is this statement's clauses: it holds no notification scheduled for later (those wait
    /// for ``ExpansionStore/releaseScheduled(on:limit:)``) and none that is not small.
    static func smallPickSQL(limit: Int) -> String {
        ExpansionStore.pickSQL(narrowing: "AND NOT scheduled AND \(smallNotificationPredicate)", limit: limit)
    }

    /// The bulk insert: `$1..$4` the notifications (id, app, delivery priority, comma-separated platforms or
    /// NULL), `$5`/`$6` (notification, subscription id) pairs, `$7`/`$8` (notification, external id) pairs,
    /// `$9` each notification's `subscriptions.kind` and `$10` whether its rows may be leased (both in `$1`'s
    /// order), `$11` the lease's seconds and `$12` the worker id.
    /// Only active subscriptions of the notification's own app and kind are reached, as in the chunked path. The
    /// same statement marks every notification of `$1` `expanded` (`expanded_at`, `targeted_count` plus what it
    /// created, `expansion_touched_at`), so a pass costs one statement after the pick, not two.
    ///
    /// The rows of a notification `$10` allows whose app may have them leased (no send limit, neither it nor the
    /// fleet paused: ``ExpansionStore/leasableColumn``'s condition) are inserted leased to the worker as a first
    /// claim leaves them (`run_at` the lease's end, attempt and fence 1, `leased_by`): they fall due at the
    /// lease's end should the worker never send them (the insert trigger sets the app's turn to the earliest
    /// `run_at` inserted). The others are due at once (or at local time) for any claim.
    ///
    /// Returns one row per notification that got deliveries, `counted_notification`, `counted` (its deliveries)
    /// and `notification_version` (its `xmin` as this statement leaves it), the claim's columns NULL; then one row
    /// per delivery leased, in the claim's row shape (``ClaimStore/claimedRowsSelect``), those three NULL.
    ///
    /// With `localTime`, `$13` (`text[]`, `HH:MM:SS` or NULL) and `$14` (`integer[]`, ttl or NULL), parallel
    /// to `$1`, give each local-time notification's schedule: `run_at` and `local_due_at` are computed once per
    /// (notification, distinct zone) in the statement (``LocalTimeSQL``; docs/local-time-delivery.md).
    /// ``smallInsertSQL(localTime:)`` built once each: they run as prepared statements (planning took longer
    /// than running them), keyed by their text.
    static let smallInsertPlainSQL = smallInsertSQL(localTime: false)
    static let smallInsertWithLocalTimeSQL = smallInsertSQL(localTime: true)

    /// Each listed subscription, user and user's subscriptions is looked up by key, the lookup's only condition
    /// (OFFSET 0 keeps it from becoming a join and the other conditions out of it): a pass costs its lists,
    /// never an app's subscriptions, whatever the statistics say.
    ///
    /// Each notification's count is one aggregate over its row and its inserted deliveries (a `UNION ALL`), not
    /// a join of the notifications with per-notification counts: the generic plan of a prepared statement
    /// expects 10 elements from each `unnest` and joined two such sets with a nested loop, comparing every
    /// notification with every count (250,000 comparisons, 150 of a 200 ms pass, for 500 notifications).
    static func smallInsertSQL(localTime: Bool) -> String {
        let entry = LocalTimeSQL.scheduleEntry(schedule: "ls", notification: "w.notification_id", zone: LocalTimeSQL.zoneKey("w.timezone"))
        let local = localTime
            ? LocalTimeSQL.ctes(
                pairs: """
                    SELECT DISTINCT w.notification_id, \(LocalTimeSQL.zoneKey("w.timezone")) AS zone_key
                    FROM wanted w WHERE w.notification_id IN (SELECT id FROM local_notifications)
                    """,
                notifications: """
                    SELECT l.id, coalesce(x.send_after, x.created_at) AS start_at, a.default_timezone AS app_zone,
                           l.time_of_day::time AS time_of_day, l.ttl
                    FROM unnest($1::uuid[], $13::text[], $14::integer[]) AS l(id, time_of_day, ttl)
                    JOIN notifications x ON x.id = l.id JOIN apps a ON a.id = x.app_id
                    WHERE l.time_of_day IS NOT NULL
                    """)
            : ""
        return """
            WITH n AS (
                SELECT u.id, u.app_id, u.priority, u.platforms, u.kind,
                       u.lease AND EXISTS (
                           SELECT FROM apps a
                           WHERE a.id = u.app_id AND a.max_sends_per_second IS NULL AND \(ClaimPauses.leaseCondition)
                       ) AS leased
                FROM unnest($1::uuid[], $2::uuid[], $3::smallint[], $4::text[], $9::text[], $10::boolean[])
                    AS u(id, app_id, priority, platforms, kind, lease)
            ), wanted AS (
                -- `lane`: each delivery takes its subscription's lane (docs/scale-out.md), written rather than left to
                -- the column's default, a function call per row.
                SELECT l.notification_id, s.id AS subscription_id, s.platform, s.timezone, s.lane
                FROM unnest($5::uuid[], $6::uuid[]) AS l(notification_id, subscription_id)
                JOIN n ON n.id = l.notification_id
                CROSS JOIN LATERAL (
                    SELECT id, app_id, status, kind, platform, timezone, lane FROM subscriptions
                    WHERE id = l.subscription_id OFFSET 0
                ) s
                WHERE s.app_id = n.app_id AND s.status = 'active' AND s.kind = n.kind
                UNION ALL
                SELECT l.notification_id, s.id, s.platform, s.timezone, s.lane
                FROM unnest($7::uuid[], $8::text[]) AS l(notification_id, external_id)
                JOIN n ON n.id = l.notification_id
                CROSS JOIN LATERAL (
                    SELECT id FROM users WHERE app_id = n.app_id AND external_id = l.external_id OFFSET 0
                ) u
                CROSS JOIN LATERAL (
                    SELECT id, app_id, status, kind, platform, timezone, lane FROM subscriptions
                    WHERE user_id = u.id OFFSET 0
                ) s
                WHERE s.app_id = n.app_id AND s.status = 'active' AND s.kind = n.kind
            )\(local), inserted AS (
                INSERT INTO deliveries (lane, notification_id, subscription_id, app_id, priority, run_at, attempt, fence, leased_by\(localTime ? ", local_due_at" : ""))
                SELECT w.lane, w.notification_id, w.subscription_id, n.app_id, n.priority,
                       CASE WHEN n.leased THEN now() + make_interval(secs => $11::float8) ELSE \(localTime ? LocalTimeSQL.runAt(entry: entry) : "now()") END,
                       CASE WHEN n.leased THEN 1 ELSE 0 END, CASE WHEN n.leased THEN 1 ELSE 0 END,
                       CASE WHEN n.leased THEN $12::text END\(localTime ? ", \(LocalTimeSQL.dueAt(entry: entry))" : "")
                FROM wanted w JOIN n ON n.id = w.notification_id\(localTime ? " CROSS JOIN local_schedule ls" : "")
                WHERE n.platforms IS NULL OR w.platform = ANY(string_to_array(n.platforms, ','))
                ORDER BY w.notification_id, w.subscription_id
                ON CONFLICT (notification_id, subscription_id) DO NOTHING
                RETURNING id, fence, attempt, notification_id, subscription_id, app_id, apns_id, uncounted_retries,
                          local_due_at, leased_by
            ), counts AS (
                SELECT id, sum(created)::bigint AS n
                FROM (SELECT id, 0 AS created FROM n UNION ALL SELECT notification_id, 1 FROM inserted) x
                GROUP BY id
            ), marked AS (
                UPDATE notifications m
                SET status = 'expanded', expanded_at = now(),
                    targeted_count = coalesce(m.targeted_count, 0) + c.n,
                    expansion_touched_at = clock_timestamp()
                FROM counts c
                WHERE m.id = c.id
                RETURNING m.id, c.n, m.xmin::text AS version
            ), claimed AS (
                -- Rows leased at insert were taken from no one: nothing rescued.
                SELECT *, NULL::text AS rescued_from FROM inserted WHERE leased_by IS NOT NULL
            ),
            \(ClaimStore.claimedRowsSources),
            leased AS (
            \(ClaimStore.claimedRowsSelect)
            )
            -- Both sides one after the other (a join on false): no plan compares each notification with each row.
            SELECT m.id AS counted_notification, m.n AS counted, m.version AS notification_version, l.*
            FROM (SELECT * FROM marked WHERE n > 0) m FULL JOIN leased l ON false
            """
    }
}
