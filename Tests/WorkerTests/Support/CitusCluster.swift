import Foundation
import Postgres
import SocketTestSupport
import Testing

/// The Citus cluster `make test` starts when Citus's source is beside the clone (`scripts/citus-build.sh`,
/// `scripts/citus-cluster.sh`): a coordinator (`PUSHIZO_TEST_CITUS_URL`) and its worker nodes
/// (`PUSHIZO_TEST_CITUS_WORKER_URLS`, comma-separated), each a libpq key/value connection string to the cluster's
/// own database, which every node has the citus extension in and the coordinator knows every worker in.
/// Neither is set when the source is absent: the Citus suites are then skipped.
enum CitusCluster {
    static var coordinatorURL: String? {
        ProcessInfo.processInfo.environment["PUSHIZO_TEST_CITUS_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    static var workerURLs: [String] {
        (ProcessInfo.processInfo.environment["PUSHIZO_TEST_CITUS_WORKER_URLS"] ?? "")
            .split(separator: ",").map(String.init)
    }

    /// Why the Citus suites are skipped, for `.enabled(if:)`.
    static let absence: Comment =
        "no Citus cluster (PUSHIZO_TEST_CITUS_URL): its source is not at ../shared/citus beside the clone"

    static var isAvailable: Bool { coordinatorURL != nil && !workerURLs.isEmpty }

    /// The coordinator's and workers' connection strings for a database of their own.
    struct Database: Sendable {
        let coordinator: String
        let workers: [String]
    }

    /// Creates a fresh database on every node with the citus extension in it, tells the coordinator where it and
    /// each worker listen (as `citus-cluster.sh` does for the cluster's own database), runs `body`, drops the
    /// database on every node afterwards. Citus keeps no cluster-wide catalog of databases: each database has
    /// its own node metadata, so another suite's tables and nodes never show in this one.
    static func withDatabase<T: Sendable>(_ body: @Sendable (Database) async throws -> T) async throws -> T {
        let coordinatorBase = try #require(coordinatorURL)
        let name = "c_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let database = Database(
            coordinator: coordinatorBase + " dbname=" + name, workers: workerURLs.map { $0 + " dbname=" + name })
        let nodes = [coordinatorBase] + workerURLs
        try await onThread {
            for node in nodes {
                let admin = try PostgresConnection(connectionString: node, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("CREATE DATABASE \(name)")
            }
            var addresses: [(host: String, port: Int)] = []
            for node in [database.coordinator] + database.workers {
                let connection = try PostgresConnection(connectionString: node, applicationName: "pushizo-test-admin")
                defer { connection.close() }
                try connection.execute("CREATE EXTENSION citus")
                // The address this node is reached at, as the server saw it: the coordinator registers the same.
                let row = try connection.query("SELECT host(inet_server_addr()) AS host, inet_server_port() AS port")[0]
                addresses.append((try row.decode(String.self, "host"), try row.decode(Int.self, "port")))
            }
            let coordinator = try PostgresConnection(
                connectionString: database.coordinator, applicationName: "pushizo-test-admin")
            defer { coordinator.close() }
            _ = try coordinator.query(
                "SELECT citus_set_coordinator_host($1, $2)", [addresses[0].host, addresses[0].port])
            for worker in addresses.dropFirst() {
                _ = try coordinator.query("SELECT citus_add_node($1, $2)", [worker.host, worker.port])
            }
        }
        defer {
            _ = try? onSocketThreadSync {
                for node in nodes {
                    let admin = try PostgresConnection(connectionString: node, applicationName: "pushizo-test-admin")
                    defer { admin.close() }
                    try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
                }
            }
        }
        return try await body(database)
    }
}
