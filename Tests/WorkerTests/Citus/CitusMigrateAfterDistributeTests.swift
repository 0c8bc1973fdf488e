import Foundation
import Postgres
import Testing
@testable import Worker

extension CitusSuites {
    /// `pushizo-worker migrate` on a database already distributed (docs/scale-out.md, "Migrations on a distributed
    /// database"): a database distributed at the release before the last migration takes that migration (its
    /// `pushizo_apply_roles()` writes the producers' policies in their Citus form), `migrate` runs the distribute step
    /// itself, so the migration's table is distributed, and `distribute` run again finds nothing to do.
    @Suite struct CitusMigrateAfterDistributeTests {
        typealias Facts = CitusSuites.CitusDesignFactsTests
        typealias Distribute = CitusSuites.CitusDistributeTests

        /// A folder holding the migrations before the one that adds the keys' table (0037), and that one's name:
        /// the schema a distributed database had before it, to which `migrate` then applies 0037 and every later
        /// migration.
        static func migrationsBeforeTheKeysTable() throws -> (folder: URL, last: String) {
            let source = TestDatabase.migrationsDirectory
            let files = try FileManager.default.contentsOfDirectory(atPath: source.path).filter { $0.hasSuffix(".sql") }.sorted()
            let last = try #require(files.first { $0.hasPrefix("0037") })
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-migrations-" + UUID().uuidString)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for file in files where file < last {
                try FileManager.default.copyItem(at: source.appendingPathComponent(file), to: folder.appendingPathComponent(file))
            }
            return (folder, last)
        }

        @Test func aMigrationAfterDistributeAppliesAndItsTablesTakeTheirCitusForms() async throws {
            try await Distribute.withProducerName { producer in try await Self.migrateAfterDistribute(producer) }
        }

        static func migrateAfterDistribute(_ producer: String) async throws {
            let (earlier, last) = try Self.migrationsBeforeTheKeysTable()
            defer { try? FileManager.default.removeItem(at: earlier) }
            try await CitusCluster.withDatabase { database in
                let (mine, theirs) = (UUID(), UUID())
                let keysBefore = try await Distribute.onCoordinator(database) { connection in
                    _ = try PostgresMigrator(directory: earlier).migrate(on: connection)
                    try connection.execute("CREATE ROLE \(producer) LOGIN IN ROLE pushizo_producer")
                    _ = try connection.query("INSERT INTO apps (id) VALUES ($1), ($2)", [mine, theirs])
                    _ = try connection.query("INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, mine])
                    _ = try connection.query("SELECT pushizo_set_producer_row_security(true)")
                    // A producer's keyed notification of the release before, to be copied into the keys' table.
                    _ = try connection.query(
                        "INSERT INTO notifications (app_id, message, target, idempotency_key) VALUES ($1, '{}', '{\"all\": true}', 'before')",
                        [mine])
                    _ = try CitusDistribution.run(
                        on: connection, forms: TestDatabase.migrationsDirectory.appendingPathComponent("citus"))
                    return try connection.query("SELECT to_regclass('notification_idempotency_keys') IS NOT NULL AS present")[0]
                        .decode(Bool.self, "present")
                }
                // Before 0037 the keys' table does not exist.
                #expect(last.hasPrefix("0037") && !keysBefore, "\(last)")

                let migrated = try await Distribute.command("migrate", database)
                #expect(migrated.status == 0, "\(migrated.stderr)")
                #expect(migrated.stderr.contains("notification_idempotency_keys"), "\(migrated.stderr)")
                let again = try await Distribute.distribute(database)
                #expect(again.contains("\"changed\":false"), "\(again)")

                let (tables, subqueryPolicies, copied) = try await Distribute.onCoordinator(database) { connection in
                    let tables = try Distribute.metadataTables(on: connection)
                    let subqueries = try connection.query(
                        """
                        SELECT string_agg(polrelid::regclass::text, ',' ORDER BY 1) AS tables FROM pg_policy
                        WHERE pg_get_expr(polqual, polrelid) LIKE '%app_producers%'
                        """)[0]["tables"]
                    let copied = try connection.query(
                        "SELECT idempotency_key FROM notification_idempotency_keys WHERE app_id = $1", [mine]
                    ).map { $0["idempotency_key"] ?? "" }
                    return (tables, subqueries, copied)
                }
                Distribute.expectEveryTableInItsForm(tables)
                #expect(subqueryPolicies == nil, "policies with a subquery on \(subqueryPolicies ?? "")")
                #expect(copied == ["before"])

                // The producer's keys, through the policy the migration made in its Citus form.
                let (inserted, refusal) = try await onThread { () -> (Int, PostgresError?) in
                    let connection = try Facts.connect(database.coordinator + " user=\(producer)")
                    defer { connection.close() }
                    let inserted = try connection.query(
                        """
                        INSERT INTO notification_idempotency_keys (app_id, idempotency_key, notification_id)
                        VALUES ($1, 'after', gen_random_uuid()) ON CONFLICT DO NOTHING RETURNING notification_id
                        """, [mine]).count
                    let refusal = Facts.failure(
                        of: """
                            INSERT INTO notification_idempotency_keys (app_id, idempotency_key, notification_id)
                            VALUES ($1, 'after', gen_random_uuid())
                            """, [theirs], on: connection)
                    return (inserted, refusal)
                }
                #expect(inserted == 1)
                #expect(refusal?.sqlState == "42501", "\(String(describing: refusal))")
            }
        }
    }
}
