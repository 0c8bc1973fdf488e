import Foundation
import Postgres

/// What one FCM project's bucket granted a batch (`pushizo_fcm_project_charge`, migration 0034; docs/fcm.md,
/// "Project quota").
public struct FCMProjectGrant: Sendable, Equatable {
    /// The Firebase project ID (`project_id` of the channels' service accounts).
    public var project: String
    /// The quota the charge applied, messages per minute: the smallest `project_quota_per_minute` of the fcm
    /// channels naming the project, else Firebase's default, 600,000 ("Throttling and quotas").
    public var quotaPerMinute: Double
    /// Sends granted: at most those asked, at most the whole permits the bucket held.
    public var granted: Int
    /// Permits left in the bucket after the charge (a fraction of one when it ran dry).
    public var permitsLeft: Double
    /// The bucket's refill, permits per second (the quota / 61; also its capacity).
    public var perSecond: Double
    /// The charge's instant on the database's clock.
    public var chargedAt: Date

    public init(project: String, quotaPerMinute: Double, granted: Int, permitsLeft: Double, perSecond: Double, chargedAt: Date) {
        self.project = project
        self.quotaPerMinute = quotaPerMinute
        self.granted = granted
        self.permitsLeft = permitsLeft
        self.perSecond = perSecond
        self.chargedAt = chargedAt
    }

    /// When the bucket's refill reaches the `position`-th send held back (0: the first one after those granted):
    /// the instant it holds `position + 1` whole permits, if nobody else takes them first.
    public func nextPermit(forHeld position: Int) -> Date {
        guard perSecond > 0 else { return chargedAt.addingTimeInterval(60) }
        let missing = max(0, Double(position + 1) - permitsLeft)
        return chargedAt.addingTimeInterval(min(60, missing / perSecond))
    }
}

/// The FCM projects' fleet-wide token buckets (`fcm_project_buckets`, migration 0034): one charge per FCM batch.
public enum FCMProjectQuotaStore {
    /// Charges each project for its sends in one statement; the rows are locked in project order for the
    /// statement only, so concurrent workers' charges are serialized per project and the bound holds fleet-wide.
    /// - Parameters:
    ///   - asks: sends wanted per project (a project named twice is charged for the sum).
    ///   - at: the charge's instant; nil is the database's `clock_timestamp()` (tests drive it).
    /// - Returns: one grant per project asked for.
    public static func charge(on connection: PostgresConnection, asks: [(project: String, sends: Int)], at: Date? = nil) throws
        -> [FCMProjectGrant]
    {
        guard !asks.isEmpty else { return [] }
        let rows = try connection.query(
            """
            SELECT project, quota_per_minute::float8 AS quota, granted, permits_left::float8 AS permits_left,
                   per_second::float8 AS per_second, charged_at
            FROM pushizo_fcm_project_charge($1::text[], $2::integer[], $3::timestamptz)
            """, [asks.map(\.project), asks.map(\.sends), at])
        return try rows.map { row in
            FCMProjectGrant(
                project: try row.decode(String.self, "project"), quotaPerMinute: try row.decode(Double.self, "quota"),
                granted: try row.decode(Int.self, "granted"), permitsLeft: try row.decode(Double.self, "permits_left"),
                perSecond: try row.decode(Double.self, "per_second"), chargedAt: try row.decode(Date.self, "charged_at"))
        }
    }
}
