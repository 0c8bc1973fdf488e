import Foundation
import Postgres
import Worker

/// `pushizo-worker status [--app ID] [--json]`: the fleet (or one app of it) as the database sees it
/// (docs/status.md). Reads only; exit 0 with the report, 1 when the database cannot be read (unreachable), 2 for a
/// usage error, 78 for a bad setting, a schema without what `status` reads (naming the migrations to apply) or a
/// connection PostgreSQL refuses for good (a bad password, no such database, no right to read).
enum StatusCommand {
    static let keys: [ConfigurationKey] = [.databaseURL, .databasePooler]

    static func main(environment: [String: String], arguments: [String]) throws {
        let json = arguments.contains("--json")
        let (app, rest) = try StatusAppFlag.split(arguments.filter { $0 != "--json" })
        let reader = try ConfigurationReader(environment: environment, arguments: rest, keys: keys)
        let databaseURL = try reader.requiredConnectionString(.databaseURL)
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        let status: FleetStatus
        do {
            let connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-status", poolerMode: PostgresPoolerMode(route.poolerMode))
            defer { connection.close() }
            status = try FleetStatusStore.read(on: connection, app: app)
        } catch let error as FleetStatusSchemaError {
            // A pending migration: only `migrate` (an operator) fixes it, as for `run` and the operator commands.
            throw ConfigurationError(key: ConfigurationKey.databaseURL.name, problem: error.description)
        } catch {
            // PostgresConnection already masks the password.
            throw ConfigurationError(refusal: error, key: .databaseURL) ?? error
        }
        if json {
            print(try FleetStatusRenderer.json(status), terminator: "")
        } else {
            print(FleetStatusRenderer.text(status), terminator: "")
        }
    }
}
