import Foundation
import Postgres
import Testing

extension CitusSuites {
    /// Producers' idempotency keys on a distributed database (docs/producer-contract.md, "Idempotent inserts"; docs/
    /// scale-out.md, "Keys and constraints"): the key in `notification_idempotency_keys` and the notification in one
    /// transaction, so producers racing with one key make one notification, as on a single PostgreSQL.
    @Suite struct CitusIdempotencyKeysTests {
        typealias Produced = IdempotencyKeysTests.Produced

        /// The producer contract's form on Citus, in the caller's transaction: the key first; when it is new, the
        /// notification with the id it drew; when it is taken, the id it holds.
        static func produce(_ connection: PostgresConnection, app: UUID, key: String) throws -> Produced {
            if let row = try connection.query(
                """
                INSERT INTO notification_idempotency_keys (app_id, idempotency_key, notification_id)
                VALUES ($1, $2, gen_random_uuid())
                ON CONFLICT DO NOTHING
                RETURNING notification_id
                """, [app, key]
            ).first {
                let id = try row.decode(UUID.self, "notification_id")
                _ = try connection.query(
                    """
                    INSERT INTO notifications (id, app_id, message, target, idempotency_key)
                    VALUES ($1, $2, '{"contents": {"en": "Your order shipped"}}', '{"all": true}', $3)
                    """, [id, app, key])
                return Produced(id: id, inserted: true)
            }
            let existing = try #require(
                try connection.query(
                    "SELECT notification_id FROM notification_idempotency_keys WHERE app_id = $1 AND idempotency_key = $2",
                    [app, key]
                ).first)
            return Produced(id: try existing.decode(UUID.self, "notification_id"), inserted: false)
        }

        /// Eight producers at once, then four behind an uncommitted insert of the key that commits or rolls back:
        /// one notification per key. The four wait on the node that holds the key's shard.
        @Test func concurrentProducersOfOneKeyMakeOneNotification() async throws {
            try await CitusCluster.withDatabase { database in
                try await CitusSuites.CitusDistributeTests.migrate(database)
                _ = try await CitusSuites.CitusDistributeTests.distribute(database)
                let nodes = [database.coordinator] + database.workers
                try await IdempotencyKeysTests.raceProducersOfOneKey(url: database.coordinator, produce: { try Self.produce($0, app: $1, key: $2) }) { _ in
                    try nodes.reduce(0) { waiting, node in
                        let connection = try CitusSuites.CitusDesignFactsTests.connect(node)
                        defer { connection.close() }
                        return waiting + (try IdempotencyKeysTests.count(
                            connection,
                            """
                            SELECT count(*)::int AS n FROM pg_stat_activity
                            WHERE datname = current_database() AND wait_event_type = 'Lock'
                            """))
                    }
                }
            }
        }
    }
}
