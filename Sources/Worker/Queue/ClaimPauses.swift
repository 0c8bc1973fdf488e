import DeliveryCore
import Foundation
import Postgres

/// The pauses an operator sets that claims honour (migration 0028, docs/operations.md, "Operator commands"): an
/// app paused (`apps.paused_until` ahead of `now()`, `infinity` until resumed) and the whole fleet paused
/// (`fleet_settings.paused_until`). A paused app's deliveries, or every delivery while the fleet is paused, are
/// neither claimed nor leased at insert: they wait in the queue, due, and go once the pause ends. Sends already
/// claimed are not touched.
enum ClaimPauses {
    /// A condition on `app_claim_turns` rows (column `app_id`) for the claim's visit: not a paused app, and the
    /// fleet not paused. Each side is one InitPlan per statement (the `apps_paused` partial index, the one-row
    /// `fleet_settings`), never a probe per row, so an unpaused fleet's claim costs two index reads more.
    static let turnsCondition = """
        AND app_id <> ALL(ARRAY(\(pausedApps)))
                    AND \(fleetNotPaused)
        """

    /// A condition on the app `a` (an `apps` row) for leasing rows at insert: the app is not paused and neither is
    /// the fleet.
    static let leaseCondition = "(a.paused_until IS NULL OR a.paused_until <= now()) AND \(fleetNotPaused)"

    /// The `paused_reason` of an operator's pause (of a channel, an app or the fleet).
    static let operatorReason = "operator"

    /// The fleet not paused (the one-row `fleet_settings`).
    static let fleetNotPaused = "NOT \(fleetPaused)"

    /// The fleet paused by an operator (the one-row `fleet_settings`), a boolean expression.
    static let fleetPaused = "EXISTS (SELECT FROM fleet_settings WHERE paused_until > now())"

    /// The ids of the apps an operator paused, a query (the `apps_paused` partial index).
    static let pausedApps = "SELECT id FROM apps WHERE paused_until > now()"

    /// Makes due now the channel's deliveries the decision put back for its pause, and brings the app's claim turn
    /// to now (a writer outside the worker must, docs/fairness.md). Returns how many.
    static func requeue(app: UUID, provider: Provider, on connection: PostgresConnection) throws -> Int {
        let platform = provider.platform.text
        let requeued = try connection.query(
            """
            WITH due AS (
                UPDATE deliveries d SET run_at = now()
                FROM subscriptions s
                WHERE d.app_id = $1 AND d.leased_by IS NULL AND d.last_error = 'channel_paused' AND d.run_at > now()
                  AND s.id = d.subscription_id AND s.platform = $2
                RETURNING 1
            )
            SELECT count(*) AS n FROM due
            """, [app, platform])[0].decode(Int.self, "n")
        if requeued > 0 {
            _ = try connection.query(
                "UPDATE app_claim_turns SET turn_at = now() WHERE app_id = $1 AND turn_at > now()", [app])
        }
        return requeued
    }

    /// After a batch that put deliveries back for paused channels (``DeliveryCompletion/heldByPausedChannel``):
    /// each such channel whose pause has ended has its held deliveries made due now (``requeue(app:provider:on:)``).
    /// Returns how many.
    ///
    /// An operator's `resume` of a channel requeues the held deliveries in its own transaction, but not one leased
    /// at that moment: a push claimed while the channel was paused and put back after the resume's requeue would
    /// wait for the pause's end, `infinity`, for ever. The channels' rows are read `FOR SHARE`, which waits for a
    /// `resume` in progress and returns the row it committed, so either the resume's requeue saw this batch's rows
    /// or this read sees the resume.
    static func requeueIfResumed(_ held: Set<HeldChannel>, on connection: PostgresConnection) throws -> Int {
        var requeued = 0
        for (app, channels) in Dictionary(grouping: held, by: \.app) {
            let open = try connection.query(
                """
                SELECT provider, paused_until IS NULL OR paused_until <= now() AS open
                FROM app_channels WHERE app_id = $1 FOR SHARE
                """, [app]
            ).filter { try $0.decode(Bool.self, "open") }.compactMap { $0["provider"].flatMap(Provider.init(rawValue:)) }
            for provider in Set(channels.map(\.provider)).intersection(open) {
                requeued += try requeue(app: app, provider: provider, on: connection)
            }
        }
        return requeued
    }

    /// An app's channel of one provider.
    struct HeldChannel: Hashable, Sendable {
        var app: UUID
        var provider: Provider
    }
}
