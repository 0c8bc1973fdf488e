import Foundation
import Postgres
import Worker

/// `pushizo-worker maintain`: one data-lifecycle maintenance run now (docs/data-lifecycle.md), for operators and
/// cron-like timers; waits while a worker of the fleet is running one. Exit status 1 when a step failed.
enum MaintainCommand {
    static let keys: [ConfigurationKey] = [
        .databaseURL, .databasePooler, .logLevel, .logFormat, .eventRetention, .notificationRetention,
    ]

    static func main(environment: [String: String], arguments: [String]) throws {
        let reader = try ConfigurationReader(environment: environment, arguments: arguments, keys: keys)
        let logger = try LoggerConfiguration.make(reader, label: "maintain")
        let databaseURL = try reader.requiredConnectionString(.databaseURL)
        let settings = try MaintenanceSettings(reader)
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-maintain",
                poolerMode: PostgresPoolerMode(route.poolerMode))
        } catch {
            // A refusal that needs the operator (a bad password, no such database, ...) exits 78 (EX_CONFIG).
            throw ConfigurationError(refusal: error, key: .databaseURL) ?? error
        }
        try route.verify(connection)
        defer { connection.close() }
        guard let report = try DataLifecycle.maintain(on: connection, settings: settings, waitForLock: true) else {
            return
        }
        for problem in report.problems {
            logger.error("maintenance step failed", ["problem": problem])
        }
        for (key, value) in report.fields.sorted(by: { $0.key < $1.key }) {
            print("\(key)=\(value)")
        }
        if !report.problems.isEmpty { exit(1) }
    }
}
