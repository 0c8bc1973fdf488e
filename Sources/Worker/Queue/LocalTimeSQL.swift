/// The SQL fragments both expansion statements use to schedule local-time deliveries in bulk
/// (docs/local-time-delivery.md): the due instant is computed once per (notification, distinct zone) with
/// migration 0011's `pushizo_local_due`, and the zone is resolved as quiet hours resolve it (the subscriber's
/// name if PostgreSQL's tz database knows it exactly as stored, else the app's `default_timezone`, else UTC),
/// with one call of `pushizo_known_zones` per statement (lookups by key in `time_zone_names`, migration 0023).
///
/// Each delivery finds its schedule by key in one `jsonb` object (``scheduleEntry(schedule:notification:zone:)``), not by
/// joining its row to the (notification, zone) rows: the bulk pass runs as a generic plan, which expects ten
/// elements of every array parameter, and it joined 5,000 deliveries to 5,000 (notification, zone) rows with a
/// nested loop (25 million comparisons, 2.4 s, for 500 notifications of 10 devices over 1,200 zones). A `jsonb`
/// object keeps its keys sorted and `->` finds one by binary search, whatever plan the statement gets.
enum LocalTimeSQL {
    /// Common table expressions to append after the statement's first one (the text starts with `, `):
    /// `local_notifications`, `local_pairs` (which may refer to `local_notifications`), `local_known`,
    /// `local_due` and `local_schedule`. `local_due` has one row per (`notification_id`, `zone_key`) with
    /// `start_at`, `ttl` and `due` (NULL: no schedule, due at once); `local_schedule` is one row whose `entries`
    /// maps each pair's ``scheduleKey(notification:zone:)`` to `[run_at, due]`.
    /// - Parameters:
    ///   - pairs: a query of distinct (`notification_id`, `zone_key`), `zone_key` being ``zoneKey(_:)`` of
    ///     `subscriptions.timezone`.
    ///   - notifications: a query of (`id`, `start_at`, `app_zone`, `time_of_day` `time`, `ttl` `integer`) for
    ///     the local-time notifications only.
    static func ctes(pairs: String, notifications: String) -> String {
        """
        , local_notifications AS (
            \(notifications)
        ), local_pairs AS (
            \(pairs)
        ), local_known AS MATERIALIZED (
            SELECT pushizo_known_zones(array(
                SELECT zone_key FROM local_pairs UNION SELECT app_zone FROM local_notifications)) AS names
        ), local_due AS MATERIALIZED (
            SELECT lp.notification_id, lp.zone_key, ln.start_at, ln.ttl,
                   pushizo_local_due(ln.start_at, ln.time_of_day,
                       CASE WHEN lp.zone_key = ANY (k.names) THEN lp.zone_key
                            WHEN ln.app_zone = ANY (k.names) THEN ln.app_zone
                            ELSE 'UTC' END) AS due
            FROM local_pairs lp
            JOIN local_notifications ln ON ln.id = lp.notification_id
            CROSS JOIN local_known k
        ), local_schedule AS MATERIALIZED (
            SELECT coalesce(jsonb_object_agg(\(scheduleKey(notification: "ld.notification_id", zone: "ld.zone_key")),
                                             jsonb_build_array(\(runAt("ld")), ld.due)), '{}') AS entries
            FROM local_due ld
        )
        """
    }

    /// The key of a (notification, zone) pair in `local_schedule.entries`: the notification id, a space, and the
    /// ``zoneKey(_:)`` (a uuid's text has no space, so no two pairs share a key).
    static func scheduleKey(notification: String, zone: String) -> String {
        "\(notification)::text || ' ' || \(zone)"
    }

    /// A delivery's `[run_at, due]` entry (NULL when its notification has no local time), from `local_schedule`
    /// under the alias `schedule`.
    static func scheduleEntry(schedule: String, notification: String, zone: String) -> String {
        "\(schedule).entries -> (\(scheduleKey(notification: notification, zone: zone)))"
    }

    /// A delivery's `run_at` from its ``scheduleEntry(schedule:notification:zone:)`` `entry`: the entry's, or now
    /// when there is none (no local time).
    static func runAt(entry: String) -> String {
        "coalesce((\(entry) ->> 0)::timestamptz, now())"
    }

    /// A delivery's `local_due_at` from its ``scheduleEntry(schedule:notification:zone:)`` `entry` (NULL: none).
    static func dueAt(entry: String) -> String {
        "(\(entry) ->> 1)::timestamptz"
    }

    /// The subscriber's zone name as the key of its `local_due` row: the name, or `''` when it is NULL or longer
    /// than 64 bytes. All three fall back alike (a NULL name is unset, `''` and over-long names are unknown,
    /// as in ``QuietHours/resolveZone(subscriberZone:appDefaultZone:)``), and a hostile megabyte-long name is
    /// never carried through the statement.
    static func zoneKey(_ column: String) -> String {
        "CASE WHEN octet_length(\(column)) <= 64 THEN \(column) ELSE '' END"
    }

    /// A pair's `run_at` from its `local_due` row `alias`: the due instant, or now when there is none, or
    /// when the notification expires (`start_at + ttl`) before it, so that the delivery is claimed and
    /// skipped as `expired` at once rather than at its local time. The expiry is computed only once `due` is
    /// known, i.e. for a start far from timestamptz's limits.
    private static func runAt(_ alias: String) -> String {
        """
        CASE WHEN \(alias).due IS NULL THEN now()
             WHEN \(alias).due > \(alias).start_at + make_interval(secs => \(alias).ttl) THEN now()
             ELSE \(alias).due END
        """
    }
}
