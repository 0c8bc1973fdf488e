import DeliveryCore
import Foundation
import Postgres

/// The distribute step (docs/scale-out.md, "The distribute step"): switches a migrated database on a Citus coordinator
/// to the Citus form of the schema, in seven steps run in order. Each step reads the catalog first (`pg_trigger`,
/// `pg_constraint`, `pg_dist_partition`, `pg_dist_object`) and does only what is missing, so a second run does nothing
/// and a run interrupted anywhere is finished by the next. Steps 1, 2 and 7 are the SQL files of `citus/` beside the
/// migrations (`1_citus_forms.sql`, `2_keys.sql`, `7_app_keys.sql`), each run in one transaction; step 3
/// (`3_lane_function.sql`) replaces `pushizo_lane()` only when its body differs.
public enum CitusDistribution {
    /// Why the step does not start: what is wrong, for the operator (`pushizo-worker distribute` exits 78 with it).
    public struct Refusal: Error, CustomStringConvertible, Sendable {
        public let problem: String
        public var description: String { problem }
    }

    /// What one step did: `changed` false when the catalog showed it done; `detail` says what it wrote.
    public struct StepOutcome: Sendable, Equatable {
        public let step: Int
        public let name: String
        public let changed: Bool
        public let detail: String
    }

    /// A hash-distributed table: its distribution column and the table whose colocation group it joins (nil: it
    /// starts a group).
    public struct DistributedTable: Sendable, Equatable {
        public let table: String
        public let column: String
        public let colocateWith: String?
    }

    /// Reference tables (copied whole to every node), in the order they are made (docs/scale-out.md, "Every table").
    public static let referenceTables = [
        "apps", "app_channels", "app_producers", "time_zone_names", "fleet_settings", "live_activity_channels",
    ]

    /// Hash-distributed tables in colocation order: the lanes' group first (`subscriptions` by `lane`), then the
    /// notifications' group, then the tables alone in theirs.
    public static let distributedTables: [DistributedTable] = [
        .init(table: "subscriptions", column: "lane", colocateWith: nil),
        .init(table: "deliveries", column: "lane", colocateWith: "subscriptions"),
        .init(table: "delivery_pages", column: "lane", colocateWith: "subscriptions"),
        .init(table: "app_claim_turns", column: "lane", colocateWith: "subscriptions"),
        .init(table: "expansion_slices", column: "lane", colocateWith: "subscriptions"),
        .init(table: "delivery_events", column: "lane", colocateWith: "subscriptions"),
        .init(table: "notifications", column: "id", colocateWith: nil),
        .init(table: "notification_event_counts", column: "notification_id", colocateWith: "notifications"),
        .init(table: "live_activity_channel_sends", column: "notification_id", colocateWith: "notifications"),
        .init(table: "users", column: "id", colocateWith: nil),
        .init(table: "frequency_cap_grants", column: "cap_key", colocateWith: nil),
        .init(table: "app_send_buckets", column: "app_id", colocateWith: nil),
        .init(table: "provider_tokens", column: "fingerprint", colocateWith: nil),
        .init(table: "fcm_project_buckets", column: "project_id", colocateWith: nil),
        .init(table: "notification_idempotency_keys", column: "app_id", colocateWith: nil),
    ]

    /// Tables left on the coordinator but known to the metadata, so every node routes a statement on them there.
    public static let citusLocalTables = ["queue_depth_samples", "worker_heartbeats", "operator_actions", "pushizo_schema_migrations"]

    /// The frequency-cap reservation, delegated to the node of its key's shard.
    static let reservation = "pushizo_reserve_frequency_cap(uuid, uuid, uuid, integer[], integer[], integer)"

    /// Subscriptions spread per statement in step 4.
    static let spreadBatch = 10_000

    /// Refuses unless the `citus` extension is installed, this is the coordinator, at least one worker node is
    /// active, the session's role owns the schema's tables, and the migrations gave the schema its lanes.
    /// - Throws: ``Refusal`` naming what is wrong.
    public static func requireCoordinator(on connection: PostgresConnection) throws {
        let extensions = try connection.query("SELECT count(*)::integer AS n FROM pg_extension WHERE extname = 'citus'")
        guard try extensions[0].decode(Int.self, "n") == 1 else {
            throw Refusal(problem: "the citus extension is not installed in this database (CREATE EXTENSION citus)")
        }
        let node = try connection.query(
            """
            SELECT citus_is_coordinator() AS coordinator,
                   (SELECT count(*)::integer FROM citus_get_active_worker_nodes()) AS workers,
                   to_regprocedure('pushizo_lane()') IS NOT NULL AS lanes,
                   coalesce((SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c
                             WHERE c.oid = to_regclass('deliveries')), false) AS owner
            """)[0]
        guard try node.decode(Bool.self, "coordinator") else {
            throw Refusal(problem: "this server is not the Citus coordinator: run distribute on the coordinator")
        }
        guard try node.decode(Int.self, "workers") > 0 else {
            throw Refusal(problem: "the coordinator has no active worker node (citus_get_active_worker_nodes())")
        }
        guard try node.decode(Bool.self, "lanes") else {
            throw Refusal(problem: "the schema has no queue lanes (pushizo_lane()): run `pushizo-worker migrate` first")
        }
        guard try node.decode(Bool.self, "owner") else {
            throw Refusal(problem: "the session's role does not own the schema's tables: run distribute as the schema owner")
        }
    }

    /// Whether the session's role owns the schema's tables (`deliveries`), as the distribute step needs.
    public static func sessionOwnsSchema(on connection: PostgresConnection) throws -> Bool {
        try flag(
            """
            SELECT coalesce((SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c
                             WHERE c.oid = to_regclass('deliveries')), false) AS flag
            """, on: connection)
    }

    /// Runs the seven steps in order on `connection` (the coordinator, as the schema owner), with the SQL files of
    /// `forms` (the `citus/` folder beside the migrations).
    /// - Returns: one outcome per step, in order.
    public static func run(on connection: PostgresConnection, forms: URL) throws -> [StepOutcome] {
        try requireCoordinator(on: connection)
        func file(_ name: String) throws -> [String] {
            let url = forms.appendingPathComponent(name)
            guard let text = try? String(contentsOf: url, encoding: .utf8) else {
                throw Refusal(problem: "\(url.path) cannot be read: the Citus forms ship beside the migrations, in citus/")
            }
            return SQLStatements.split(text)
        }
        // Read before any step: the files are the release's, and a missing one stops the run before it changes anything.
        let forms1 = try file("1_citus_forms.sql")
        let keys2 = try file("2_keys.sql")
        let lane3 = try file("3_lane_function.sql")
        let keys7 = try file("7_app_keys.sql")
        // Tables with triggers are distributed, and their triggers then run on the shards (docs/scale-out.md,
        // "Triggers and functions").
        try connection.execute("SET citus.enable_unsafe_triggers = on")
        var outcomes: [StepOutcome] = []

        let formsDone = try flag(
            """
            SELECT NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'deliveries'::regclass AND tgname = 'deliveries_inserted')
               AND EXISTS (SELECT FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                           WHERE t.tgrelid = 'subscriptions'::regclass AND t.tgname = 'subscriptions_deleted'
                             AND p.proname = 'pushizo_subscription_deleted_row')
            """, on: connection)
        if !formsDone { try transaction(forms1, on: connection) }
        outcomes.append(.init(
            step: 1, name: "triggers, functions and policies", changed: !formsDone,
            detail: formsDone ? "in their Citus forms" : "replaced with their Citus forms; producers' app settings written"))

        let keysDone = try flag(
            """
            SELECT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND conname = 'deliveries_pkey'
                           AND cardinality(conkey) = 2)
            """, on: connection)
        if !keysDone { try transaction(keys2, on: connection) }
        outcomes.append(.init(
            step: 2, name: "keys", changed: !keysDone,
            detail: keysDone ? "keys include lane" : "keys widened to lane; foreign keys across groups and to apps dropped"))

        let before = try connection.query("SELECT prosrc FROM pg_proc WHERE oid = 'pushizo_lane()'::regprocedure")[0]["prosrc"]
        try transaction(lane3, on: connection)
        let after = try connection.query("SELECT prosrc FROM pg_proc WHERE oid = 'pushizo_lane()'::regprocedure")[0]["prosrc"]
        outcomes.append(.init(
            step: 3, name: "lane function", changed: before != after,
            detail: "pushizo_lane() draws one representative value per shard"))

        outcomes.append(try spreadRows(on: connection))

        var made: [String] = []
        for table in referenceTables where try exists(table, on: connection) && !isDistributed(table, on: connection) {
            try distribute(table, "SELECT create_reference_table($1)", [table], on: connection)
            made.append(table)
        }
        outcomes.append(.init(
            step: 5, name: "reference tables", changed: !made.isEmpty,
            detail: made.isEmpty ? "all reference tables" : "made " + made.joined(separator: ", ")))

        made = []
        for table in distributedTables where try exists(table.table, on: connection) && !isDistributed(table.table, on: connection) {
            if table.table == "notification_idempotency_keys" { try copyIdempotencyKeys(on: connection) }
            if let group = table.colocateWith {
                try distribute(
                    table.table, "SELECT create_distributed_table($1, $2, colocate_with => $3)",
                    [table.table, table.column, group], on: connection)
            } else {
                try distribute(table.table, "SELECT create_distributed_table($1, $2)", [table.table, table.column], on: connection)
            }
            made.append(table.table)
        }
        for table in citusLocalTables where try exists(table, on: connection) && !isDistributed(table, on: connection) {
            _ = try connection.query("SELECT citus_add_local_table_to_metadata($1)", [table])
            made.append(table)
        }
        let delegated = try flag(
            """
            SELECT EXISTS (SELECT FROM pg_dist_object WHERE classid = 'pg_proc'::regclass
                           AND objid = '\(reservation)'::regprocedure AND distribution_argument_index IS NOT NULL)
            """, on: connection)
        if !delegated {
            _ = try connection.query(
                "SELECT create_distributed_function($1, distribution_arg_name => 'p_key', colocate_with => 'frequency_cap_grants')",
                [reservation])
            made.append("pushizo_reserve_frequency_cap()")
        }
        if !made.isEmpty, try flag("SELECT to_regprocedure('pushizo_apply_roles()') IS NOT NULL AS flag", on: connection) {
            // Citus gives a new shard its table's grants, but not column grants (a producer's INSERT on
            // notifications, notification_idempotency_keys): granted again on the distributed tables, they reach
            // every shard. Sequential: the grants reach reference tables after distributed ones.
            try transaction(
                ["SET LOCAL citus.multi_shard_modify_mode TO 'sequential'", "SELECT pushizo_apply_roles()"], on: connection)
        }
        outcomes.append(.init(
            step: 6, name: "distributed tables", changed: !made.isEmpty,
            detail: made.isEmpty ? "every table in its Citus form" : "distributed " + made.joined(separator: ", ")))

        let appKeysDone = try flag(
            """
            SELECT count(*) = 9 FROM pg_constraint WHERE contype = 'f' AND confrelid = 'apps'::regclass
               AND conname IN ('app_channels_app_id_fkey', 'app_producers_app_id_fkey', 'app_claim_turns_app_id_fkey',
                               'app_send_buckets_app_id_fkey', 'frequency_cap_grants_app_id_fkey',
                               'notifications_app_id_fkey', 'subscriptions_app_id_fkey', 'users_app_id_fkey',
                               'live_activity_channels_app_id_fkey')
               AND EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'live_activity_channel_sends'::regclass
                           AND conname = 'live_activity_channel_sends_notification_id_fkey')
            """, on: connection)
        if !appKeysDone {
            // Sequential: foreign keys to a reference table, added shard by shard, in one transaction with others.
            try transaction(["SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"] + keys7, on: connection)
        }
        outcomes.append(.init(
            step: 7, name: "foreign keys to apps", changed: !appKeysDone,
            detail: appKeysDone ? "in place" : "added again"))
        return outcomes
    }

    /// Step 4: existing subscriptions spread over the lanes, in batches by id, each batch's queued deliveries
    /// following their subscription's lane in the same statement; then any delivery inserted meanwhile from a
    /// subscription read before its move, and each (lane, app) with queued deliveries gets its claim turn. Only
    /// while `subscriptions` is still local (Citus refuses to update a distribution column). Rows already drawn
    /// lane 0 are drawn again by a run that finishes an interrupted one: either way each row is in one lane and its
    /// deliveries with it.
    static func spreadRows(on connection: PostgresConnection) throws -> StepOutcome {
        guard try !isDistributed("subscriptions", on: connection) else {
            return .init(step: 4, name: "existing rows", changed: false, detail: "subscriptions already distributed")
        }
        var cursor = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        var spread = 0
        var followed = 0
        while true {
            let row = try connection.query(
                """
                WITH batch AS (
                    SELECT id FROM subscriptions WHERE id > $1 ORDER BY id LIMIT $2
                ), spread AS (
                    UPDATE subscriptions s SET lane = pushizo_lane() FROM batch b
                    WHERE s.id = b.id AND s.lane = 0
                    RETURNING s.id, s.lane
                ), followed AS (
                    UPDATE deliveries d SET lane = x.lane FROM spread x
                    WHERE d.subscription_id = x.id AND d.lane <> x.lane
                    RETURNING 1
                )
                SELECT (SELECT id FROM batch ORDER BY id DESC LIMIT 1) AS last_id,
                       (SELECT count(*)::integer FROM spread) AS spread,
                       (SELECT count(*)::integer FROM followed) AS followed
                """, [cursor, spreadBatch])[0]
            spread += try row.decode(Int.self, "spread")
            followed += try row.decode(Int.self, "followed")
            guard let last = try row.decodeIfPresent(UUID.self, "last_id") else { break }
            cursor = last
        }
        let straggler = try connection.query(
            """
            WITH moved AS (
                UPDATE deliveries d SET lane = s.lane FROM subscriptions s
                WHERE s.id = d.subscription_id AND d.lane <> s.lane
                RETURNING 1
            )
            SELECT count(*)::integer AS n FROM moved
            """)[0]
        followed += try straggler.decode(Int.self, "n")
        let turns = try connection.query(
            """
            WITH due AS (
                INSERT INTO app_claim_turns (lane, app_id, turn_at)
                SELECT lane, app_id, min(run_at) FROM deliveries GROUP BY lane, app_id
                ON CONFLICT (lane, app_id) DO UPDATE SET turn_at = least(app_claim_turns.turn_at, excluded.turn_at)
                WHERE app_claim_turns.turn_at > excluded.turn_at
                RETURNING 1
            )
            SELECT count(*)::integer AS n FROM due
            """)[0].decode(Int.self, "n")
        return .init(
            step: 4, name: "existing rows", changed: spread + followed + turns > 0,
            detail: "\(spread) subscriptions spread over the lanes, \(followed) queued deliveries moved with them, "
                + "\(turns) claim turns")
    }

    /// Copies the producers' keys still in their window from `notifications.idempotency_key` into
    /// `notification_idempotency_keys` (migration 0037), before that table is distributed: the unique index of 0033
    /// went in step 2, so a key inserted twice since keeps its first notification (the oldest).
    static func copyIdempotencyKeys(on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            WITH keyed AS MATERIALIZED (
                SELECT app_id, idempotency_key, id, created_at FROM notifications
                WHERE idempotency_key IS NOT NULL AND created_at >= now() - make_interval(secs => $1::float8)
            )
            INSERT INTO notification_idempotency_keys (app_id, idempotency_key, notification_id, created_at)
            SELECT DISTINCT ON (app_id, idempotency_key) app_id, idempotency_key, id, created_at FROM keyed
            ORDER BY app_id, idempotency_key, created_at, id
            ON CONFLICT DO NOTHING
            """, [DataLifecycle.idempotencyKeyWindow.inSeconds])
    }

    /// Whether `table` exists: the lists name the tables of this release's migrations, and a database distributed
    /// before a later migration added one gets it distributed by the run after that migration.
    static func exists(_ table: String, on connection: PostgresConnection) throws -> Bool {
        try flag("SELECT to_regclass($1) IS NOT NULL AS flag", [table], on: connection)
    }

    /// Whether `table` is in Citus's metadata (distributed, reference or Citus local: `pg_dist_partition`).
    static func isDistributed(_ table: String, on connection: PostgresConnection) throws -> Bool {
        try flag("SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)) AS flag", [table], on: connection)
    }

    /// Distributes `table` with `call`; rows it held locally are copied into the shards, and the local copy Citus
    /// leaves behind is removed (`truncate_local_data_after_distributing_table`).
    static func distribute(
        _ table: String, _ call: String, _ parameters: [any PostgresEncodable], on connection: PostgresConnection
    ) throws {
        let hadRows = try flag("SELECT EXISTS (SELECT FROM \(quoted(table))) AS flag", on: connection)
        _ = try connection.query(call, parameters)
        if hadRows { _ = try connection.query("SELECT truncate_local_data_after_distributing_table($1)", [table]) }
    }

    static func quoted(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    static func flag(_ sql: String, _ parameters: [any PostgresEncodable] = [], on connection: PostgresConnection) throws -> Bool {
        try connection.query(sql, parameters)[0].decode(Bool.self, at: 0)
    }

    /// Runs `statements` one at a time (Citus propagates a DDL statement as its text, and refuses a text of several
    /// on the worker nodes) in one transaction: an interrupted step leaves nothing half done.
    static func transaction(_ statements: [String], on connection: PostgresConnection) throws {
        try connection.execute("BEGIN")
        do {
            for statement in statements { try connection.execute(statement) }
            try connection.execute("COMMIT")
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
    }
}
