/// The most bytes of each producer- or subscriber-written text column a claim reads (as PostgreSQL prints it).
/// Generous for every real value (a Web Push endpoint URL is a few hundred bytes, a BCP 47 tag a few dozen),
/// and small enough that a row holding hundreds of megabytes in one of them costs the worker nothing: the
/// value stays in the database and the delivery fails `oversized_column` naming the column.
enum ClaimedColumnBounds {
    struct Bound {
        /// The SQL expression in the claim statement.
        var expression: String
        /// The column as `delivery_events.detail` names it.
        var column: String
        var maximumBytes: Int
    }

    /// The largest `users.tags` a claim reads, in bytes of the `jsonb` as PostgreSQL prints it: 65,536. A larger
    /// document is left in the database and its user renders as having no tags (every placeholder takes its
    /// default), so one user's tags cost each claimed delivery at most this much to carry and parse.
    static let maximumUserTagsBytes = 65_536

    static let all: [Bound] = [
        Bound(expression: "n.campaign_id", column: "notifications.campaign_id", maximumBytes: 1_024),
        Bound(expression: "s.platform", column: "subscriptions.platform", maximumBytes: 64),
        Bound(expression: "s.token", column: "subscriptions.token", maximumBytes: 8_192),
        Bound(expression: "s.language", column: "subscriptions.language", maximumBytes: 256),
        Bound(expression: "s.timezone", column: "subscriptions.timezone", maximumBytes: 256),
        Bound(expression: "s.country", column: "subscriptions.country", maximumBytes: 256),
        Bound(expression: "s.web_p256dh", column: "subscriptions.web_p256dh", maximumBytes: 256),
        Bound(expression: "s.web_auth", column: "subscriptions.web_auth", maximumBytes: 256),
        Bound(expression: "a.default_language", column: "apps.default_language", maximumBytes: 256),
        Bound(expression: "a.default_timezone", column: "apps.default_timezone", maximumBytes: 256),
        Bound(expression: "a.frequency_caps", column: "apps.frequency_caps", maximumBytes: 16_384),
        Bound(expression: "ch.settings", column: "app_channels.settings", maximumBytes: 65_536),
        Bound(expression: "ch.endpoint", column: "app_channels.endpoint", maximumBytes: 2_048),
    ]
}
