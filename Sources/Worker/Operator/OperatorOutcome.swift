import DeliveryCore
import Foundation
import Postgres
import UUIDText

/// What one operator command did (docs/operations.md, "Operator commands"): a one-line summary for people, the
/// same facts as JSON for scripts (``json``), and the `operator_actions` row that records it (migration 0028).
public struct OperatorOutcome: Sendable, Equatable {
    /// `pause`, `resume`, `cancel` or `retry`.
    public var action: String
    /// `channel`, `app`, `fleet` or `notification` (`operator_actions.scope`).
    public var scope: String
    public var appID: UUID?
    public var provider: Provider?
    public var notificationID: UUID?
    /// Rows the command changed (0 when everything was already so).
    public var rowsAffected: Int
    /// True when nothing needed changing: running the command again finds it so.
    public var alreadySo: Bool
    /// One line, what it did and what was already so.
    public var summary: String
    /// The command's own figures (counts per reason, the pause's end, ...), written to `operator_actions.detail`.
    public var detail: [String: JSONValue]
    /// `operator_actions.id`, `role_name` and `at` of the audit row (set by ``OperatorAudit/record(_:note:on:)``).
    public var auditID: Int64 = 0
    public var role: String = ""
    public var at: Date = .distantPast

    public init(
        action: String, scope: String, appID: UUID? = nil, provider: Provider? = nil, notificationID: UUID? = nil,
        rowsAffected: Int, alreadySo: Bool, summary: String, detail: [String: JSONValue] = [:]
    ) {
        self.action = action
        self.scope = scope
        self.appID = appID
        self.provider = provider
        self.notificationID = notificationID
        self.rowsAffected = rowsAffected
        self.alreadySo = alreadySo
        self.summary = summary
        self.detail = detail
    }

    /// `{"action", "scope", "app_id", "provider", "notification_id", "rows_affected", "already_so", "summary",
    /// "detail", "audit": {"id", "role", "at"}}`, keys sorted, one line; every key always present, `null` where it
    /// does not apply (`app_id` of a fleet pause, `notification_id` of a pause).
    public var json: String {
        var members: [String: JSONValue] = [
            "action": .string(action), "scope": .string(scope), "rows_affected": .int(Int64(rowsAffected)),
            "already_so": .bool(alreadySo), "summary": .string(summary), "detail": .object(detail),
            "audit": .object([
                "id": .int(auditID), "role": .string(role), "at": .string(at.formatted(.iso8601)),
            ]),
        ]
        members["app_id"] = appID.map { .string(CanonicalUUIDText.format($0)) } ?? .null
        members["provider"] = provider.map { .string($0.rawValue) } ?? .null
        members["notification_id"] = notificationID.map { .string(CanonicalUUIDText.format($0)) } ?? .null
        return JSONValue.object(members).jsonText
    }

    /// A pause's end as people read it: `indefinitely` for `infinity`, else `until <UTC time>`.
    static func untilText(_ until: Date) -> String {
        until == .distantFuture ? "indefinitely" : "until \(TerminalWords.instant(until))"
    }

    /// A pause's end in JSON, as `status --json` writes it (``PauseEnd``): `null` for a pause until resumed
    /// (PostgreSQL's `infinity`), else the ISO 8601 instant.
    static func untilJSON(_ until: Date) -> JSONValue {
        PauseEnd.json(until).map { .string($0.formatted(.iso8601)) } ?? .null
    }
}

/// Writes the audit record of an operator command (`operator_actions`, migration 0028), in the command's own
/// transaction, so the record exists exactly when the change does.
public enum OperatorAudit {
    /// Appends `outcome` with the operator's `note` (their `--reason` text) and sets its audit id, role (the
    /// session's login role, `session_user`) and time.
    public static func record(_ outcome: inout OperatorOutcome, note: String?, on connection: PostgresConnection) throws {
        let row = try connection.query(
            """
            INSERT INTO operator_actions (action, scope, app_id, provider, notification_id, reason, rows_affected, detail)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
            RETURNING id, role_name::text AS role_name, at
            """,
            [
                outcome.action, outcome.scope, outcome.appID, outcome.provider?.rawValue, outcome.notificationID, note,
                outcome.rowsAffected, JSONValue.object(outcome.detail).jsonText,
            ])[0]
        outcome.auditID = try row.decode(Int64.self, "id")
        outcome.role = try row.decode(String.self, "role_name")
        outcome.at = try row.decode(Date.self, "at")
    }

    /// Wakes the fleet's idle loops (`NOTIFY pushizo_wakeup`, delivered at commit): after a resume or a requeue
    /// the claim loops need not wait for their poll. `notifications` as payload wakes the expand loops too.
    static func wake(_ payload: String, on connection: PostgresConnection) throws {
        _ = try connection.query("SELECT pg_notify('pushizo_wakeup', $1)", [payload])
    }
}
