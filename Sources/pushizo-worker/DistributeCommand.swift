import DeliveryCore
import Foundation
import Postgres
import Worker

/// `pushizo-worker distribute [--json]`: the distribute step on a Citus coordinator (``CitusDistribution``;
/// docs/scale-out.md, "The distribute step"), after `migrate`, as the schema owner (`PUSHIZO_MIGRATE_DATABASE_URL`,
/// else `PUSHIZO_DATABASE_URL`). Prints one line per step (or one JSON object). Exit 0 done (or nothing left to do),
/// 1 the database failed (run again: each step finishes what an interrupted run left), 2 usage, 78 refused: no
/// Citus, not the coordinator, no active worker node, not the schema owner, the schema behind this release.
enum DistributeCommand {
    static let keys: [ConfigurationKey] = [
        .databaseURL, .databasePooler, .migrateDatabaseURL, .migrationsDirectory, .logLevel, .logFormat,
    ]

    static func main(environment: [String: String], arguments: [String]) throws {
        let json = arguments.contains("--json")
        let reader = try ConfigurationReader(environment: environment, arguments: arguments.filter { $0 != "--json" }, keys: keys)
        let key: ConfigurationKey = reader.string(.migrateDatabaseURL) != nil ? .migrateDatabaseURL : .databaseURL
        let databaseURL = try reader.requiredConnectionString(key)
        // The Citus forms ship beside the migrations, in their citus/ folder.
        let forms = try MigrationsLocation.resolve(reader).appendingPathComponent("citus")
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        let outcomes: [CitusDistribution.StepOutcome]
        do {
            let connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-distribute",
                poolerMode: PostgresPoolerMode(route.poolerMode))
            defer { connection.close() }
            // Citus, the coordinator and a worker node first: a worker node's database has no schema at all.
            try CitusDistribution.requireCoordinator(on: connection)
            try WorkerSchema.requireApplied(on: connection, key: key)
            outcomes = try CitusDistribution.run(on: connection, forms: forms)
        } catch let refusal as CitusDistribution.Refusal {
            throw ConfigurationError(key: key.name, problem: refusal.problem)
        } catch var error as PostgresError where error.sqlState == "42501" {
            let advice = "distribute runs as the schema owner: set PUSHIZO_MIGRATE_DATABASE_URL to it"
            error.hint = error.hint.map { "\($0); \(advice)" } ?? advice
            throw ConfigurationError(refusal: error, key: key) ?? error
        } catch let error as PostgresError {
            throw ConfigurationError(refusal: error, key: key) ?? error
        }
        if json {
            let steps = outcomes.map { outcome -> JSONValue in
                .object([
                    "step": .int(Int64(outcome.step)), "name": .string(outcome.name), "changed": .bool(outcome.changed),
                    "detail": .string(outcome.detail),
                ])
            }
            print(JSONValue.object(["steps": .array(steps), "changed": .bool(outcomes.contains(where: \.changed))]).jsonText)
        } else {
            for outcome in outcomes {
                print("step \(outcome.step) (\(outcome.name)): \(outcome.changed ? "" : "already done: ")\(outcome.detail)")
            }
        }
    }
}
