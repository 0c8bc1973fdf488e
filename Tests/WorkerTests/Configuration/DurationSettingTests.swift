import Testing
@testable import Worker

/// Durations with units (`PUSHIZO_EVENT_RETENTION`, `PUSHIZO_NOTIFICATION_RETENTION`, `PUSHIZO_MAINTENANCE_INTERVAL`).
@Suite("Duration settings")
struct DurationSettingTests {
    static func settings(_ environment: [String: String]) throws -> MaintenanceSettings {
        try MaintenanceSettings(ConfigurationReader(environment: environment, arguments: [], keys: []))
    }

    @Test func defaultsAreThirtyAndNinetyDays() throws {
        let settings = try Self.settings([:])
        #expect(settings.eventRetention == .seconds(30 * 86_400))
        #expect(settings.notificationRetention == .seconds(90 * 86_400))
    }

    @Test func unitsAndBareSecondsAndOff() throws {
        #expect(try Self.settings(["PUSHIZO_EVENT_RETENTION": "7d"]).eventRetention == .seconds(7 * 86_400))
        #expect(try Self.settings(["PUSHIZO_EVENT_RETENTION": "36h"]).eventRetention == .seconds(36 * 3_600))
        #expect(try Self.settings(["PUSHIZO_EVENT_RETENTION": "172800"]).eventRetention == .seconds(172_800))
        #expect(try Self.settings(["PUSHIZO_EVENT_RETENTION": " 2D "]).eventRetention == .seconds(2 * 86_400))
        #expect(try Self.settings(["PUSHIZO_NOTIFICATION_RETENTION": "off"]).notificationRetention == nil)
    }

    @Test(arguments: ["30x", "d", "-3d", "12h", "3651d", "off", "nan", "1e400"])
    func badEventRetentionNamesTheKey(_ value: String) throws {
        let error = #expect(throws: ConfigurationError.self) {
            try Self.settings(["PUSHIZO_EVENT_RETENTION": value])
        }
        #expect(error?.key == "PUSHIZO_EVENT_RETENTION")
    }

    @Test func maintenanceIntervalIsOnByDefaultAndCanBeTurnedOff() throws {
        let base = ["PUSHIZO_DATABASE_URL": "dbname=x"]
        let reader = { (extra: [String: String]) in
            try WorkerConfiguration(
                ConfigurationReader(environment: base.merging(extra) { $1 }, arguments: [], keys: WorkerConfiguration.keys))
        }
        #expect(try reader([:]).maintenanceInterval == .seconds(3_600))
        #expect(try reader(["PUSHIZO_MAINTENANCE_INTERVAL": "15m"]).maintenanceInterval == .seconds(900))
        #expect(try reader(["PUSHIZO_MAINTENANCE_INTERVAL": "off"]).maintenanceInterval == nil)
        #expect(throws: ConfigurationError.self) { try reader(["PUSHIZO_MAINTENANCE_INTERVAL": "1s"]) }
    }
}
