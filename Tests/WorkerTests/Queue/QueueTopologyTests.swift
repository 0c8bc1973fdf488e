import Foundation
import Postgres
import Testing
@testable import Worker

/// ``QueueTopology/read(on:)`` on one PostgreSQL without Citus: a single node, read from the catalog alone (the
/// cluster's forms: `CitusWorkerTests`).
@Suite("Queue topology on a single node")
struct QueueTopologyTests {
    @Test func aMigratedDatabaseWithoutCitusIsASingleNode() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                #expect(try QueueTopology.read(on: connection) == .singleNode)
                #expect(QueueTopology.singleNode.laneValues == nil)
                #expect(QueueTopology.lanes([0, 1, 136]).description == "Citus, 3 lanes")
            }
        }
    }
}
