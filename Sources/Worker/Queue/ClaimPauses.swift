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
}
