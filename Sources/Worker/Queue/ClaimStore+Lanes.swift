import Foundation
import Postgres

/// The claim on a Citus-distributed queue (``QueueTopology/lanes(_:)``; docs/scale-out.md, "The hot statements"):
/// Citus takes `FOR UPDATE SKIP LOCKED` only in a router statement, which names one lane, so a claim round reads
/// which lanes have a turn due (one multi-shard read) and claims in each of them with the single-node claim's
/// statement written for one lane (``claimSQL(picking:limit:lane:)``), then reads the round's notifications and
/// users by id, which live on other shards.
extension ClaimStore {
    /// What a claim round asks first: the lanes in which some app's turn has come (`due`, ascending: a turn at or
    /// before `now()` of an app neither in `noRoom`, paused, nor limited by a send rate; the lane claim's own
    /// visit), and the seconds until the next turn ahead in any lane (at most a day; nil when none lies ahead),
    /// with the statement's reading of PostgreSQL's clock. Multi-shard reads of `app_claim_turns` (one probe of
    /// `app_claim_turns_due` per shard); nothing is locked or written.
    static func laneTurns(on connection: PostgresConnection, noRoom: [UUID]) throws
        -> (due: [Int32], wait: Double?, clock: DatabaseClockReading)
    {
        let sent = DatabaseClockReading.StatementTiming()
        let rows = try connection.preparedQuery(
            """
            SELECT now() AS now,
                   coalesce((SELECT array_agg(lane ORDER BY lane) FROM (
                       SELECT lane FROM app_claim_turns
                       WHERE turn_at <= now() AND app_id <> ALL($1::uuid[])
                         \(ClaimPauses.turnsCondition)
                         AND app_id NOT IN (SELECT id FROM apps WHERE max_sends_per_second IS NOT NULL)
                       GROUP BY lane) d), '{}') AS due,
                   (SELECT round(least(extract(epoch FROM t.at - now()), 86400), 6)::float8 FROM (
                       SELECT min(turn_at) AS at FROM app_claim_turns
                       WHERE turn_at > now() AND turn_at < 'infinity') t) AS wait
            """, [noRoom])
        let received = ContinuousClock.now
        let row = rows[0]
        return (
            try row.decode([Int32].self, "due"), try row.decodeIfPresent(Double.self, "wait"),
            DatabaseClockReading(databaseNow: try row.decode(Date.self, "now"), sent: sent, receivedAt: received)
        )
    }

    /// The order a claim round visits `due` lanes in: `lanes` (every lane of the queue) rotated to start at the
    /// lane at `start` (modulo their count), those not due left out. A fleet whose workers start at different
    /// lanes (``laneRotationStart(workerID:round:lanes:)``) spreads over the lanes, and none waits behind another.
    static func laneOrder(lanes: [Int32], due: [Int32], start: Int) -> [Int32] {
        guard !lanes.isEmpty else { return [] }
        let first = ((start % lanes.count) + lanes.count) % lanes.count
        let dueSet = Set(due)
        return (lanes[first...] + lanes[..<first]).filter { dueSet.contains($0) }
    }

    /// Where a worker's `round`-th claim round starts among `lanes` lanes: a hash of its id (FNV-1a over its UTF-8
    /// bytes, stable across processes, unlike `hashValue`) plus the round, so that each round starts one lane on.
    static func laneRotationStart(workerID: String, round: Int, lanes: Int) -> Int {
        guard lanes > 0 else { return 0 }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in workerID.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01b3
        }
        return Int((hash % UInt64(lanes) + UInt64(round % lanes)) % UInt64(lanes))
    }

    /// One claim round over `lanes`, in the order given (``laneOrder(lanes:due:start:)``): a router claim per lane
    /// (``claim(on:limit:lease:workerID:room:notifications:lane:)``), the round's `limit` shared among the lanes
    /// left (each takes at most the remainder divided by the lanes left, rounded up, so what a lane with fewer due
    /// rows leaves goes to the next), each app's room in this worker shrinking by what earlier lanes took. Then
    /// the rows' notifications and users are read (``fillLaneClaimedRows(_:on:)``). Each lane's claim commits on
    /// its own: rows claimed in earlier lanes are leased even when a later lane's claim throws, so the rows claimed
    /// so far are returned then, the error logged by the caller through `failed`.
    static func claimLanes(
        on connection: PostgresConnection, lanes: [Int32], limit: Int, lease: Duration, workerID: String,
        room: ClaimRoom, failed: (Int32, any Error) -> Void = { _, _ in }
    ) throws -> [ClaimedDelivery] {
        var claimed: [ClaimedDelivery] = []
        var room = room
        for (index, lane) in lanes.enumerated() {
            let remaining = limit - claimed.count
            guard remaining > 0 else { break }
            let lanesLeft = lanes.count - index
            let share = (remaining + lanesLeft - 1) / lanesLeft
            let taken: [ClaimedDelivery]
            do {
                taken = try claim(
                    on: connection, limit: share, lease: lease, workerID: workerID, room: room, lane: lane)
            } catch {
                // Nothing of this lane was claimed (its statement is atomic); the rows of earlier lanes are
                // leased to this worker and must be sent.
                if claimed.isEmpty { throw error }
                failed(lane, error)
                break
            }
            claimed += taken
            for (app, count) in Dictionary(grouping: taken, by: \.appID).mapValues(\.count) {
                if let left = room.limited[app] { room = ClaimRoom(full: room.full, limited: room.limited.merging([app: left - count]) { $1 }) }
            }
        }
        return try fillLaneClaimedRows(claimed, on: connection)
    }

    /// Reads what a lane's router claim could not (``laneClaimedRowsTail(lane:)``): each row's notification
    /// (`xmin` as its message version, `campaign_id` within its bound, `status`, `coalesce(send_after,
    /// created_at)`) and its user's tags, by id (a few shards each, one statement each). A row whose notification
    /// is gone (a producer deleted it: on Citus no cascade deletes its deliveries) is deleted under its fence without
    /// an event, as the single-node cascade deletes it, and is not returned.
    static func fillLaneClaimedRows(_ claimed: [ClaimedDelivery], on connection: PostgresConnection) throws
        -> [ClaimedDelivery]
    {
        guard !claimed.isEmpty else { return [] }
        let campaignBound = ClaimedColumnBounds.all.first { $0.expression == "n.campaign_id" }
        let notifications = try connection.query(
            """
            SELECT n.id, n.xmin::text AS message_version, \(bounded("n.campaign_id", as: "campaign_id")), n.status,
                   coalesce(n.send_after, n.created_at) AS start_at,
                   octet_length(n.campaign_id) > \(campaignBound?.maximumBytes ?? 0) AS campaign_oversized
            FROM notifications n WHERE n.id = ANY($1::uuid[])
            """, [Array(Set(claimed.map(\.notificationID)))])
        var found: [UUID: (version: String, campaign: String?, status: String, start: Date, oversized: Bool)] = [:]
        for row in notifications {
            found[try row.decode(UUID.self, "id")] = (
                try row.decode(String.self, "message_version"), try row.decodeIfPresent(String.self, "campaign_id"),
                try row.decode(String.self, "status"), try row.decode(Date.self, "start_at"),
                try row.decodeIfPresent(Bool.self, "campaign_oversized") ?? false
            )
        }
        let users = Array(Set(claimed.compactMap(\.userID)))
        var tags: [UUID: String] = [:]
        if !users.isEmpty {
            for row in try connection.query(
                """
                SELECT id, CASE WHEN octet_length(tags::text) <= \(ClaimedColumnBounds.maximumUserTagsBytes)
                                THEN tags::text END AS tags
                FROM users WHERE id = ANY($1::uuid[])
                """, [users])
            {
                if let text = try row.decodeIfPresent(String.self, "tags") { tags[try row.decode(UUID.self, "id")] = text }
            }
        }
        var filled: [ClaimedDelivery] = []
        filled.reserveCapacity(claimed.count)
        var orphaned: [ClaimedDelivery] = []
        for var delivery in claimed {
            guard let notification = found[delivery.notificationID] else {
                orphaned.append(delivery)
                continue
            }
            delivery.messageVersion = notification.version
            delivery.campaignID = notification.campaign
            delivery.notificationStatus = notification.status
            delivery.notificationStart = notification.start
            if notification.oversized, let campaignBound { delivery.oversizedColumns.append(campaignBound.column) }
            if let user = delivery.userID { delivery.userTagsJSON = tags[user] }
            filled.append(delivery)
        }
        for (lane, rows) in Dictionary(grouping: orphaned, by: \.lane) {
            _ = try connection.query(
                """
                DELETE FROM deliveries d USING unnest($2::bigint[], $3::bigint[]) AS i(id, fence)
                WHERE d.lane = $1::integer AND d.id = i.id AND d.fence = i.fence
                """, [lane, rows.compactMap(\.source.rowID), rows.map(\.fence)])
        }
        return filled
    }

    /// ``repairClaimTurns(on:)`` on a distributed queue (migration 0026's `pushizo_claim_turns_repair()` reads every
    /// lane, which Citus refuses inside a function): the lanes with a turn ahead are read first (one multi-shard
    /// read), then in each, in a transaction of its own, the turns ahead are locked (`FOR UPDATE SKIP LOCKED`, a
    /// statement of its own, so the next one's snapshot sees what their writers committed) and each is brought
    /// forward to its app's next run in the lane (``laneNextRunAt(app:except:lane:)``), two router statements.
    /// Apps with a send rate are left as they are (the lane claim does not visit them).
    /// - Returns: how many turns moved.
    static func repairClaimTurns(on connection: PostgresConnection, lanes: [Int32]) throws -> Int {
        let ahead = Set(try connection.query(
            "SELECT lane FROM app_claim_turns WHERE turn_at > now() AND turn_at < 'infinity' GROUP BY lane"
        ).map { try $0.decode(Int32.self, "lane") })
        var moved = 0
        for lane in lanes where ahead.contains(lane) {
            moved += try connection.transaction { connection in
                let locked = try connection.query(
                    """
                    SELECT array_agg(app_id ORDER BY app_id) AS apps FROM (
                        SELECT app_id FROM app_claim_turns
                        WHERE lane = $1::integer AND turn_at > now() AND turn_at < 'infinity'
                        ORDER BY app_id FOR UPDATE SKIP LOCKED) t
                    """, [lane])
                guard let apps = try locked[0].decodeIfPresent([UUID].self, "apps") else { return 0 }
                return try connection.query(
                    """
                    UPDATE app_claim_turns t SET turn_at = x.next_at
                    FROM (SELECT a.app_id, (\(laneNextRunAt(app: "a.app_id", except: "'{}'::bigint[]", lane: "$1"))) AS next_at
                          FROM unnest($2::uuid[]) AS a(app_id)) x
                    WHERE t.lane = $1::integer AND t.app_id = x.app_id AND x.next_at < t.turn_at
                      AND t.app_id NOT IN (SELECT id FROM apps WHERE max_sends_per_second IS NOT NULL)
                    RETURNING t.app_id
                    """, [lane, apps]
                ).count
            }
        }
        return moved
    }
}
