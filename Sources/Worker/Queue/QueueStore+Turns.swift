import Foundation
import Postgres

extension QueueStore {
    /// Seconds until the next claim turn that lies ahead (`app_claim_turns.turn_at`, the earliest after `now()`
    /// that is not `'infinity'`): when a delivery of some app falls due, or a limited app's bucket holds its next
    /// permit (docs/fairness.md, docs/throttle.md). `nil` when no turn lies ahead. What a worker whose claim
    /// came back short waits at most before claiming again, so a retry, a deferred push or a limited app is
    /// served when it is due rather than a poll interval later; at most a day (86,400 s), to the microsecond.
    /// One index probe (`app_claim_turns_due`); no row is locked or written.
    public static func nextTurnWait(on connection: PostgresConnection) throws -> Double? {
        try nextTurn(on: connection).wait
    }

    /// ``nextTurnWait(on:)`` with the statement's reading of PostgreSQL's clock: a worker whose claims come
    /// back empty still measures its clock's offset (docs/clocks.md).
    public static func nextTurn(on connection: PostgresConnection) throws -> (wait: Double?, clock: DatabaseClockReading) {
        let sent = DatabaseClockReading.StatementTiming()
        let rows = try connection.preparedQuery(
            """
            SELECT now() AS now,
                   (SELECT round(least(extract(epoch FROM turn_at - now()), 86400), 6)::float8
                    FROM app_claim_turns
                    WHERE turn_at > now() AND turn_at < 'infinity' ORDER BY turn_at LIMIT 1) AS wait
            """)
        let received = ContinuousClock.now
        let row = rows[0]
        return (
            try row.decodeIfPresent(Double.self, "wait"),
            DatabaseClockReading(databaseNow: try row.decode(Date.self, "now"), sent: sent, receivedAt: received)
        )
    }

    /// Brings forward the claim turns that writers other than the worker left too late
    /// (`pushizo_claim_turns_repair()`, migration 0026): an operator's `UPDATE deliveries SET run_at = now()`
    /// makes deliveries due without moving their app's turn. Run by every worker every
    /// ``turnRepairInterval``; one probe per distinct priority of each app whose turn lies ahead.
    /// - Returns: how many turns moved.
    public static func repairClaimTurns(on connection: PostgresConnection) throws -> Int {
        try connection.query("SELECT pushizo_claim_turns_repair() AS moved")[0].decode(Int.self, "moved")
    }

    /// How often each worker runs ``repairClaimTurns(on:)``: the longest an operator's change of `run_at` waits
    /// for its turn.
    public static let turnRepairInterval = Duration.seconds(5)
}
