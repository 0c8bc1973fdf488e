import Foundation
import Postgres
import SocketTestSupport
import Testing

extension CitusSuites {
    /// `pushizo-worker migrate` then `pushizo-worker distribute` on a fresh database of the cluster
    /// (docs/scale-out.md, "The distribute step"): every table in its documented Citus form, a second run that changes
    /// nothing, producers' inserts spread over every shard, a lane's claim that is one router task, and a database
    /// with subscriptions and queued deliveries distributed without losing a row.
    @Suite struct CitusDistributeTests {
        typealias Facts = CitusSuites.CitusDesignFactsTests

        /// docs/scale-out.md, "Every table": each hash-distributed table's distribution column and the table that
        /// starts its colocation group.
        static let hashDistributed: [String: (column: String, group: String)] = [
            "subscriptions": ("lane", "subscriptions"), "deliveries": ("lane", "subscriptions"),
            "delivery_pages": ("lane", "subscriptions"), "app_claim_turns": ("lane", "subscriptions"),
            "expansion_slices": ("lane", "subscriptions"), "delivery_events": ("lane", "subscriptions"),
            "notifications": ("id", "notifications"), "notification_event_counts": ("notification_id", "notifications"),
            "users": ("id", "users"), "frequency_cap_grants": ("cap_key", "frequency_cap_grants"),
            "app_send_buckets": ("app_id", "app_send_buckets"), "provider_tokens": ("fingerprint", "provider_tokens"),
            "fcm_project_buckets": ("project_id", "fcm_project_buckets"),
            "live_activity_channel_sends": ("notification_id", "notifications"),
            "notification_idempotency_keys": ("app_id", "notification_idempotency_keys"),
        ]
        static let referenceTables: Set = [
            "apps", "app_channels", "app_producers", "time_zone_names", "fleet_settings", "live_activity_channels",
        ]
        static let citusLocalTables: Set = ["queue_depth_samples", "worker_heartbeats", "operator_actions", "pushizo_schema_migrations"]

        /// What a second run must leave as it is: Citus's metadata and shards, and every constraint, trigger, policy
        /// and function of the schema by oid (a dropped and re-created one has a new oid).
        static let catalogSnapshot = """
            SELECT string_agg(x, E'\\n' ORDER BY x) AS snapshot FROM (
                SELECT format('table %s %s %s %s', logicalrelid::regclass, partmethod, repmodel, colocationid) AS x
                FROM pg_dist_partition
                UNION ALL SELECT format('shard %s %s', shardid, logicalrelid::regclass) FROM pg_dist_shard
                UNION ALL SELECT format('constraint %s %s %s %s', oid, conrelid::regclass, conname, pg_get_constraintdef(oid))
                FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
                UNION ALL SELECT format('trigger %s %s %s', oid, tgrelid::regclass, tgname) FROM pg_trigger WHERE NOT tgisinternal
                UNION ALL SELECT format('policy %s %s %s', oid, polrelid::regclass, pg_get_expr(polqual, polrelid)) FROM pg_policy
                UNION ALL SELECT format('function %s %s %s', oid, proname, prosrc) FROM pg_proc WHERE proname LIKE 'pushizo%'
            ) s
            """

        static func command(_ verb: String, _ database: CitusCluster.Database, json: Bool = false) async throws
            -> (status: Int32, stdout: String, stderr: String)
        {
            try await runExecutable(
                [verb] + (json ? ["--json"] : []),
                environment: [
                    "PUSHIZO_DATABASE_URL": database.coordinator,
                    "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
                ])
        }

        static func migrate(_ database: CitusCluster.Database) async throws {
            let migrated = try await command("migrate", database)
            try #require(migrated.status == 0, "\(migrated.stderr)")
        }

        static func distribute(_ database: CitusCluster.Database) async throws -> String {
            let distributed = try await command("distribute", database, json: true)
            try #require(distributed.status == 0, "\(distributed.stderr)")
            return distributed.stdout
        }

        static func onCoordinator<T: Sendable>(
            _ database: CitusCluster.Database, _ body: @escaping @Sendable (PostgresConnection) throws -> T
        ) async throws -> T {
            try await onThread {
                let connection = try Facts.connect(database.coordinator)
                defer { connection.close() }
                return try body(connection)
            }
        }

        /// Each table of Citus's metadata: name, method, replication model, colocation group, distribution column.
        static func metadataTables(on connection: PostgresConnection) throws -> [(String, String, String, Int, String?)] {
            try connection.query(
                """
                SELECT logicalrelid::regclass::text AS name, partmethod::text AS method, repmodel::text AS model,
                       colocationid AS grp,
                       CASE WHEN partmethod = 'h' THEN column_to_column_name(logicalrelid, partkey) END AS col
                FROM pg_dist_partition
                """
            ).map {
                (try $0.decode(String.self, "name"), try $0.decode(String.self, "method"),
                 try $0.decode(String.self, "model"), try $0.decode(Int.self, "grp"), $0["col"])
            }
        }

        /// Every table of the schema in its documented form (docs/scale-out.md, "Every table"), the event partitions
        /// with their parent.
        static func expectEveryTableInItsForm(_ tables: [(String, String, String, Int, String?)]) {
            let byName = Dictionary(tables.map { ($0.0, $0) }, uniquingKeysWith: { first, _ in first })
            for (table, form) in Self.hashDistributed {
                guard let row = byName[table] else {
                    Issue.record("\(table) is not distributed")
                    continue
                }
                #expect(row.1 == "h" && row.4 == form.column, "\(table): \(row)")
                #expect(row.3 == byName[form.group]?.3, "\(table) is not colocated with \(form.group)")
            }
            #expect(byName["deliveries"]?.3 != byName["notifications"]?.3)
            for table in Self.referenceTables {
                #expect(byName[table].map { $0.1 == "n" && $0.2 == "t" } == true, "\(table): \(String(describing: byName[table]))")
            }
            for table in Self.citusLocalTables {
                #expect(byName[table].map { $0.1 == "n" && $0.2 == "s" } == true, "\(table): \(String(describing: byName[table]))")
            }
            let partitions = tables.filter { $0.0.hasPrefix("delivery_events_") }
            #expect(!partitions.isEmpty)
            #expect(partitions.allSatisfy { $0.1 == "h" && $0.3 == byName["subscriptions"]?.3 })
        }

        @Test func migrateAndDistributePutEveryTableInItsDocumentedFormAndASecondRunChangesNothing() async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                let first = try await Self.distribute(database)
                #expect(first.contains("\"changed\":true"), "\(first)")
                let (tables, lane, before) = try await Self.onCoordinator(database) { connection in
                    let tables = try Self.metadataTables(on: connection)
                    let lane = try connection.query("SELECT prosrc FROM pg_proc WHERE proname = 'pushizo_lane'")[0]["prosrc"]
                    let snapshot = try connection.query(Self.catalogSnapshot)[0]["snapshot"]
                    return (tables, lane, snapshot)
                }
                Self.expectEveryTableInItsForm(tables)
                #expect(lane?.contains("{0,1,2,3,4,5,6,8,") == true, "\(lane ?? "")")

                let second = try await Self.distribute(database)
                #expect(second.contains("\"changed\":false"), "\(second)")
                let after = try await Self.onCoordinator(database) { try $0.query(Self.catalogSnapshot)[0]["snapshot"] }
                #expect(after == before)
            }
        }

        /// Producers insert subscriptions as on a single node; each row's lane comes from the default on the
        /// coordinator, so a multi-row `VALUES` and an `INSERT .. SELECT` each reach every shard, every row in the
        /// shard its lane hashes to.
        @Test func aProducersMultiRowInsertOfSubscriptionsLandsInEveryShard() async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                _ = try await Self.distribute(database)
                try await Self.onCoordinator(database) { connection in
                    let app = UUID()
                    _ = try connection.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    let values = (1...400).map { "($1, 'android', 'token-\($0)')" }.joined(separator: ", ")
                    _ = try connection.query("INSERT INTO subscriptions (app_id, platform, token) VALUES \(values)", [app])
                    _ = try connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token)
                        SELECT $1, 'ios', 'select-' || g FROM generate_series(1, 1600) g
                        """, [app])
                    #expect(try connection.query("SELECT count(*)::integer AS n FROM subscriptions")[0].decode(Int.self, "n") == 2000)
                    #expect(try Facts.misplacedLanes(in: "subscriptions", on: connection) == 0)
                    let spread = try Facts.shardsWithRows(in: "subscriptions", on: connection)
                    #expect(spread.filled == spread.shards, "rows in \(spread.filled) of \(spread.shards) shards")
                }
            }
        }

        /// The single-node claim's shape with `lane = $1`, on the distributed schema's own `deliveries`,
        /// `app_claim_turns` and `apps`: one router task, its row locks on the shard.
        @Test func aClaimOfOneLaneOnTheDistributedSchemaIsOneRouterTask() async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                _ = try await Self.distribute(database)
                let plan = try await Self.onCoordinator(database) { connection in
                    let claim = Facts.laneClaim(queue: "deliveries", turns: "app_claim_turns", apps: "apps")
                    return try connection.query("EXPLAIN (COSTS OFF) " + claim, [7]).compactMap { $0["QUERY PLAN"] }
                        .joined(separator: "\n")
                }
                #expect(plan.hasPrefix("Custom Scan (Citus Adaptive)"), "\(plan)")
                #expect(plan.contains("Task Count: 1"), "\(plan)")
                #expect(plan.contains("LockRows"), "\(plan)")
            }
        }

        /// A database that already holds subscriptions, queued deliveries and events: every row is kept, the
        /// subscriptions are spread over the lanes, each delivery is in its subscription's lane (the colocated join
        /// finds them all), and each (lane, app) with queued deliveries has its claim turn.
        @Test func distributeKeepsEveryRowOfADatabaseWithSubscriptionsAndQueuedDeliveries() async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                let app = UUID()
                let notification = UUID()
                let counts = """
                    SELECT (SELECT count(*)::integer FROM subscriptions) AS subscriptions,
                           (SELECT count(*)::integer FROM deliveries) AS deliveries,
                           (SELECT count(*)::integer FROM delivery_events) AS events,
                           (SELECT count(*)::integer FROM notifications) AS notifications,
                           (SELECT count(*)::integer FROM apps) AS apps
                    """
                @Sendable func decoded(_ row: PostgresRow) throws -> [Int] {
                    try ["subscriptions", "deliveries", "events", "notifications", "apps"].map { try row.decode(Int.self, $0) }
                }
                let before = try await Self.onCoordinator(database) { connection in
                    _ = try connection.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    _ = try connection.query(
                        "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 't' || g FROM generate_series(1, 600) g",
                        [app])
                    _ = try connection.query(
                        "INSERT INTO notifications (id, app_id, message, target) VALUES ($1, $2, '{\"contents\": {\"en\": \"x\"}}', '{\"all\": true}')",
                        [notification, app])
                    _ = try connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id)
                        SELECT $1, id, app_id FROM subscriptions ORDER BY id LIMIT 450
                        """, [notification])
                    _ = try connection.query(
                        """
                        INSERT INTO delivery_events (app_id, notification_id, subscription_id, event)
                        SELECT app_id, $1, id, 'received' FROM subscriptions ORDER BY id DESC LIMIT 100
                        """, [notification])
                    return try decoded(try connection.query(counts)[0])
                }
                #expect(before == [600, 450, 100, 1, 1])
                let report = try await Self.distribute(database)
                #expect(report.contains("600 subscriptions spread over the lanes"), "\(report)")
                try await Self.onCoordinator(database) { connection in
                    #expect(try decoded(try connection.query(counts)[0]) == before)
                    let joined = try connection.query(
                        """
                        SELECT count(*)::integer AS n FROM deliveries d
                        JOIN subscriptions s ON s.lane = d.lane AND s.id = d.subscription_id
                        """)[0].decode(Int.self, "n")
                    #expect(joined == 450)
                    #expect(try Facts.misplacedLanes(in: "subscriptions", on: connection) == 0)
                    #expect(try Facts.misplacedLanes(in: "deliveries", on: connection) == 0)
                    let spread = try Facts.shardsWithRows(in: "subscriptions", on: connection)
                    #expect(spread.filled > spread.shards / 2, "rows in \(spread.filled) of \(spread.shards) shards")
                    let turns = try connection.query(
                        """
                        SELECT (SELECT count(DISTINCT lane)::integer FROM deliveries) AS lanes,
                               (SELECT count(*)::integer FROM app_claim_turns t
                                WHERE EXISTS (SELECT FROM deliveries d WHERE d.lane = t.lane AND d.app_id = t.app_id)) AS turns
                        """)[0]
                    #expect(try turns.decode(Int.self, "turns") == turns.decode(Int.self, "lanes"))
                }
            }
        }

        /// The producers' policies in their Citus form: a producer login mapped to one app (`app_producers`, row-level
        /// security on) writes and reads that app's subscriptions on the distributed table, whichever shard they land
        /// in, and is refused another app's, from the role setting step 1 wrote. Its `INSERT .. SELECT` is refused
        /// under row-level security (Citus writes the pulled rows with COPY).
        @Test func aProducerWritesAndReadsOnlyItsAppsRowsOnTheDistributedTables() async throws {
            try await Self.withProducerName { producer in try await Self.producerWritesOnlyItsApps(producer) }
        }

        /// A name for a producer login the body creates, and the role dropped on every node afterwards (a role
        /// belongs to the cluster, not to the test's database).
        static func withProducerName(_ body: @Sendable (String) async throws -> Void) async throws {
            let producer = "producer_" + UUID().uuidString.prefix(8).lowercased()
            let nodes = try [#require(CitusCluster.coordinatorURL)] + CitusCluster.workerURLs
            defer {
                _ = try? onSocketThreadSync {
                    for node in nodes {
                        let admin = try Facts.connect(node)
                        defer { admin.close() }
                        try admin.execute("DROP ROLE IF EXISTS \(producer)")
                    }
                }
            }
            try await body(producer)
        }

        static func producerWritesOnlyItsApps(_ producer: String) async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                let (mine, theirs) = (UUID(), UUID())
                try await Self.onCoordinator(database) { connection in
                    try connection.execute("CREATE ROLE \(producer) LOGIN IN ROLE pushizo_producer")
                    _ = try connection.query("INSERT INTO apps (id) VALUES ($1), ($2)", [mine, theirs])
                    _ = try connection.query("INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, mine])
                    _ = try connection.query("SELECT pushizo_set_producer_row_security(true)")
                }
                _ = try await Self.distribute(database)
                let (seen, refusal, copied) = try await onThread { () -> (Int, PostgresError?, PostgresError?) in
                    let connection = try Facts.connect(database.coordinator + " user=\(producer)")
                    defer { connection.close() }
                    let values = (1...64).map { "($1, 'ios', 'p\($0)')" }.joined(separator: ", ")
                    _ = try connection.query("INSERT INTO subscriptions (app_id, platform, token) VALUES \(values)", [mine])
                    let refusal = Facts.failure(
                        of: "INSERT INTO subscriptions (app_id, platform, token) VALUES ($1, 'ios', 'x')", [theirs], on: connection)
                    // Citus writes the rows an INSERT .. SELECT pulled to the coordinator with COPY, which it refuses
                    // under row-level security: a producer with security on inserts rows as VALUES.
                    let copied = Facts.failure(
                        of: "INSERT INTO subscriptions (app_id, platform, token) SELECT $1, 'ios', 's' || g FROM generate_series(1, 4) g",
                        [mine], on: connection)
                    let seen = try connection.query("SELECT count(*)::integer AS n FROM subscriptions")[0].decode(Int.self, "n")
                    return (seen, refusal, copied)
                }
                #expect(seen == 64)
                #expect(refusal?.sqlState == "42501", "\(String(describing: refusal))")
                #expect(copied?.sqlState == "0A000", "\(String(describing: copied))")
                #expect(copied?.message == "COPY FROM not supported with row-level security", "\(String(describing: copied))")
            }
        }

        /// The tables of the idempotency keys, FCM project quotas and Live Activity channels on the distributed
        /// schema (docs/scale-out.md, "Every table", "Limits"): the key keeps a lookup index, not unique, so a
        /// producer's `ON CONFLICT (app_id, idempotency_key)` is refused (42P10: no unique index matches it) rather
        /// than inserting as if keys were unique; a channel row and its send are written and read through the
        /// coordinator, and deleting the notification deletes its colocated send.
        @Test func theIdempotencyKeyQuotaAndLiveActivityTablesWorkInTheirCitusForms() async throws {
            try await CitusCluster.withDatabase { database in
                try await Self.migrate(database)
                _ = try await Self.distribute(database)
                let app = UUID()
                let (indexes, conflict, keyed, sends) = try await Self.onCoordinator(database) { connection in
                    let indexes = try connection.query(
                        """
                        SELECT c.relname::text AS name, i.indisunique AS is_unique FROM pg_index i
                        JOIN pg_class c ON c.oid = i.indexrelid
                        WHERE i.indrelid = 'notifications'::regclass AND c.relname LIKE 'notifications_idempotency_key%'
                        ORDER BY 1
                        """).map { "\($0["name"] ?? "") unique=\($0["is_unique"] ?? "")" }
                    _ = try connection.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    let conflict = Facts.failure(
                        of: """
                            INSERT INTO notifications (app_id, message, target, idempotency_key)
                            VALUES ($1, '{}', '{"all": true}', 'retry-1')
                            ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
                            """, [app], on: connection)
                    let notification = try connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, idempotency_key, send_after)
                        VALUES ($1, '{}', '{"live_activity_channel": "match"}', 'retry-1', 'infinity') RETURNING id
                        """, [app])[0].decode(UUID.self, "id")
                    let keyed = try connection.query(
                        "SELECT id FROM notifications WHERE app_id = $1 AND idempotency_key = 'retry-1'", [app]
                    ).map { try $0.decode(UUID.self, "id") }
                    _ = try connection.query("INSERT INTO live_activity_channels (app_id, name) VALUES ($1, 'match')", [app])
                    _ = try connection.query(
                        "INSERT INTO live_activity_channel_sends (notification_id, app_id, channel_name) VALUES ($1, $2, 'match')",
                        [notification, app])
                    _ = try connection.query(
                        "INSERT INTO fcm_project_buckets (project_id, per_minute, tokens, refilled_at) VALUES ('pushizo-citus', 600, 600, now())")
                    let joined = try connection.query(
                        """
                        SELECT count(*)::integer AS n FROM live_activity_channel_sends s
                        JOIN live_activity_channels c ON c.app_id = s.app_id AND c.name = s.channel_name
                        WHERE s.notification_id = $1
                        """, [notification])[0].decode(Int.self, "n")
                    _ = try connection.query("DELETE FROM notifications WHERE id = $1", [notification])
                    let left = try connection.query(
                        "SELECT count(*)::integer AS n FROM live_activity_channel_sends")[0].decode(Int.self, "n")
                    return (indexes, conflict, keyed, (joined, left))
                }
                #expect(indexes == ["notifications_idempotency_key_age unique=f", "notifications_idempotency_key_lookup unique=f"])
                #expect(conflict?.sqlState == "42P10", "\(String(describing: conflict))")
                #expect(keyed.count == 1)
                // One send joined to its channel, none left after its notification's delete.
                #expect(sends.0 == 1 && sends.1 == 0, "\(sends)")
            }
        }

        /// Refused off the coordinator (exit 78, naming it): a worker node of the cluster.
        @Test func distributeIsRefusedOnAWorkerNode() async throws {
            try await CitusCluster.withDatabase { database in
                let refused = try await runExecutable(
                    ["distribute"],
                    environment: [
                        "PUSHIZO_DATABASE_URL": database.workers[0],
                        "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
                    ])
                #expect(refused.status == 78, "\(refused.stderr)")
                #expect(refused.stderr.contains("not the Citus coordinator"), "\(refused.stderr)")
            }
        }

        /// Refused without Citus (exit 78, naming it): a plain PostgreSQL database.
        @Test func distributeIsRefusedWithoutCitus() async throws {
            try await TestDatabase.withMigratedDatabase { url in
                let refused = try await runExecutable(
                    ["distribute"],
                    environment: ["PUSHIZO_DATABASE_URL": url, "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path])
                #expect(refused.status == 78, "\(refused.stderr)")
                #expect(refused.stderr.contains("citus extension is not installed"), "\(refused.stderr)")
            }
        }
    }
}
