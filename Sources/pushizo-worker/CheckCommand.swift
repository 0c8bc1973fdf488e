import DeliveryCore
import Foundation
import Postgres
import Providers
import Worker

/// `pushizo-worker check`: what an operator runs before (re)starting a fleet. Exit 0 only when the
/// configuration is valid, the database answers, no migration is pending and every channel parses.
enum CheckCommand {
    static func main(environment: [String: String], arguments: [String]) async throws {
        let keys = WorkerConfiguration.keys + [.migrationsDirectory]
        let reader = try ConfigurationReader(
            environment: environment, arguments: arguments, keys: keys,
            booleanKeys: [ConfigurationKey.exitWhenDrained.name])
        let configuration = try WorkerConfiguration(reader)
        _ = try LoggerConfiguration.make(reader, label: "check")
        let directory = try MigrationsLocation.resolve(reader)
        print("configuration: ok (worker \(configuration.workerID), concurrency \(configuration.concurrency))")
        let migrator = try PostgresMigrator(directory: directory)
        let database = PostgresClient(connectionString: configuration.databaseURL, maximumConnections: 1)
        let outcome = await capture { try await database.withConnection { connection in
            var lines: [String] = []
            let version = try connection.query("SHOW server_version")[0]["server_version"] ?? "?"
            lines.append("database: ok (PostgreSQL \(version))")
            let pending = try migrator.pending(on: connection)
            if !pending.isEmpty {
                lines.append("migrations: \(pending.count) pending (\(pending.map(\.fileName).joined(separator: ", "))); run `pushizo-worker migrate`")
                return lines
            }
            lines.append("migrations: up to date")
            let channels = try connection.query(
                """
                SELECT app_id, provider, settings::text AS settings, endpoint, paused_until, paused_reason
                FROM app_channels ORDER BY app_id, provider
                """)
            var problems = 0
            for channel in channels {
                let app = channel["app_id"] ?? "?"
                let provider = channel["provider"] ?? "?"
                var line = "channel \(app) \(provider)"
                if let endpoint = channel["endpoint"] { line += " endpoint=\(endpoint)" }
                if provider == "apns" {
                    do {
                        let credentials = try APNsCredentials(settings: try JSONValue(parsing: channel["settings"] ?? "{}"))
                        line += ": ok (team \(credentials.teamID), key \(credentials.keyID), topic \(credentials.topic))"
                    } catch {
                        problems += 1
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == "webpush" {
                    do {
                        _ = try WebPushChannelSettings(settings: try JSONValue(parsing: channel["settings"] ?? "{}"))
                        line += ": ok (VAPID key and subject)"
                    } catch {
                        problems += 1
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == "fcm" {
                    do {
                        let settings = try FCMChannelSettings(settingsJSON: channel["settings"] ?? "{}")
                        line += ": ok (project \(settings.account.projectID), service account \(settings.account.clientEmail))"
                    } catch {
                        problems += 1
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else {
                    line += ": unknown provider"
                }
                if let paused = channel["paused_until"] { line += " [paused until \(paused): \(channel["paused_reason"] ?? "")]" }
                lines.append(line)
            }
            if channels.isEmpty { lines.append("channels: none configured") }
            if problems > 0 { lines.append("FAILED: \(problems) channel(s) with invalid settings") }
            return lines
        } }
        await database.shutdown()
        let report = try outcome.get()
        for line in report { print(line) }
        if report.contains(where: { $0.hasPrefix("FAILED") || $0.hasPrefix("migrations: ") && $0.contains("pending") }) {
            exit(1)
        }
    }
}

/// `Result(catching:)` for async work.
func capture<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}
