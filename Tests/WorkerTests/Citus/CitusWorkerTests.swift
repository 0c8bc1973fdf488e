import Foundation
import Postgres
import Testing
@testable import Worker

extension CitusSuites {
    /// The worker against a database of the cluster (docs/scale-out.md, "The hot statements"): the queue's form read
    /// from the catalog at start-up.
    @Suite struct CitusWorkerTests {
        typealias Distribute = CitusSuites.CitusDistributeTests

        /// Migrated only, the queue is a single node's even with the citus extension present; distributed, it is
        /// one lane per shard of `deliveries`, exactly the representatives the distribute step wrote into
        /// `pushizo_lane()`, each naming a shard of its own.
        @Test func theTopologyIsReadFromTheCatalogOneLanePerShard() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                #expect(try await Distribute.onCoordinator(database) { try QueueTopology.read(on: $0) } == .singleNode)
                _ = try await Distribute.distribute(database)
                let (topology, drawn, shards) = try await Distribute.onCoordinator(database) { connection in
                    let topology = try QueueTopology.read(on: connection)
                    let body = try connection.query("SELECT prosrc FROM pg_proc WHERE proname = 'pushizo_lane'")[0]
                        .decode(String.self, "prosrc")
                    let drawn = try #require(body.firstRange(of: #/\{[0-9,]+\}/#).map { body[$0] })
                        .dropFirst().dropLast().split(separator: ",").compactMap { Int32($0) }
                    let shards = try connection.query(
                        """
                        SELECT count(DISTINCT get_shard_id_for_distribution_column('deliveries', lane)) AS shards,
                               (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'deliveries'::regclass) AS total
                        FROM unnest($1::integer[]) AS lane
                        """, [topology.laneValues ?? []])[0]
                    return (
                        topology, drawn,
                        (distinct: try shards.decode(Int.self, "shards"), total: try shards.decode(Int.self, "total"))
                    )
                }
                let lanes = try #require(topology.laneValues)
                #expect(lanes == drawn.sorted())
                #expect(lanes.count == shards.total && shards.distinct == shards.total)
            }
        }

        /// `run` against a distributed database reads the form at start-up and, while the claim and expansion
        /// statements are a single node's only, refuses it with exit 78 naming the distribution before it claims
        /// anything (today's worker would start and fail every claim).
        @Test func runRefusesADistributedQueueAtStartUp() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                let outcome = try await DatabaseStartEndToEndTests.run(["run"], databaseURL: database.coordinator)
                #expect(outcome.status == 78, "\(outcome.stderr)")
                #expect(outcome.stderr.contains("PUSHIZO_DATABASE_URL"), "\(outcome.stderr)")
                #expect(outcome.stderr.contains("distributed by Citus (32 lanes)"), "\(outcome.stderr)")
            }
        }
    }
}
