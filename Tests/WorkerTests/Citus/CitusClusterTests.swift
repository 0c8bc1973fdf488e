import Foundation
import Postgres
import Testing

extension CitusSuites {
    /// The Citus cluster the tests run against (`scripts/citus-cluster.sh`): Citus on every node, the coordinator
    /// knowing both workers, and the claim's shape on a hash-distributed table — `FOR UPDATE SKIP LOCKED` runs only
    /// as a router query, one task on the one node that holds the distribution column's value (Citus documentation,
    /// "Router Executor" / "SELECT ... FOR UPDATE"), and is refused when the filter spans shards.
    @Suite struct CitusClusterTests {
        /// A table shaped like the queue's claim (`ClaimStore`): due rows of one app, oldest first, locked as taken.
        static let claimProbeTable = """
            CREATE TABLE claim_probe (
                app_id uuid NOT NULL,
                id bigint NOT NULL,
                priority smallint NOT NULL DEFAULT 0,
                run_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (app_id, id)
            )
            """

        static func claim(oneApp: Bool) -> String {
            """
            SELECT id FROM claim_probe
            WHERE \(oneApp ? "app_id = $1 AND " : "")run_at <= now()
            ORDER BY priority DESC, run_at
            LIMIT 10
            FOR UPDATE SKIP LOCKED
            """
        }

        @Test func citusIsOnTheCoordinatorAndEveryWorkerNode() async throws {
            let nodes = try [#require(CitusCluster.coordinatorURL)] + CitusCluster.workerURLs
            #expect(CitusCluster.workerURLs.count >= 2)
            for node in nodes {
                let version = try await onThread {
                    let connection = try PostgresConnection(connectionString: node, applicationName: "pushizo-test")
                    defer { connection.close() }
                    return try connection.query("SELECT extversion FROM pg_extension WHERE extname = 'citus'").first?["extversion"]
                }
                #expect(version != nil, "no citus extension on \(node)")
            }
        }

        @Test func theCoordinatorListsBothWorkersAsActive() async throws {
            let coordinatorURL = try #require(CitusCluster.coordinatorURL)
            let (listed, workers) = try await onThread {
                let coordinator = try PostgresConnection(connectionString: coordinatorURL, applicationName: "pushizo-test")
                defer { coordinator.close() }
                let listed = try coordinator.query("SELECT node_name, node_port FROM citus_get_active_worker_nodes()").map {
                    "\(try $0.decode(String.self, "node_name")):\(try $0.decode(Int.self, "node_port"))"
                }
                let workers = try CitusCluster.workerURLs.map { url in
                    let worker = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                    defer { worker.close() }
                    let row = try worker.query("SELECT host(inet_server_addr()) AS host, inet_server_port() AS port")[0]
                    return "\(try row.decode(String.self, "host")):\(try row.decode(Int.self, "port"))"
                }
                return (listed, workers)
            }
            #expect(Set(listed) == Set(workers))
            #expect(listed.count == workers.count)
        }

        @Test func aClaimFilteredOnTheDistributionColumnIsOneRouterTask() async throws {
            try await CitusCluster.withDatabase { database in
                let plan = try await onThread {
                    let connection = try PostgresConnection(
                        connectionString: database.coordinator, applicationName: "pushizo-test")
                    defer { connection.close() }
                    try connection.execute(Self.claimProbeTable)
                    _ = try connection.query("SELECT create_distributed_table('claim_probe', 'app_id')")
                    try connection.execute(
                        "INSERT INTO claim_probe (app_id, id) SELECT gen_random_uuid(), g FROM generate_series(1, 64) g")
                    let app = try connection.query("SELECT app_id FROM claim_probe LIMIT 1")[0].decode(UUID.self, "app_id")
                    // VERBOSE: the plan shows the statement sent to the shard, lock clause included.
                    return try connection.query("EXPLAIN (VERBOSE) " + Self.claim(oneApp: true), [app])
                        .compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
                }
                #expect(plan.contains("Custom Scan (Citus Adaptive)"), "\(plan)")
                #expect(plan.contains("Task Count: 1"), "\(plan)")
                #expect(plan.components(separatedBy: "->  Task\n").count == 2, "one task: \(plan)")
                #expect(plan.contains("FOR UPDATE OF claim_probe SKIP LOCKED"), "the lock reaches the shard: \(plan)")
            }
        }

        @Test func aClaimAcrossShardsIsRefused() async throws {
            try await CitusCluster.withDatabase { database in
                let refusal = try await onThread { () -> PostgresError? in
                    let connection = try PostgresConnection(
                        connectionString: database.coordinator, applicationName: "pushizo-test")
                    defer { connection.close() }
                    try connection.execute(Self.claimProbeTable)
                    _ = try connection.query("SELECT create_distributed_table('claim_probe', 'app_id')")
                    do {
                        _ = try connection.query(Self.claim(oneApp: false))
                        return nil
                    } catch let error as PostgresError {
                        return error
                    }
                }
                let error = try #require(refusal, "Citus ran a FOR UPDATE claim across shards")
                #expect(error.sqlState == "0A000", "\(error)")
                #expect(error.message == "could not run distributed query with FOR UPDATE/SHARE commands", "\(error)")
            }
        }
    }
}
