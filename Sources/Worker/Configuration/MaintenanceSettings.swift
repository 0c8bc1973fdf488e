import Foundation

/// How long events and finished notifications are kept (`PUSHIZO_EVENT_RETENTION`,
/// `PUSHIZO_NOTIFICATION_RETENTION`), and the bounds of one maintenance run.
public struct MaintenanceSettings: Sendable, Equatable {
    /// Events older than this go with their whole daily partition.
    public var eventRetention: Duration
    /// Finished notifications older than this are deleted with their counts; `nil` = kept for ever.
    public var notificationRetention: Duration?
    /// `lock_timeout` of each statement that locks `delivery_events` (creating or dropping a partition takes
    /// ACCESS EXCLUSIVE on it for a moment) or `fcm_project_buckets` (pruning idle buckets waits for the charges
    /// under way): a long query on the table makes that step give up and wait for the next run, instead of
    /// queueing every insert or charge behind it.
    public var lockTimeout: Duration = .seconds(5)
    /// Rows deleted (grants, notifications) or folded (counts) per statement, so no transaction is long.
    public var batchSize: Int = 5_000

    /// - Parameters: the retentions; their defaults are the keys' (``ConfigurationKey/eventRetention``,
    ///   ``ConfigurationKey/notificationRetention``).
    public init(
        eventRetention: Duration = ConfigurationKey.eventRetention.declaredDuration,
        notificationRetention: Duration? = ConfigurationKey.notificationRetention.declaredDuration
    ) {
        self.eventRetention = eventRetention
        self.notificationRetention = notificationRetention
    }

    /// Reads `PUSHIZO_EVENT_RETENTION` and `PUSHIZO_NOTIFICATION_RETENTION` (`off` = never).
    /// - Throws: ``ConfigurationError`` naming the key.
    public init(_ reader: ConfigurationReader) throws {
        eventRetention = try reader.duration(.eventRetention)
        notificationRetention = try reader.durationSetting(.notificationRetention)
    }
}
