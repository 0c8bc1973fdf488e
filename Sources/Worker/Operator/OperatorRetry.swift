import DeliveryCore
import Foundation
import Postgres
import UUIDText

/// `pushizo-worker retry --notification ID [--reason R ...] [--since T]` (docs/operations.md, "Operator
/// commands"): a notification's failed deliveries queued again as new `deliveries` rows (a fresh attempt budget, a
/// new `apns-id`), in one transaction with its audit row.
///
/// A subscription is retried when its latest terminal event for the notification (`sent`, `failed`, `skipped`)
/// is `failed`, with one of `reasons` (all when empty) and at or after `since`. Never for a subscription that is
/// no longer `active` (invalid, unsubscribed, deleted), and never twice while one is queued: the queue's unique
/// (notification, subscription) keeps the second (`already_queued`). Once a retried delivery is sent, its latest
/// event is `sent` and a second run finds nothing to retry.
public enum OperatorRetry {
    /// Requeues the permitted failures; counts per failure reason: requeued, subscription not active, already
    /// queued.
    /// - Throws: ``OperatorError`` for an unknown or canceled notification; ``PostgresError``.
    public static func retry(
        notification id: UUID, reasons: [String], since: Date?, note: String?, on connection: PostgresConnection
    ) throws -> OperatorOutcome {
        try connection.transaction { connection in
            guard let row = try connection.query(
                "SELECT status FROM notifications WHERE id = $1 FOR KEY SHARE", [id]
            ).first else { throw OperatorError.noNotification(id) }
            if try row.decode(String.self, "status") == "canceled" { throw OperatorError.notificationCanceled(id) }
            let rows = try connection.query(retrySQL, [id, reasons.isEmpty ? nil : reasons, since])
            var perReason: [String: JSONValue] = [:]
            var requeued = 0, inactive = 0, queued = 0
            var parts: [String] = []
            for row in rows {
                let reason = try row.decodeIfPresent(String.self, "reason") ?? "(none)"
                let r = try row.decode(Int.self, "requeued")
                let i = try row.decode(Int.self, "inactive")
                let q = try row.decode(Int.self, "already_queued")
                requeued += r
                inactive += i
                queued += q
                perReason[reason] = .object([
                    "requeued": .int(Int64(r)), "subscription_inactive": .int(Int64(i)), "already_queued": .int(Int64(q)),
                ])
                parts.append("\(reason) \(r)")
            }
            if requeued > 0 { try OperatorAudit.wake("", on: connection) }
            let name = "notification \(CanonicalUUIDText.format(id))"
            let summary =
                rows.isEmpty
                ? "\(name): no failed deliveries match; nothing requeued"
                : "\(name): requeued \(TerminalWords.count(requeued, "failed delivery", "failed deliveries")) (\(parts.joined(separator: ", "))); "
                    + "\(queued) already queued, \(inactive) not retried (subscription no longer active)"
            var detail: [String: JSONValue] = [
                "reasons": .object(perReason), "requeued": .int(Int64(requeued)),
                "already_queued": .int(Int64(queued)), "subscription_inactive": .int(Int64(inactive)),
            ]
            if !reasons.isEmpty { detail["reason_filter"] = .array(reasons.map(JSONValue.string)) }
            if let since { detail["since"] = .string(since.formatted(.iso8601)) }
            var outcome = OperatorOutcome(
                action: "retry", scope: "notification", notificationID: id, rowsAffected: requeued,
                alreadySo: requeued == 0, summary: summary, detail: detail)
            try OperatorAudit.record(&outcome, note: note, on: connection)
            return outcome
        }
    }

    /// `$1` the notification, `$2` the failure reasons (`text[]`, NULL = all), `$3` the earliest failure
    /// (`timestamptz`, NULL = any). Rows per failure reason: requeued, inactive, already_queued. The priority is
    /// expansion's (10 for `priority: "high"`, else 5, plus 1 for the id-list targets).
    static let retrySQL = """
        WITH latest AS (
            SELECT DISTINCT ON (e.subscription_id) e.subscription_id, e.event, e.reason, e.at
            FROM delivery_events e
            WHERE e.notification_id = $1 AND e.event IN ('sent', 'failed', 'skipped')
            ORDER BY e.subscription_id, e.at DESC, e.id DESC
        ), candidates AS (
            SELECT l.subscription_id, l.reason, s.status AS subscription_status, s.lane
            FROM latest l LEFT JOIN subscriptions s ON s.id = l.subscription_id
            WHERE l.event = 'failed' AND ($2::text[] IS NULL OR l.reason = ANY($2::text[]))
              AND ($3::timestamptz IS NULL OR l.at >= $3::timestamptz)
        ), inserted AS (
            INSERT INTO deliveries (lane, notification_id, subscription_id, app_id, priority)
            SELECT c.lane, n.id, c.subscription_id, n.app_id,
                   (CASE WHEN n.message->>'priority' = 'high' THEN 10 ELSE 5 END
                    + CASE WHEN n.target ?| ARRAY['include_subscription_ids', 'include_external_ids'] THEN 1 ELSE 0 END)::smallint
            FROM candidates c CROSS JOIN (SELECT id, app_id, message, target FROM notifications WHERE id = $1) n
            WHERE c.subscription_status = 'active'
            ORDER BY c.subscription_id
            ON CONFLICT (notification_id, subscription_id) DO NOTHING
            RETURNING subscription_id
        )
        SELECT c.reason,
               count(i.subscription_id)::integer AS requeued,
               count(*) FILTER (WHERE c.subscription_status IS DISTINCT FROM 'active')::integer AS inactive,
               count(*) FILTER (WHERE c.subscription_status = 'active' AND i.subscription_id IS NULL)::integer AS already_queued
        FROM candidates c LEFT JOIN inserted i ON i.subscription_id = c.subscription_id
        GROUP BY c.reason ORDER BY c.reason
        """
}
