import DeliveryCore
import Foundation
import Postgres

/// The queue's SQL, each operation one short transaction on a connection the caller owns. No row lock is held
/// once a function returns, so nothing is locked while a provider request is in flight (DESIGN.md §4).
public enum QueueStore {
    /// Claims up to `limit` due deliveries, highest priority first, skipping rows other workers hold
    /// (`FOR UPDATE SKIP LOCKED`). The claim moves `run_at` to the lease's expiry (so a worker that dies loses
    /// its claims after `leaseSeconds`), counts an attempt and bumps the fence, all in one statement.
    public static func claim(
        on connection: PostgresConnection, limit: Int, leaseSeconds: Double, workerID: String
    ) throws -> [ClaimedDelivery] {
        let rows = try connection.query(claimSQL, [limit, leaseSeconds, workerID])
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(rows.count)
        for row in rows {
            claimed.append(
                ClaimedDelivery(
                    id: try row.decode(Int64.self, "id"),
                    fence: try row.decode(Int64.self, "fence"),
                    attempt: try row.decode(Int.self, "attempt"),
                    notificationID: try row.decode(UUID.self, "notification_id"),
                    subscriptionID: try row.decode(UUID.self, "subscription_id"),
                    appID: try row.decode(UUID.self, "app_id"),
                    apnsID: try row.decode(UUID.self, "apns_id"),
                    messageVersion: try row.decode(String.self, "message_version"),
                    campaignID: try row.decodeIfPresent(String.self, "campaign_id"),
                    notificationStatus: try row.decode(String.self, "notification_status"),
                    notificationStart: try row.decode(Date.self, "notification_start"),
                    platform: try row.decode(String.self, "platform"),
                    token: try row.decode(String.self, "token"),
                    apnsEnvironment: try row.decodeIfPresent(String.self, "apns_environment"),
                    language: try row.decodeIfPresent(String.self, "language"),
                    timezone: try row.decodeIfPresent(String.self, "timezone"),
                    country: try row.decodeIfPresent(String.self, "country"),
                    subscriptionStatus: try row.decode(String.self, "subscription_status"),
                    tokenUpdatedAt: try row.decode(Date.self, "token_updated_at"),
                    userTagsJSON: try row.decodeIfPresent(String.self, "user_tags"),
                    userID: try row.decodeIfPresent(UUID.self, "user_id"),
                    webP256DH: try row.decodeIfPresent(String.self, "web_p256dh"),
                    webAuth: try row.decodeIfPresent(String.self, "web_auth"),
                    defaultLanguage: try row.decodeIfPresent(String.self, "default_language"),
                    defaultTimezone: try row.decodeIfPresent(String.self, "default_timezone"),
                    quietHoursStart: try row.decodeIfPresent(String.self, "quiet_hours_start"),
                    quietHoursEnd: try row.decodeIfPresent(String.self, "quiet_hours_end"),
                    signingKey: try row.decode([UInt8].self, "signing_key"),
                    frequencyCapsJSON: try row.decodeIfPresent(String.self, "frequency_caps"),
                    channelProvider: try row.decodeIfPresent(String.self, "channel_provider"),
                    channelSettingsJSON: try row.decodeIfPresent(String.self, "channel_settings"),
                    channelEndpoint: try row.decodeIfPresent(String.self, "channel_endpoint"),
                    channelPausedUntil: try row.decodeIfPresent(Date.self, "channel_paused_until"),
                    uncountedRetries: try row.decodeIfPresent(Int.self, "uncounted_retries") ?? 0))
        }
        return claimed
    }

    static let claimSQL = """
        WITH picked AS (
            SELECT id FROM deliveries
            WHERE run_at <= now()
            ORDER BY priority DESC, run_at
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE deliveries d
            SET run_at = now() + make_interval(secs => $2::float8),
                attempt = d.attempt + 1,
                fence = d.fence + 1,
                leased_by = $3
            FROM picked
            WHERE d.id = picked.id
            RETURNING d.id, d.fence, d.attempt, d.notification_id, d.subscription_id, d.app_id, d.apns_id,
                      d.uncounted_retries
        )
        SELECT c.id, c.fence, c.attempt, c.notification_id, c.subscription_id, c.app_id, c.apns_id,
               n.xmin::text AS message_version, n.campaign_id, n.status AS notification_status,
               coalesce(n.send_after, n.created_at) AS notification_start,
               s.platform, s.token, s.apns_environment, s.language, s.timezone, s.country,
               s.status AS subscription_status, s.token_updated_at, u.tags::text AS user_tags, s.user_id,
               s.web_p256dh, s.web_auth,
               a.default_language, a.default_timezone, a.signing_key,
               a.quiet_hours_start::text AS quiet_hours_start, a.quiet_hours_end::text AS quiet_hours_end,
               a.frequency_caps::text AS frequency_caps,
               ch.provider AS channel_provider, ch.settings::text AS channel_settings,
               ch.endpoint AS channel_endpoint, ch.paused_until AS channel_paused_until,
               c.uncounted_retries
        FROM claimed c
        JOIN notifications n ON n.id = c.notification_id
        JOIN subscriptions s ON s.id = c.subscription_id
        JOIN apps a ON a.id = c.app_id
        LEFT JOIN users u ON u.id = s.user_id
        LEFT JOIN app_channels ch ON ch.app_id = c.app_id AND ch.provider = CASE s.platform
            WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' END
        """

    /// Writes a batch of completions in one transaction: terminal rows are deleted from the queue, the others
    /// rescheduled, and one `delivery_events` row is appended for each delivery whose fence still matches.
    /// Completions whose fence no longer matches (the lease expired and another worker claimed the delivery)
    /// change nothing. Subscription invalidations and channel pauses are applied in the same transaction, and
    /// so are frequency-cap releases (``DeliveryCompletion/capRelease``) of completions that took effect.
    /// - Returns: how many completions took effect (the rest lost their lease).
    @discardableResult
    public static func complete(on connection: PostgresConnection, _ completions: [DeliveryCompletion]) throws -> Int {
        guard !completions.isEmpty else { return 0 }
        return try connection.transaction { connection in
            let result = try connection.query(
                completeSQL,
                [
                    completions.map(\.deliveryID),
                    completions.map(\.fence),
                    completions.map(\.event),
                    completions.map(\.reason),
                    completions.map(\.detailJSON),
                    completions.map(\.nextRunAt),
                    completions.map { $0.nextRunAt == nil ? nil : $0.reason },
                    completions.map(\.refundsAttempt),
                ])
            let invalidations = completions.compactMap(\.invalidation)
            if !invalidations.isEmpty {
                _ = try connection.query(
                    """
                    UPDATE subscriptions s
                    SET status = 'invalid', invalid_reason = i.reason
                    FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS i(id, reason, token_seen)
                    WHERE s.id = i.id AND s.status = 'active' AND s.token_updated_at <= i.token_seen
                    """,
                    [
                        invalidations.map(\.subscriptionID),
                        invalidations.map(\.reason),
                        invalidations.map(\.tokenUpdatedAt),
                    ])
            }
            for pause in completions.compactMap(\.channelPause) {
                _ = try connection.query(
                    """
                    UPDATE app_channels
                    SET paused_until = greatest(coalesce(paused_until, now()), $3), paused_reason = $4,
                        updated_at = now()
                    WHERE app_id = $1 AND provider = $2
                    """,
                    [pause.appID, pause.provider, pause.until, pause.reason])
            }
            // Last: a transaction waiting for a key's advisory lock may hold row locks, but one holding such a
            // lock then waits only for other such locks (taken in hash order), so no cycle can form.
            let releases = completions.compactMap(\.capRelease)
            if !releases.isEmpty {
                try releaseFrequencyCapGrants(on: connection, releases)
            }
            return result.affectedRows
        }
    }

    static let completeSQL = """
        WITH input AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                                 $6::timestamptz[], $7::text[], $8::bool[])
                AS i(id, fence, event, reason, detail, next_run_at, last_error, refund)
        ), terminal AS (
            DELETE FROM deliveries d USING input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt
        ), rescheduled AS (
            UPDATE deliveries d
            SET run_at = i.next_run_at, leased_by = NULL, last_error = i.last_error,
                attempt = d.attempt - CASE WHEN i.refund THEN 1 ELSE 0 END
            FROM input i
            WHERE d.id = i.id AND d.fence = i.fence AND i.next_run_at IS NOT NULL
            RETURNING d.id, d.app_id, d.notification_id, d.subscription_id, d.attempt
        ), settled AS (
            SELECT * FROM terminal UNION ALL SELECT * FROM rescheduled
        )
        INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
        SELECT s.app_id, s.notification_id, s.subscription_id, i.event, i.reason, s.attempt,
               coalesce(i.detail::jsonb, '{}'::jsonb)
        FROM settled s JOIN input i ON i.id = s.id
        """

    /// A notification's message as stored: its row version, its size in bytes of JSON text, and the text
    /// itself unless it is larger than the limit asked for.
    public struct StoredMessage: Sendable {
        public var version: String
        public var byteCount: Int
        public var json: String?
    }

    /// Reads the messages of `notificationIDs` in one round trip; documents over `maximumBytes` of JSON text
    /// are measured but not transferred.
    public static func messages(
        on connection: PostgresConnection, notificationIDs: [UUID], maximumBytes: Int
    ) throws -> [UUID: StoredMessage] {
        let rows = try connection.query(
            """
            SELECT id, xmin::text AS version, size,
                   CASE WHEN size <= $2 THEN message::text END AS message
            FROM (SELECT id, xmin, message, octet_length(message::text) AS size
                  FROM notifications WHERE id = ANY($1::uuid[])) AS n
            """, [notificationIDs, maximumBytes])
        var result: [UUID: StoredMessage] = [:]
        for row in rows {
            result[try row.decode(UUID.self, "id")] = StoredMessage(
                version: try row.decode(String.self, "version"), byteCount: try row.decode(Int.self, "size"),
                json: try row.decodeIfPresent(String.self, "message"))
        }
        return result
    }

    /// `true` when no due notification waits for expansion (what an expand-only worker waits for).
    public static func isExpansionDrained(on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query(
            """
            SELECT NOT EXISTS (SELECT 1 FROM notifications
                               WHERE status IN ('pending', 'expanding')
                                 AND (send_after IS NULL OR send_after <= now())) AS drained
            """)
        return try rows.first?.decode(Bool.self, "drained") ?? false
    }

    /// `true` when nothing is left to do now: no due notification waits for expansion and the deliveries
    /// queue is empty (deliveries waiting for a retry count as work). Used by `PUSHIZO_EXIT_WHEN_DRAINED`.
    public static func isDrained(on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query(
            """
            SELECT NOT EXISTS (SELECT 1 FROM deliveries)
               AND NOT EXISTS (SELECT 1 FROM notifications
                               WHERE status IN ('pending', 'expanding')
                                 AND (send_after IS NULL OR send_after <= now())) AS drained
            """)
        return try rows.first?.decode(Bool.self, "drained") ?? false
    }

}
