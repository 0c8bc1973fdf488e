import DeliveryCore
import Foundation
import Postgres

/// The SQL of Live Activity broadcast channels (docs/live-activity-channels.md, migration 0035): the
/// reconciliation of `live_activity_channels` rows with APNs, and the channel sends of `live_activity_channel_sends`.
///
/// Both are taken as the queue takes deliveries: one statement picks a due row `FOR UPDATE SKIP LOCKED` and leases
/// it (`lease_until`, or `run_at` pushed to the lease's end with the `fence` bumped), the transaction commits, and
/// no row lock is held during the APNs request. The result is written only while the lease is still this
/// worker's (the revision acted on, the fence), so of several workers exactly one acts on each change.
enum LiveActivityChannelStore {
    /// Most bytes of a notification's `message` a channel send reads (the producer contract's bound).
    static let maximumMessageBytes = 262_144

    /// Expansion's part: the notification becomes one channel send and is `expanded` with one targeted, in the
    /// expansion's transaction.
    static func enqueueSend(
        _ notificationID: UUID, appID: UUID, channel: LiveActivityChannelTarget, on connection: PostgresConnection
    ) throws {
        _ = try connection.query(
            """
            WITH queued AS (
                INSERT INTO live_activity_channel_sends (notification_id, app_id, channel_name)
                VALUES ($1, $2, $3) ON CONFLICT (notification_id) DO NOTHING RETURNING 1)
            UPDATE notifications SET status = 'expanded', targeted_count = 1, expansion_touched_at = now()
            WHERE id = $1
            """, [notificationID, appID, channel.name])
    }

    // MARK: - Reconciliation

    /// A channel row leased for reconciliation, with its app's APNs channel as the worker reads it.
    struct ChannelChange: Sendable {
        var id: UUID
        var appID: UUID
        var name: String
        var environment: String
        var storagePolicy: Int
        /// `present` or `absent`.
        var desiredState: String
        var state: String
        var appleChannelID: String?
        /// The revision this change acts on.
        var revision: Int
        /// Attempts at this revision, this one included.
        var attempts: Int
        /// `app_channels.settings` of the app's `apns` channel (nil: the app has none).
        var settings: String?
        var endpoint: String?
        /// The lease's token: the fence of ``record(_:of:on:)`` (a worker that took the row over after the lease
        /// ran out wrote another).
        var leaseToken: UUID
    }

    /// Leases the next due channel row behind its revision for `lease`, or nil when none is due. The lease's token
    /// is drawn here: Citus refuses a volatile function (`gen_random_uuid()`) in an `UPDATE` of a distributed or
    /// reference table.
    static func leaseChange(lease: Duration, on connection: PostgresConnection) throws -> ChannelChange? {
        // Prepared, as the send's lease below: the loop asks both on every poll, and an idle poll (no row due) was
        // nearly all parse and plan.
        let rows = try connection.preparedQuery(
            """
            UPDATE live_activity_channels c
            SET lease_until = now() + make_interval(secs => $1), lease_token = $2, attempts = c.attempts + 1
            FROM (SELECT id FROM live_activity_channels
                  WHERE reconciled_revision < revision AND run_at <= now()
                    AND (lease_until IS NULL OR lease_until <= now())
                  ORDER BY run_at LIMIT 1 FOR UPDATE SKIP LOCKED) picked
            WHERE c.id = picked.id
            RETURNING c.id, c.app_id, c.name, c.lease_token, c.environment, c.message_storage_policy::int AS policy, c.desired_state,
                      c.state, c.apple_channel_id, c.revision, c.attempts,
                      (SELECT a.settings::text FROM app_channels a WHERE a.app_id = c.app_id AND a.provider = 'apns') AS settings,
                      (SELECT a.endpoint FROM app_channels a WHERE a.app_id = c.app_id AND a.provider = 'apns') AS endpoint
            """, [Double(lease.components.seconds), UUID()])
        guard let row = rows.first else { return nil }
        return ChannelChange(
            id: try row.decode(UUID.self, "id"), appID: try row.decode(UUID.self, "app_id"),
            name: try row.decode(String.self, "name"), environment: try row.decode(String.self, "environment"),
            storagePolicy: try row.decode(Int.self, "policy"), desiredState: try row.decode(String.self, "desired_state"),
            state: try row.decode(String.self, "state"), appleChannelID: try row.decodeIfPresent(String.self, "apple_channel_id"),
            revision: try row.decode(Int.self, "revision"), attempts: try row.decode(Int.self, "attempts"),
            settings: try row.decodeIfPresent(String.self, "settings"), endpoint: try row.decodeIfPresent(String.self, "endpoint"),
            leaseToken: try row.decode(UUID.self, "lease_token"))
    }

    /// What reconciling a change came to.
    enum ChangeResult: Sendable, Equatable {
        /// The channel exists at APNs with this id.
        case active(appleChannelID: String)
        /// The channel is gone at APNs (or never existed there).
        case deleted
        /// The change failed for good: the row's `state` becomes `failed` with the reason (an existing channel's id
        /// is kept: `keepsChannel`).
        case failed(reason: DeliveryReason, detail: JSONValue, keepsChannel: Bool)
        /// Try again at `at`; the row stays behind its revision.
        case retry(at: Date, reason: DeliveryReason, detail: JSONValue)
    }

    /// Writes `result` for `change`, only while its lease is still this worker's (the revision acted on; the lease
    /// not taken over). A channel created is recorded even when the producer changed the row meanwhile, so a later
    /// `absent` deletes it; the row is then reconciled again for the newer revision.
    /// - Returns: whether the result was written.
    @discardableResult
    static func record(_ result: ChangeResult, of change: ChannelChange, on connection: PostgresConnection) throws -> Bool {
        let state: String?, appleID: String?, reason: String?, detail: String?, runAt: Date?
        switch result {
        case .active(let id): (state, appleID, reason, detail, runAt) = ("active", id, nil, nil, nil)
        case .deleted: (state, appleID, reason, detail, runAt) = ("deleted", change.appleChannelID, nil, nil, nil)
        case .failed(let why, let info, let keeps):
            (state, appleID, reason, detail, runAt) = (
                keeps && change.appleChannelID != nil ? "active" : "failed", change.appleChannelID, why.rawValue, info.jsonText, nil)
        case .retry(let at, let why, let info): (state, appleID, reason, detail, runAt) = (nil, change.appleChannelID, why.rawValue, info.jsonText, at)
        }
        let rows = try connection.query(
            """
            UPDATE live_activity_channels
            SET state = COALESCE($3, state), apple_channel_id = $4, error_reason = $5, error_detail = $6,
                reconciled_revision = CASE WHEN $3::text IS NULL THEN reconciled_revision ELSE greatest(reconciled_revision, $2) END,
                run_at = CASE WHEN revision = $2 THEN COALESCE($7, run_at) ELSE run_at END,
                lease_until = NULL, lease_token = NULL, updated_at = now()
            WHERE id = $1 AND lease_token = $8
            RETURNING 1
            """, [change.id, change.revision, state, appleID, reason, detail, runAt, change.leaseToken])
        return !rows.isEmpty
    }

    // MARK: - Channel sends

    /// A channel send leased to this worker, with what its request needs.
    struct ChannelSend: Sendable {
        var notificationID: UUID
        var appID: UUID
        var channelName: String
        var requestID: UUID
        var attempt: Int
        var fence: Int
        /// `notifications.message` (nil: larger than ``maximumMessageBytes``).
        var message: String?
        var notificationStatus: String
        /// `send_after`, else `created_at`: where the message's `ttl` counts from.
        var startAt: Date
        var now: Date
        var appDefaultLanguage: String?
        /// The channel row (nil fields: no row of that name).
        var channelState: String?
        var appleChannelID: String?
        var environment: String?
        var settings: String?
        var endpoint: String?
    }

    /// Due sends a pick reads before leasing one (the first it can lock).
    static let sendCandidates = 16

    /// Leases the next due channel send for `lease` (its `run_at` moved to the lease's end, `attempt` and `fence`
    /// bumped), or nil when none is due.
    ///
    /// Two steps, so that every statement that locks names one send: the earliest due sends' ids are read without a
    /// lock (on Citus a read of every shard), then each in turn is leased by a statement on its id alone (a router
    /// statement on its notification's shard), which skips it when another worker holds it or has leased it
    /// since the read. Citus refuses the one-statement form, a `FOR UPDATE SKIP LOCKED` over every shard
    /// (docs/scale-out.md, "Every table").
    static func leaseSend(workerID: String, lease: Duration, on connection: PostgresConnection) throws -> ChannelSend? {
        // Prepared, as the lease statements: the loop asks on every poll, and an idle poll (no send due) was nearly
        // all parse and plan.
        let due = try connection.preparedQuery(
            "SELECT notification_id FROM live_activity_channel_sends WHERE run_at <= now() ORDER BY run_at LIMIT $1",
            [sendCandidates]
        ).map { try $0.decode(UUID.self, "notification_id") }
        for candidate in due {
            if let send = try leaseSend(candidate, workerID: workerID, lease: lease, on: connection) { return send }
        }
        return nil
    }

    /// Leases the send of `notificationID` when it is still due and no other transaction holds it.
    static func leaseSend(
        _ notificationID: UUID, workerID: String, lease: Duration, on connection: PostgresConnection
    ) throws -> ChannelSend? {
        let leaseSeconds = Double(lease.components.seconds)
        let rows = try connection.preparedQuery(
            """
            UPDATE live_activity_channel_sends s
            SET run_at = now() + make_interval(secs => $1), attempt = s.attempt + 1, fence = s.fence + 1, leased_by = $2
            FROM (SELECT notification_id FROM live_activity_channel_sends WHERE notification_id = $4 AND run_at <= now()
                  FOR UPDATE SKIP LOCKED) picked
            WHERE s.notification_id = $4 AND s.notification_id = picked.notification_id
            RETURNING s.notification_id, s.app_id, s.channel_name, s.request_id, s.attempt, s.fence, s.run_at AS lease_end,
                      (SELECT CASE WHEN octet_length(n.message::text) <= $3 THEN n.message::text END
                       FROM notifications n WHERE n.id = $4) AS message,
                      (SELECT n.status FROM notifications n WHERE n.id = $4) AS notification_status,
                      (SELECT COALESCE(n.send_after, n.created_at) FROM notifications n WHERE n.id = $4) AS start_at,
                      (SELECT p.default_language FROM apps p WHERE p.id = s.app_id) AS default_language,
                      (SELECT c.state FROM live_activity_channels c
                       WHERE c.app_id = s.app_id AND c.name = s.channel_name) AS channel_state,
                      (SELECT c.apple_channel_id FROM live_activity_channels c
                       WHERE c.app_id = s.app_id AND c.name = s.channel_name) AS apple_channel_id,
                      (SELECT c.environment FROM live_activity_channels c
                       WHERE c.app_id = s.app_id AND c.name = s.channel_name) AS environment,
                      (SELECT a.settings::text FROM app_channels a WHERE a.app_id = s.app_id AND a.provider = 'apns') AS settings,
                      (SELECT a.endpoint FROM app_channels a WHERE a.app_id = s.app_id AND a.provider = 'apns') AS endpoint
            """, [leaseSeconds, workerID, maximumMessageBytes, notificationID])
        guard let row = rows.first else { return nil }
        // The statement's now(), from the lease's end it wrote: Citus allows no function but immutable ones in a
        // distributed statement's RETURNING.
        let now = try row.decode(Date.self, "lease_end").addingTimeInterval(-leaseSeconds)
        return ChannelSend(
            notificationID: try row.decode(UUID.self, "notification_id"), appID: try row.decode(UUID.self, "app_id"),
            channelName: try row.decode(String.self, "channel_name"), requestID: try row.decode(UUID.self, "request_id"),
            attempt: try row.decode(Int.self, "attempt"), fence: try row.decode(Int.self, "fence"),
            message: try row.decodeIfPresent(String.self, "message"),
            notificationStatus: try row.decodeIfPresent(String.self, "notification_status") ?? "canceled",
            startAt: try row.decodeIfPresent(Date.self, "start_at") ?? now,
            now: now, appDefaultLanguage: try row.decodeIfPresent(String.self, "default_language"),
            channelState: try row.decodeIfPresent(String.self, "channel_state"),
            appleChannelID: try row.decodeIfPresent(String.self, "apple_channel_id"),
            environment: try row.decodeIfPresent(String.self, "environment"),
            settings: try row.decodeIfPresent(String.self, "settings"), endpoint: try row.decodeIfPresent(String.self, "endpoint"))
    }

    /// Settles `send` with `outcome`, fenced: a terminal outcome deletes the row and writes its event, a retry
    /// moves `run_at` to `retryAt` and writes a `retrying` event. Nothing is written when the fence moved on (the
    /// lease ran out and another worker took the send).
    /// - Returns: whether it was written.
    @discardableResult
    static func settle(
        _ send: ChannelSend, event: DeliveryEvent, reason: DeliveryReason?, detail: JSONValue, retryAt: Date?,
        on connection: PostgresConnection
    ) throws -> Bool {
        let rows = try connection.query(
            retryAt == nil
                ? """
                WITH settled AS (
                    DELETE FROM live_activity_channel_sends WHERE notification_id = $1 AND fence = $2
                    RETURNING app_id, attempt, $6::timestamptz AS unused)
                INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
                SELECT app_id, $1, NULL, $3, $4, attempt, $5::jsonb FROM settled
                RETURNING 1
                """
                : """
                WITH settled AS (
                    UPDATE live_activity_channel_sends SET run_at = $6, leased_by = NULL
                    WHERE notification_id = $1 AND fence = $2 RETURNING app_id, attempt)
                INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
                SELECT app_id, $1, NULL, $3, $4, attempt, $5::jsonb FROM settled
                RETURNING 1
                """,
            [send.notificationID, send.fence, event.rawValue, reason?.rawValue, detail.jsonText, retryAt])
        return !rows.isEmpty
    }
}
