import DeliveryCore
import Foundation
import Postgres
import UUIDText

/// `pushizo-worker cancel --notification ID` (docs/operations.md, "Operator commands"): sets the producer
/// contract's `status = 'canceled'` with an audit row. The fleet's cancel sweep (``ExpansionStore/sweepCanceled(on:limit:)``)
/// then stops its expansion and turns every delivery not in flight into `skipped` / `canceled`; a send in flight
/// finishes, and a retry of it is skipped at its next claim. A leased page's deliveries count as in flight and
/// finish as leased rows do; a page rescued once its lease ran out reads the notification as canceled, and what it
/// had not settled is skipped as `canceled`.
public enum OperatorCancel {
    /// Cancels the notification; says how many deliveries were pending (to be skipped) and in flight.
    /// - Throws: ``OperatorError/noNotification(_:)``; ``PostgresError``.
    public static func cancel(notification id: UUID, note: String?, on connection: PostgresConnection) throws -> OperatorOutcome {
        try connection.transaction { connection in
            guard let row = try connection.query(
                "SELECT status, cancel_swept_at IS NOT NULL AS swept FROM notifications WHERE id = $1 FOR UPDATE", [id]
            ).first else { throw OperatorError.noNotification(id) }
            let status = try row.decode(String.self, "status")
            let counts = try connection.query(
                """
                SELECT count(*) FILTER (WHERE leased_by IS NULL OR run_at <= now()) AS pending,
                       count(*) FILTER (WHERE leased_by IS NOT NULL AND run_at > now())
                           + (SELECT coalesce(sum(deliveries), 0) FROM delivery_pages WHERE notification_id = $1) AS in_flight
                FROM deliveries WHERE notification_id = $1
                """, [id])[0]
            let pending = try counts.decode(Int.self, "pending")
            let inFlight = try counts.decode(Int.self, "in_flight")
            let detail: [String: JSONValue] = [
                "previous_status": .string(status), "pending": .int(Int64(pending)), "in_flight": .int(Int64(inFlight)),
            ]
            let name = "notification \(CanonicalUUIDText.format(id))"
            var outcome: OperatorOutcome
            if status == "canceled" {
                outcome = OperatorOutcome(
                    action: "cancel", scope: "notification", notificationID: id, rowsAffected: 0, alreadySo: true,
                    summary: "\(name) was already canceled; \(TerminalWords.count(pending, "delivery", "deliveries")) still pending for the cancel sweep, \(inFlight) in flight",
                    detail: detail)
            } else {
                _ = try connection.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [id])
                try OperatorAudit.wake("notifications", on: connection)
                outcome = OperatorOutcome(
                    action: "cancel", scope: "notification", notificationID: id, rowsAffected: 1, alreadySo: false,
                    summary: "canceled \(name) (was \(status)): \(TerminalWords.count(pending, "pending delivery", "pending deliveries")) will be skipped / canceled by the fleet's sweep, \(inFlight) in flight finish",
                    detail: detail)
            }
            try OperatorAudit.record(&outcome, note: note, on: connection)
            return outcome
        }
    }
}
