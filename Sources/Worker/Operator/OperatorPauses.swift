import DeliveryCore
import Foundation
import Postgres

/// `pushizo-worker pause` / `resume` (docs/operations.md, "Operator commands"): an operator's pause of a channel,
/// an app or the fleet, recorded with reason `operator` and an end (`infinity` until resumed), each in one
/// transaction with its audit row.
///
/// How each waits: a channel's deliveries are claimed and put back by the delivery decision until the pause's
/// end, without spending an attempt (retrying / `channel_paused`, as for a provider's pause); an app's, or every
/// delivery while the fleet is paused, are not claimed at all nor leased at insert (``ClaimPauses``). None is
/// failed or skipped for it. `resume` lifts only a pause an operator set: a provider's pause of a channel (its
/// reason the provider's, e.g. `InvalidProviderToken`) is left to end by itself, and the outcome says so.
public enum OperatorPauses {
    /// The reason an operator's pause carries in `paused_reason`.
    public static let operatorReason = ClaimPauses.operatorReason

    /// Pauses `target` until `until` (nil: indefinitely, `infinity`).
    /// - Parameter note: the operator's `--reason` text, for the audit row.
    /// - Throws: ``OperatorError`` for an unknown app or channel or an end in the past; ``PostgresError``.
    public static func pause(
        _ target: OperatorTarget, until: Date?, note: String?, on connection: PostgresConnection
    ) throws -> OperatorOutcome {
        try connection.transaction { connection in
            let now = try connection.query("SELECT now() AS now")[0].decode(Date.self, "now")
            let end = until ?? .distantFuture
            if end <= now { throw OperatorError.untilInThePast(end) }
            let current = try lockPause(target, on: connection)
            var detail: [String: JSONValue] = ["until": OperatorOutcome.untilJSON(end)]
            var outcome: OperatorOutcome
            if current.reason == operatorReason, let was = current.until, was == end {
                outcome = OperatorOutcome(
                    action: "pause", scope: target.scope, appID: target.appID, provider: target.provider,
                    rowsAffected: 0, alreadySo: true,
                    summary: "\(target) was already paused by an operator \(OperatorOutcome.untilText(end)); nothing changed",
                    detail: detail)
            } else {
                var replaced = ""
                if let was = current.until, was > now {
                    detail["replaced"] = .object([
                        "until": OperatorOutcome.untilJSON(was), "reason": current.reason.map(JSONValue.string) ?? .null,
                    ])
                    replaced = " (was paused \(OperatorOutcome.untilText(was)), reason \(current.reason ?? "none"))"
                }
                try setPause(target, until: end, reason: operatorReason, on: connection)
                outcome = OperatorOutcome(
                    action: "pause", scope: target.scope, appID: target.appID, provider: target.provider,
                    rowsAffected: 1, alreadySo: false,
                    summary: "paused \(target) \(OperatorOutcome.untilText(end))\(replaced); \(waitingText(target))",
                    detail: detail)
            }
            try OperatorAudit.record(&outcome, note: note, on: connection)
            return outcome
        }
    }

    /// Lifts an operator's pause of `target`. A channel's deliveries put back until the pause's end are made due
    /// now (those whose `last_error` is `channel_paused`), and the app's claim turn with them; the fleet is woken.
    /// - Throws: ``OperatorError`` for an unknown app or channel; ``PostgresError``.
    public static func resume(_ target: OperatorTarget, note: String?, on connection: PostgresConnection) throws
        -> OperatorOutcome
    {
        try connection.transaction { connection in
            let now = try connection.query("SELECT now() AS now")[0].decode(Date.self, "now")
            let current = try lockPause(target, on: connection)
            var outcome: OperatorOutcome
            func make(_ rows: Int, _ already: Bool, _ summary: String, _ detail: [String: JSONValue] = [:]) -> OperatorOutcome {
                OperatorOutcome(
                    action: "resume", scope: target.scope, appID: target.appID, provider: target.provider,
                    rowsAffected: rows, alreadySo: already, summary: summary, detail: detail)
            }
            if current.reason != operatorReason {
                if let until = current.until, until > now {
                    outcome = make(
                        0, true,
                        "\(target) is paused \(OperatorOutcome.untilText(until)) by the provider's answer (reason \(current.reason ?? "none")), not by an operator: left as it is (it ends by itself; fix the credentials, docs/provider-answers.md)",
                        ["provider_pause": .object([
                            "until": OperatorOutcome.untilJSON(until), "reason": current.reason.map(JSONValue.string) ?? .null,
                        ])])
                } else {
                    outcome = make(0, true, "\(target) was not paused by an operator; nothing changed")
                }
            } else {
                try setPause(target, until: nil, reason: nil, on: connection)
                let ended = current.until.map { $0 <= now } ?? true
                var requeued = 0
                if case .channel(let app, let provider) = target {
                    requeued = try ClaimPauses.requeue(app: app, provider: provider, on: connection)
                }
                try OperatorAudit.wake("", on: connection)
                var summary = ended
                    ? "cleared the operator's pause of \(target), which had ended"
                    : "resumed \(target) (paused by an operator \(OperatorOutcome.untilText(current.until ?? .distantFuture)))"
                if case .channel = target { summary += "; \(TerminalWords.count(requeued, "waiting delivery", "waiting deliveries")) due now" }
                outcome = make(
                    1 + requeued, false, summary,
                    ["was_until": OperatorOutcome.untilJSON(current.until ?? .distantFuture), "requeued": .int(Int64(requeued))])
            }
            try OperatorAudit.record(&outcome, note: note, on: connection)
            return outcome
        }
    }

    /// What a pause does to deliveries, for the summary.
    static func waitingText(_ target: OperatorTarget) -> String {
        switch target {
        case .channel: "its deliveries wait (retrying / channel_paused, no attempt spent); sends in flight finish"
        case .app: "its deliveries wait unclaimed; sends in flight finish"
        case .fleet: "no claims and no leasing at insert; sends in flight finish"
        }
    }

    /// The target's pause, its row locked for the transaction.
    static func lockPause(_ target: OperatorTarget, on connection: PostgresConnection) throws
        -> (until: Date?, reason: String?)
    {
        let rows: PostgresQueryResult
        switch target {
        case .channel(let app, let provider):
            rows = try connection.query(
                """
                SELECT paused_until, paused_reason FROM app_channels WHERE app_id = $1 AND provider = $2 FOR UPDATE
                """, [app, provider.rawValue])
            if rows.isEmpty { throw OperatorError.noChannel(app: app, provider: provider) }
        case .app(let app):
            rows = try connection.query("SELECT paused_until, paused_reason FROM apps WHERE id = $1 FOR UPDATE", [app])
            if rows.isEmpty { throw OperatorError.noApp(app) }
        case .fleet:
            rows = try connection.query("SELECT paused_until, paused_reason FROM fleet_settings FOR UPDATE")
            if rows.isEmpty { throw OperatorError.noFleetSettings }
        }
        return (try rows[0].decodeIfPresent(Date.self, "paused_until"), try rows[0].decodeIfPresent(String.self, "paused_reason"))
    }

    static func setPause(_ target: OperatorTarget, until: Date?, reason: String?, on connection: PostgresConnection) throws {
        switch target {
        case .channel(let app, let provider):
            _ = try connection.query(
                """
                UPDATE app_channels SET paused_until = $3, paused_reason = $4, updated_at = now()
                WHERE app_id = $1 AND provider = $2
                """, [app, provider.rawValue, until, reason])
        case .app(let app):
            _ = try connection.query(
                "UPDATE apps SET paused_until = $2, paused_reason = $3 WHERE id = $1", [app, until, reason])
        case .fleet:
            _ = try connection.query(
                "UPDATE fleet_settings SET paused_until = $1, paused_reason = $2, updated_at = now()", [until, reason])
        }
    }
}
