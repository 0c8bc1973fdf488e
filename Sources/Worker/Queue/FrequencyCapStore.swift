import DeliveryCore
import Foundation
import Postgres

/// What a frequency-cap reservation asks: may `notificationID` go to the cap key under `caps`?
public struct FrequencyCapRequest: Sendable, Equatable {
    public var appID: UUID
    /// `users.id`, or the subscription's id when it has no user (see ``ClaimedDelivery/capKey``).
    public var capKey: UUID
    public var notificationID: UUID
    public var caps: FrequencyCaps

    public init(appID: UUID, capKey: UUID, notificationID: UUID, caps: FrequencyCaps) {
        self.appID = appID
        self.capKey = capKey
        self.notificationID = notificationID
        self.caps = caps
    }
}

/// The answer of a frequency-cap reservation.
public enum FrequencyCapDecision: Sendable, Equatable {
    /// Send. `reused`: the notification had been granted to this key already (another device of the user,
    /// or an earlier attempt of this delivery), so nothing new was counted.
    case granted(reused: Bool)
    /// Do not send: `rule` already has `used` (>= its `max`) grants in its window.
    case denied(rule: FrequencyCapRule, used: Int)
}

/// Frequency caps in PostgreSQL (`frequency_cap_grants`, migration 0002, docs/frequency-caps.md).
public enum FrequencyCapStore {
    /// Grants younger than this many seconds are kept even when every rule's window is shorter, so a device of
    /// the key that is still queued (retrying, deferred by quiet hours) reuses the grant rather than asking
    /// again: 28 days, the providers' default storage time (``DeliveryDecision/defaultTTL``).
    public static let minimumGrantRetention = Int(DeliveryDecision.defaultTTL)

    /// Reserves a notification for a cap key in one short transaction (one statement: the
    /// `pushizo_reserve_frequency_cap` function): an advisory lock on the (app, key) hash serializes every
    /// reservation and release of that key across workers and hosts; an existing grant for the notification
    /// is reused; otherwise a grant is inserted only when every rule has room. The lock ends with the
    /// statement, so nothing is held during the provider send.
    /// - Throws: `PostgresError` when the database cannot be reached or refuses the statement.
    public static func reserve(on connection: PostgresConnection, _ request: FrequencyCapRequest) throws
        -> FrequencyCapDecision
    {
        let rules = request.caps.rules
        let keep = max(request.caps.longestRuleWindow, minimumGrantRetention)
        let rows = try connection.query(
            """
            SELECT granted, reused, rule_index, used
            FROM pushizo_reserve_frequency_cap($1, $2, $3, $4::integer[], $5::integer[], $6)
            """,
            [request.appID, request.capKey, request.notificationID, rules.map(\.max), rules.map(\.perSeconds), keep])
        guard let row = rows.first else {
            throw PostgresError(code: .unexpectedResult, message: "pushizo_reserve_frequency_cap returned no row")
        }
        if try row.decode(Bool.self, "granted") {
            return .granted(reused: try row.decode(Bool.self, "reused"))
        }
        let index = try row.decode(Int.self, "rule_index")
        guard rules.indices.contains(index) else {
            throw PostgresError(code: .unexpectedResult, message: "pushizo_reserve_frequency_cap named rule \(index) of \(rules.count)")
        }
        return .denied(rule: rules[index], used: try row.decode(Int.self, "used"))
    }

    /// Within a completion transaction, after its events are written: deletes the grants of `releases` whose
    /// notification was sent to no device of the key and has no delivery of the key left in the queue (a row, or a
    /// device in a leased page's range without an outcome). The
    /// keys' advisory locks are taken first, in one order (no deadlock between completion batches), and the
    /// check runs in a later statement, so it sees every completion committed before the locks were granted:
    /// two devices failing at once on two workers cannot both leave the grant behind.
    static func releaseGrants(on connection: PostgresConnection, _ releases: [FrequencyCapRelease]) throws {
        guard !releases.isEmpty else { return }
        let parameters: [any PostgresEncodable] = [
            releases.map(\.appID), releases.map(\.capKey), releases.map(\.notificationID),
        ]
        _ = try connection.query(
            """
            SELECT pg_advisory_xact_lock(k)
            FROM (SELECT DISTINCT pushizo_frequency_cap_lock_key(a, c) AS k
                  FROM unnest($1::uuid[], $2::uuid[]) AS r(a, c) ORDER BY 1) AS keys
            """, Array(parameters[0...1]))
        _ = try connection.query(
            """
            DELETE FROM frequency_cap_grants g
            USING unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS r(app_id, cap_key, notification_id)
            WHERE g.app_id = r.app_id AND g.cap_key = r.cap_key AND g.notification_id = r.notification_id
              AND NOT EXISTS (
                  SELECT 1 FROM subscriptions s
                  JOIN delivery_events e ON e.notification_id = g.notification_id AND e.subscription_id = s.id
                  WHERE (s.user_id = g.cap_key OR s.id = g.cap_key) AND e.event = 'sent')
              AND NOT EXISTS (
                  SELECT 1 FROM subscriptions s
                  JOIN deliveries d ON d.notification_id = g.notification_id AND d.subscription_id = s.id
                  WHERE s.user_id = g.cap_key OR s.id = g.cap_key)
              -- A device of the key in a leased page's range with no outcome yet may still be sent.
              AND NOT EXISTS (
                  SELECT 1 FROM delivery_pages p
                  JOIN subscriptions s ON s.app_id = p.app_id AND (p.after_id IS NULL OR s.id > p.after_id)
                       AND s.id <= p.up_to
                  WHERE p.notification_id = g.notification_id AND (s.user_id = g.cap_key OR s.id = g.cap_key)
                    AND NOT EXISTS (SELECT 1 FROM delivery_events e
                                    WHERE e.notification_id = g.notification_id AND e.subscription_id = s.id
                                      AND e.event IN ('sent', 'failed', 'skipped')))
            """, parameters)
    }
}
