import Foundation
import Postgres
import Testing

extension CitusSuites {
    /// The facts the Citus design rests on (docs/scale-out.md, "The facts it rests on"), each pinned on the real cluster
    /// (`scripts/citus-cluster.sh`: a coordinator and two worker nodes, `citus.shard_count` 32): how a volatile default
    /// on the distribution column routes rows, why queue lanes are one representative value per shard, that a claim
    /// in the single-node claim's shape with `lane = $1` is one router task, which triggers and which functions work
    /// inside statements on a distributed table, where a delegated function runs, where a trigger's `NOTIFY` is heard,
    /// and which row-level security policies Citus accepts. Each test makes its own uniquely named tables in the
    /// cluster's database and drops them.
    @Suite struct CitusDesignFactsTests {
        /// A name no other test uses: `stem` and eight hex digits.
        static func unique(_ stem: String) -> String {
            stem + "_" + UUID().uuidString.lowercased().prefix(8)
        }

        static func connect(_ url: String) throws -> PostgresConnection {
            try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
        }

        /// Runs `body` on a coordinator connection of its own; `tables` (and any function named in `functions`) are
        /// dropped afterwards, whatever `body` did.
        static func onCoordinator<T: Sendable>(
            dropping tables: [String], functions: [String] = [],
            _ body: @escaping @Sendable (PostgresConnection) throws -> T
        ) async throws -> T {
            let url = try #require(CitusCluster.coordinatorURL)
            return try await onThread {
                let connection = try connect(url)
                defer {
                    try? connection.execute("DROP TABLE IF EXISTS \(tables.joined(separator: ", ")) CASCADE")
                    for function in functions { try? connection.execute("DROP FUNCTION IF EXISTS \(function)") }
                    connection.close()
                }
                return try body(connection)
            }
        }

        /// Runs each statement with its own `PQexec`: Citus propagates a DDL statement to the worker nodes as the text
        /// it was given, and a text of several statements is refused there ("cannot insert multiple commands into a
        /// prepared statement").
        static func execute(each statements: [String], on connection: PostgresConnection) throws {
            for statement in statements { try connection.execute(statement) }
        }

        /// The error `sql` fails with, or nil when it succeeds.
        static func failure(of sql: String, _ parameters: [any PostgresEncodable] = [], on connection: PostgresConnection)
            -> PostgresError?
        {
            do {
                _ = try connection.query(sql, parameters)
                return nil
            } catch let error as PostgresError {
                return error
            } catch {
                return PostgresError(code: .queryFailed, message: "\(error)")
            }
        }

        /// The port of the worker node holding the shard of `value` in `table` (`pg_dist_placement`, `pg_dist_node`).
        static func nodePort(of value: Int, in table: String, on connection: PostgresConnection) throws -> Int {
            try connection.query(
                """
                SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
                WHERE p.shardid = get_shard_id_for_distribution_column($1::regclass, $2::integer)
                """, [table, value])[0].decode(Int.self, "nodeport")
        }

        /// How many rows of `table` sit in a shard other than the one their `lane` hashes to: each shard's distinct
        /// lanes, read on the shard itself (`run_command_on_shards`), against `get_shard_id_for_distribution_column`.
        static func misplacedLanes(in table: String, on connection: PostgresConnection) throws -> Int {
            try connection.query(
                """
                SELECT count(*) AS misplaced
                FROM run_command_on_shards($1::regclass, $$SELECT coalesce(array_agg(DISTINCT lane), '{}') FROM %s$$) r,
                     unnest(r.result::integer[]) AS l(lane)
                WHERE get_shard_id_for_distribution_column($1::regclass, l.lane) <> r.shardid
                """, [table])[0].decode(Int.self, "misplaced")
        }

        /// Shards of `table` holding at least one row, and its shard count.
        static func shardsWithRows(in table: String, on connection: PostgresConnection) throws -> (filled: Int, shards: Int) {
            let row = try connection.query(
                """
                SELECT count(*) FILTER (WHERE r.result::bigint > 0) AS filled, count(*) AS shards
                FROM run_command_on_shards($1::regclass, $$SELECT count(*) FROM %s$$) r
                """, [table])[0]
            return (try row.decode(Int.self, "filled"), try row.decode(Int.self, "shards"))
        }

        // MARK: Lanes

        /// A volatile DEFAULT on the distribution column is evaluated on the coordinator, row by row, before the row is
        /// routed: an `INSERT .. SELECT` of many rows (Citus: "pull to coordinator") puts every row in the shard its
        /// own drawn value hashes to, and spreads them over every shard. What lets producers' inserts stay as they are.
        @Test func aVolatileDefaultOnTheDistributionColumnRoutesEachRowOfAnInsertSelect() async throws {
            let table = Self.unique("fact_default")
            try await Self.onCoordinator(dropping: [table]) { connection in
                try connection.execute(
                    "CREATE TABLE \(table) (lane integer NOT NULL DEFAULT floor(random() * 1000)::integer, id bigint NOT NULL)")
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [table])
                let plan = try connection.query(
                    "EXPLAIN (COSTS OFF) INSERT INTO \(table) (id) SELECT g FROM generate_series(1, 2000) g"
                ).compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
                #expect(plan.contains("INSERT/SELECT method: pull to coordinator"), "\(plan)")
                try connection.execute("INSERT INTO \(table) (id) SELECT g FROM generate_series(1, 2000) g")
                let count = try connection.query("SELECT count(*) AS rows FROM \(table)")[0].decode(Int.self, "rows")
                #expect(count == 2000)
                #expect(try Self.misplacedLanes(in: table, on: connection) == 0)
                let spread = try Self.shardsWithRows(in: table, on: connection)
                #expect(spread.filled == spread.shards, "rows in \(spread.filled) of \(spread.shards) shards")
            }
        }

        /// Lane values 0..N-1 hash onto fewer than N of the N shards (21 of 32 here), so lanes are chosen per shard: the
        /// least value of each shard's hash range, computed from Citus's hash ranges before the table is distributed
        /// (`worker_hash`, ranges of 2^32 / `citus.shard_count` each) and equal to what
        /// `get_shard_id_for_distribution_column` says afterwards, one value on every shard. The distribution column's
        /// default cannot be changed once distributed ("cannot execute ALTER TABLE command involving partition column"),
        /// but a default calling a function can: the function's body is replaced (Citus propagates it to every node),
        /// and rows then spread over every shard.
        @Test func oneRepresentativeLaneValuePerShardCoversEveryShardWhileTheFirstNDoNot() async throws {
            let table = Self.unique("fact_lanes")
            let function = Self.unique("fact_lane")
            try await Self.onCoordinator(dropping: [table], functions: [function + "()"]) { connection in
                try connection.execute("CREATE FUNCTION \(function)() RETURNS integer LANGUAGE sql VOLATILE AS $$ SELECT 0 $$")
                try connection.execute("CREATE TABLE \(table) (lane integer NOT NULL DEFAULT \(function)(), id bigint NOT NULL)")
                let shardCount = try connection.query(
                    "SELECT current_setting('citus.shard_count')::integer AS shards")[0].decode(Int.self, "shards")
                // Before distributing: the least value of each of Citus's hash ranges (the last range ends at 2^31 - 1).
                let computed = try connection.query(
                    """
                    SELECT array_agg(v ORDER BY v) AS lanes FROM (
                        SELECT min(v) AS v FROM generate_series(0, 100 * $1::integer) v
                        GROUP BY least($1::integer - 1, (worker_hash(v)::bigint + 2147483648) / (4294967296 / $1::integer))) s
                    """, [shardCount])[0].decode([Int].self, "lanes")
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [table])
                let firstN = try connection.query(
                    "SELECT count(DISTINCT get_shard_id_for_distribution_column($1::regclass, v)) AS shards FROM generate_series(0, $2::integer - 1) v",
                    [table, shardCount])[0].decode(Int.self, "shards")
                #expect(firstN < shardCount, "0..\(shardCount - 1) reach \(firstN) of \(shardCount) shards")
                let perShard = try connection.query(
                    """
                    SELECT array_agg(v ORDER BY v) AS lanes FROM (
                        SELECT min(v) AS v FROM generate_series(0, 100 * $2::integer) v
                        GROUP BY get_shard_id_for_distribution_column($1::regclass, v)) s
                    """, [table, shardCount])[0].decode([Int].self, "lanes")
                #expect(perShard.count == shardCount)
                #expect(computed == perShard)
                let reached = try connection.query(
                    "SELECT count(DISTINCT get_shard_id_for_distribution_column($1::regclass, v)) AS shards FROM unnest($2::integer[]) v",
                    [table, perShard])[0].decode(Int.self, "shards")
                #expect(reached == shardCount)

                let refusal = Self.failure(
                    of: "ALTER TABLE \(table) ALTER COLUMN lane SET DEFAULT 1", on: connection)
                #expect(refusal?.message == "cannot execute ALTER TABLE command involving partition column", "\(String(describing: refusal))")
                let lanes = "{" + perShard.map(String.init).joined(separator: ",") + "}"
                try connection.execute(
                    """
                    CREATE OR REPLACE FUNCTION \(function)() RETURNS integer LANGUAGE sql VOLATILE AS
                    $$ SELECT ('\(lanes)'::integer[])[1 + floor(random() * \(shardCount))::integer] $$
                    """)
                try connection.execute("INSERT INTO \(table) (id) SELECT g FROM generate_series(1, \(100 * shardCount)) g")
                #expect(try Self.misplacedLanes(in: table, on: connection) == 0)
                let spread = try Self.shardsWithRows(in: table, on: connection)
                #expect(spread.filled == shardCount, "rows in \(spread.filled) of \(shardCount) shards")
            }
        }

        // MARK: The claim

        /// A claim in `ClaimStore`'s shape with `lane = $1` on every distributed table: `queue` shaped like `deliveries`,
        /// `turns` like `app_claim_turns` (per lane and app), `apps` a reference table with `claim_weight`.
        static func laneClaim(queue: String, turns: String, apps: String) -> String {
            """
            WITH visit AS MATERIALIZED (
                SELECT t.app_id, t.xmin::text AS seen, a.claim_weight AS weight,
                       row_number() OVER (ORDER BY t.turn_at, t.app_id) AS turn
                FROM (SELECT app_id, turn_at, xmin FROM \(turns)
                      WHERE lane = $1 AND turn_at <= now() ORDER BY turn_at LIMIT 4) t
                JOIN \(apps) a ON a.id = t.app_id
            ), shares AS MATERIALIZED (
                SELECT app_id, seen, greatest(1, floor(4::numeric * weight / sum(weight) OVER ()))::integer AS share
                FROM visit
            ), picked AS MATERIALIZED (
                SELECT d.id, d.app_id, d.leased_by FROM shares s
                CROSS JOIN LATERAL (
                    SELECT id, app_id, leased_by FROM \(queue)
                    WHERE lane = $1 AND app_id = s.app_id AND run_at <= now()
                    ORDER BY priority DESC, run_at LIMIT s.share
                    FOR UPDATE SKIP LOCKED) d
            ), claimed AS (
                UPDATE \(queue) d
                SET run_at = now() + make_interval(secs => 30), attempt = d.attempt + 1, fence = d.fence + 1,
                    leased_by = 'fact-worker'
                FROM picked p
                WHERE d.lane = $1 AND d.id = ANY (ARRAY(SELECT id FROM picked)) AND p.id = d.id
                RETURNING d.id, d.fence, d.app_id, p.leased_by AS rescued_from
            ), turned AS (
                UPDATE \(turns) t SET turn_at = now()
                FROM (SELECT app_id FROM \(turns)
                      WHERE lane = $1 AND app_id = ANY (ARRAY(SELECT app_id FROM shares))
                      ORDER BY app_id FOR UPDATE SKIP LOCKED) l
                WHERE t.lane = $1 AND t.app_id = l.app_id
            )
            SELECT c.id, c.fence, c.app_id, a.claim_weight, now() AS claimed_at
            FROM claimed c JOIN \(apps) a ON a.id = c.app_id
            """
        }

        /// A claim in the shape of `ClaimStore`'s (materialized CTEs; the apps whose turn has come, joined to a reference
        /// table; each app's share picked `FOR UPDATE SKIP LOCKED`; an `UPDATE .. RETURNING` of the queue by id; the
        /// update of the colocated per-(lane, app) turns; the claimed rows joined to the reference table again), with
        /// `lane = $1` on every distributed table, is one router task on the node holding that lane, and runs there.
        @Test func aClaimOfOneLaneInTheClaimStoreShapeIsOneRouterTask() async throws {
            let apps = Self.unique("fact_apps")
            let queue = Self.unique("fact_queue")
            let turns = Self.unique("fact_turns")
            let claim = Self.laneClaim(queue: queue, turns: turns, apps: apps)
            try await Self.onCoordinator(dropping: [queue, turns, apps]) { connection in
                try Self.execute(
                    each: [
                        "CREATE TABLE \(apps) (id uuid PRIMARY KEY, claim_weight smallint NOT NULL DEFAULT 1)",
                        """
                        CREATE TABLE \(queue) (
                            lane integer NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, app_id uuid NOT NULL,
                            priority smallint NOT NULL DEFAULT 5, run_at timestamptz NOT NULL DEFAULT now(),
                            attempt integer NOT NULL DEFAULT 0, fence bigint NOT NULL DEFAULT 0, leased_by text,
                            PRIMARY KEY (lane, id))
                        """,
                        "CREATE INDEX ON \(queue) (app_id, priority DESC, run_at)",
                        """
                        CREATE TABLE \(turns) (lane integer NOT NULL, app_id uuid NOT NULL, turn_at timestamptz NOT NULL,
                                               PRIMARY KEY (lane, app_id))
                        """,
                    ], on: connection)
                _ = try connection.query("SELECT create_reference_table($1)", [apps])
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [queue])
                _ = try connection.query("SELECT create_distributed_table($1, 'lane', colocate_with => $2)", [turns, queue])
                let (first, second) = (UUID(), UUID())
                _ = try connection.query("INSERT INTO \(apps) (id) VALUES ($1), ($2)", [first, second])
                // Lane 7's rows, and others' in another lane that the claim must not see.
                try Self.execute(
                    each: [
                        "INSERT INTO \(queue) (lane, app_id) SELECT l, a.id FROM \(apps) a, generate_series(1, 5), (VALUES (7), (8)) v(l)",
                        "INSERT INTO \(turns) (lane, app_id, turn_at) SELECT l, id, timestamptz '2000-01-01 00:00Z' FROM \(apps), (VALUES (7), (8)) v(l)",
                    ], on: connection)
                let plan = try connection.query("EXPLAIN (COSTS OFF) " + claim, [7])
                    .compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
                #expect(plan.hasPrefix("Custom Scan (Citus Adaptive)"), "\(plan)")
                #expect(plan.contains("Task Count: 1"), "\(plan)")
                #expect(plan.components(separatedBy: "->  Task\n").count == 2, "one task: \(plan)")
                #expect(plan.contains("LockRows"), "the row locks are taken on the shard: \(plan)")

                let claimed = try connection.query(claim, [7])
                #expect(claimed.count == 4)
                #expect(Set(try claimed.map { try $0.decode(UUID.self, "app_id") }) == [first, second])
                #expect(try claimed.allSatisfy { try $0.decode(Int.self, "fence") == 1 })
                let leased = try connection.query(
                    "SELECT lane, count(*) AS rows FROM \(queue) WHERE leased_by IS NOT NULL GROUP BY lane")
                #expect(leased.count == 1)
                #expect(try leased.first?.decode(Int.self, "lane") == 7)
                let moved = try connection.query(
                    "SELECT lane FROM \(turns) WHERE turn_at > timestamptz '2000-01-01 00:00Z' ORDER BY lane"
                ).map { try $0.decode(Int.self, "lane") }
                #expect(moved == [7, 7], "lane 7's two turns moved, lane 8's not")
            }
        }

        // MARK: Triggers

        /// With `citus.enable_unsafe_triggers`, a table's triggers run on its shards. A ROW trigger that writes a
        /// colocated table's row with the same distribution value (a queue row upserting its (lane, app) turn) works,
        /// for single rows and multi-shard inserts alike; a STATEMENT trigger whose function reads its transition table
        /// fails on the shard (SQLSTATE XX000, "executor could not find named tuplestore").
        @Test func aRowTriggerWritingAColocatedSameKeyRowWorksWhileATransitionTableFails() async throws {
            let queue = Self.unique("fact_tq")
            let turns = Self.unique("fact_tt")
            let rowFunction = Self.unique("fact_row_turn")
            let statementFunction = Self.unique("fact_statement_turns")
            try await Self.onCoordinator(
                dropping: [queue, turns], functions: [rowFunction + "()", statementFunction + "()"]
            ) { connection in
                try Self.execute(
                    each: [
                        "SET citus.enable_unsafe_triggers = on",
                        """
                        CREATE TABLE \(queue) (lane integer NOT NULL, id bigint NOT NULL, app_id uuid NOT NULL,
                                               run_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (lane, id))
                        """,
                        """
                        CREATE TABLE \(turns) (lane integer NOT NULL, app_id uuid NOT NULL, turn_at timestamptz NOT NULL,
                                               PRIMARY KEY (lane, app_id))
                        """,
                    ], on: connection)
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [queue])
                _ = try connection.query("SELECT create_distributed_table($1, 'lane', colocate_with => $2)", [turns, queue])
                try Self.execute(
                    each: [
                        """
                        CREATE FUNCTION \(rowFunction)() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN
                            INSERT INTO \(turns) (lane, app_id, turn_at) VALUES (NEW.lane, NEW.app_id, NEW.run_at)
                            ON CONFLICT (lane, app_id) DO UPDATE SET turn_at = least(\(turns).turn_at, excluded.turn_at);
                            RETURN NULL;
                        END $$
                        """,
                        "CREATE TRIGGER row_turn AFTER INSERT ON \(queue) FOR EACH ROW EXECUTE FUNCTION \(rowFunction)()",
                    ], on: connection)
                let app = UUID()
                _ = try connection.query(
                    "INSERT INTO \(queue) (lane, id, app_id) SELECT l, g, $1 FROM generate_series(1, 10) g, generate_series(0, 5) l",
                    [app])
                _ = try connection.query("INSERT INTO \(queue) (lane, id, app_id) VALUES (9, 1, $1)", [app])
                let turned = try connection.query("SELECT lane FROM \(turns) ORDER BY lane").map { try $0.decode(Int.self, "lane") }
                #expect(turned == [0, 1, 2, 3, 4, 5, 9])

                try Self.execute(
                    each: [
                        "DROP TRIGGER row_turn ON \(queue)",
                        """
                        CREATE FUNCTION \(statementFunction)() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN
                            INSERT INTO \(turns) (lane, app_id, turn_at)
                            SELECT lane, app_id, min(run_at) FROM new_rows GROUP BY lane, app_id
                            ON CONFLICT (lane, app_id) DO UPDATE SET turn_at = least(\(turns).turn_at, excluded.turn_at);
                            RETURN NULL;
                        END $$
                        """,
                        """
                        CREATE TRIGGER statement_turns AFTER INSERT ON \(queue) REFERENCING NEW TABLE AS new_rows
                            FOR EACH STATEMENT EXECUTE FUNCTION \(statementFunction)()
                        """,
                    ], on: connection)
                let error = Self.failure(of: "INSERT INTO \(queue) (lane, id, app_id) VALUES (9, 2, $1)", [app], on: connection)
                #expect(error?.sqlState == "XX000", "\(String(describing: error))")
                #expect(error?.message == "executor could not find named tuplestore \"new_rows\"", "\(String(describing: error))")
            }
        }

        /// A trigger's write to another distributed table is run by Citus where the trigger runs, on the worker node
        /// holding the shard: it works while the row it writes lands on a shard of the same node (local execution),
        /// and fails when that shard lives on another node (SQLSTATE XX000, "cannot execute a distributed query from a
        /// query on a shard"). Placement decides, and a rebalance moves shards: only a colocated same-key write is
        /// always local.
        @Test func aTriggerWritingAShardOnAnotherNodeFails() async throws {
            let queue = Self.unique("fact_nq")
            let turns = Self.unique("fact_nt")
            let function = Self.unique("fact_next_lane")
            try await Self.onCoordinator(dropping: [queue, turns], functions: [function + "()"]) { connection in
                try Self.execute(
                    each: [
                        "SET citus.enable_unsafe_triggers = on",
                        "CREATE TABLE \(queue) (lane integer NOT NULL, target integer NOT NULL, PRIMARY KEY (lane, target))",
                        "CREATE TABLE \(turns) (lane integer NOT NULL PRIMARY KEY)",
                    ], on: connection)
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [queue])
                _ = try connection.query("SELECT create_distributed_table($1, 'lane', colocate_with => $2)", [turns, queue])
                try Self.execute(
                    each: [
                        """
                        CREATE FUNCTION \(function)() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN
                            INSERT INTO \(turns) (lane) VALUES (NEW.target) ON CONFLICT DO NOTHING;
                            RETURN NULL;
                        END $$
                        """,
                        "CREATE TRIGGER next_lane AFTER INSERT ON \(queue) FOR EACH ROW EXECUTE FUNCTION \(function)()",
                    ], on: connection)
                // Lane values with the shard and node of each.
                let lanes = try connection.query(
                    """
                    SELECT v, get_shard_id_for_distribution_column($1::regclass, v) AS shard, n.nodeport
                    FROM generate_series(0, 63) v
                    JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column($1::regclass, v)
                    JOIN pg_dist_node n USING (groupid)
                    """, [queue]
                ).map { (value: try $0.decode(Int.self, "v"), shard: try $0.decode(Int64.self, "shard"), port: try $0.decode(Int.self, "nodeport")) }
                let first = try #require(lanes.first)
                let sameNode = try #require(lanes.first { $0.port == first.port && $0.shard != first.shard })
                let otherNode = try #require(lanes.first { $0.port != first.port })

                #expect(Self.failure(of: "INSERT INTO \(queue) VALUES ($1, $2)", [first.value, sameNode.value], on: connection) == nil)
                let error = Self.failure(of: "INSERT INTO \(queue) VALUES ($1, $2)", [first.value, otherNode.value], on: connection)
                #expect(error?.sqlState == "XX000", "\(String(describing: error))")
                #expect(error?.message == "cannot execute a distributed query from a query on a shard", "\(String(describing: error))")
                let written = try connection.query("SELECT lane FROM \(turns)").map { try $0.decode(Int.self, "lane") }
                #expect(written == [sameNode.value])
            }
        }

        // MARK: Functions

        /// A function that reads a table, called inside a router query, runs on the shard's node and fails there
        /// (SQLSTATE XX000, "cannot execute a distributed query from a query on a shard"): one reading a reference table
        /// and one reading the query's own lane alike. The same reads written into the statement (a join to the
        /// reference table, a recursive CTE over the lane, as `pushizo_next_run_at`'s loose index scan) run as one task.
        @Test func aFunctionReadingATableInsideARouterQueryFailsWhileTheSameReadInlineWorks() async throws {
            let names = Self.unique("fact_zones")
            let queue = Self.unique("fact_fq")
            let known = Self.unique("fact_known")
            let next = Self.unique("fact_next")
            try await Self.onCoordinator(
                dropping: [queue, names], functions: [known + "(text)", next + "(integer)"]
            ) { connection in
                try Self.execute(
                    each: [
                        "CREATE TABLE \(names) (name text PRIMARY KEY)",
                        "CREATE TABLE \(queue) (lane integer NOT NULL, id bigint NOT NULL, zone text, PRIMARY KEY (lane, id))",
                    ], on: connection)
                _ = try connection.query("SELECT create_reference_table($1)", [names])
                _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [queue])
                try Self.execute(
                    each: [
                        "INSERT INTO \(names) VALUES ('Europe/Paris')",
                        "INSERT INTO \(queue) SELECT 3, g, 'Europe/Paris' FROM generate_series(1, 5) g",
                        """
                        CREATE FUNCTION \(known)(p_zone text) RETURNS boolean LANGUAGE sql STABLE AS
                        $$ SELECT EXISTS (SELECT 1 FROM \(names) WHERE name = p_zone) $$
                        """,
                        """
                        CREATE FUNCTION \(next)(p_lane integer) RETURNS bigint LANGUAGE sql STABLE AS
                        $$ SELECT max(id) FROM \(queue) WHERE lane = p_lane $$
                        """,
                    ], on: connection)
                for sql in [
                    "SELECT count(*) FROM \(queue) WHERE lane = 3 AND \(known)(zone)",
                    "SELECT \(next)(lane) FROM \(queue) WHERE lane = 3",
                ] {
                    let error = Self.failure(of: sql, on: connection)
                    #expect(error?.sqlState == "XX000", "\(sql): \(String(describing: error))")
                    #expect(
                        error?.message == "cannot execute a distributed query from a query on a shard",
                        "\(sql): \(String(describing: error))")
                }
                let inline = """
                    WITH RECURSIVE ids AS (
                        SELECT (SELECT max(id) FROM \(queue) WHERE lane = 3) AS id
                        UNION ALL
                        SELECT (SELECT max(id) FROM \(queue) WHERE lane = 3 AND id < ids.id) FROM ids WHERE ids.id IS NOT NULL
                    )
                    SELECT (SELECT count(*) FROM ids WHERE id IS NOT NULL) AS walked,
                           (SELECT count(*) FROM \(queue) q JOIN \(names) z ON z.name = q.zone WHERE q.lane = 3) AS known
                    """
                let plan = try connection.query("EXPLAIN (COSTS OFF) " + inline).compactMap { $0["QUERY PLAN"] }
                    .joined(separator: "\n")
                #expect(plan.contains("Task Count: 1"), "\(plan)")
                let row = try connection.query(inline)[0]
                #expect(try row.decode(Int.self, "walked") == 5)
                #expect(try row.decode(Int.self, "known") == 5)
            }
        }

        /// A distributed function (`create_distributed_function`, delegated on an argument and colocated with the table
        /// that argument is the distribution value of) called as one statement outside a transaction block runs on
        /// the node holding that value's shard, whichever node it was called on: the coordinator or either worker node.
        /// So an advisory lock it takes on its key is always taken on that one node. Inside `BEGIN` it runs where it is
        /// called (Citus delegates a call in a transaction block only with `force_delegation`).
        @Test func aDelegatedFunctionRunsOnTheNodeOfItsKeyFromEveryNode() async throws {
            let coordinatorURL = try #require(CitusCluster.coordinatorURL)
            let workerURLs = CitusCluster.workerURLs
            let grants = Self.unique("fact_grants")
            let function = Self.unique("fact_reserve")
            try await Self.onCoordinator(dropping: [grants], functions: [function + "(uuid)"]) { connection in
                try connection.execute("CREATE TABLE \(grants) (cap_key uuid NOT NULL PRIMARY KEY)")
                _ = try connection.query("SELECT create_distributed_table($1, 'cap_key')", [grants])
                try connection.execute(
                    """
                    CREATE FUNCTION \(function)(p_key uuid) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
                    BEGIN
                        PERFORM pg_advisory_xact_lock(hashtextextended(p_key::text, 0));
                        RETURN inet_server_port();
                    END $$
                    """)
                _ = try connection.query(
                    "SELECT create_distributed_function($1, distribution_arg_name => 'p_key', colocate_with => $2)",
                    [function + "(uuid)", grants])
                let keys = (0..<4).map { _ in UUID() }
                let holders = try keys.map { key in
                    try connection.query(
                        """
                        SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
                        WHERE p.shardid = get_shard_id_for_distribution_column($1::regclass, $2::uuid)
                        """, [grants, key])[0].decode(Int.self, "nodeport")
                }
                for url in [coordinatorURL] + workerURLs {
                    let node = try Self.connect(url)
                    defer { node.close() }
                    let ranOn = try keys.map { try node.query("SELECT \(function)($1) AS port", [$0])[0].decode(Int.self, "port") }
                    #expect(ranOn == holders, "called on \(url)")
                }
                let own = try connection.query("SELECT inet_server_port() AS port")[0].decode(Int.self, "port")
                let inBlock = try connection.transaction {
                    try $0.query("SELECT \(function)($1) AS port", [keys[0]])[0].decode(Int.self, "port")
                }
                #expect(inBlock == own)
            }
        }

        // MARK: NOTIFY

        /// Makes `table` (`lane`, `id`), distributed by `lane`, with a statement trigger like the single-node wake-up
        /// trigger (`pushizo_wake`): `function` sends `NOTIFY channel, 'from-shard'`.
        static func makeWakeTable(_ table: String, function: String, channel: String, on connection: PostgresConnection) throws {
            try execute(
                each: [
                    "SET citus.enable_unsafe_triggers = on",
                    "CREATE TABLE \(table) (lane integer NOT NULL, id bigint NOT NULL)",
                ], on: connection)
            _ = try connection.query("SELECT create_distributed_table($1, 'lane')", [table])
            try execute(
                each: [
                    """
                    CREATE FUNCTION \(function)() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        PERFORM pg_notify('\(channel)', 'from-shard');
                        RETURN NULL;
                    END $$
                    """,
                    "CREATE TRIGGER wake AFTER INSERT ON \(table) FOR EACH STATEMENT EXECUTE FUNCTION \(function)()",
                ], on: connection)
        }

        /// `NOTIFY` from a trigger on a distributed table is sent where the trigger runs, on the worker node holding
        /// the shard: a `LISTEN` there hears it, one on the coordinator does not. Without a wait on the clock: the
        /// coordinator's listener reads up to a marker the coordinator sent after the insert committed (notifications
        /// arrive in commit order), and the trigger's is not among what came before it.
        @Test func notifyFromATriggerOnAShardIsHeardOnTheWorkerNodeHoldingItNotOnTheCoordinator() async throws {
            let coordinatorURL = try #require(CitusCluster.coordinatorURL)
            let workerURLs = CitusCluster.workerURLs
            let table = Self.unique("fact_wake")
            let function = Self.unique("fact_wake")
            let channel = Self.unique("fact_wakeup")
            try await Self.onCoordinator(dropping: [table], functions: [function + "()"]) { connection in
                try Self.makeWakeTable(table, function: function, channel: channel, on: connection)
                let port = try Self.nodePort(of: 0, in: table, on: connection)
                let holderURL = try #require(
                    try workerURLs.first { url in
                        let worker = try Self.connect(url)
                        defer { worker.close() }
                        return try worker.query("SELECT inet_server_port() AS port")[0].decode(Int.self, "port") == port
                    })
                let holder = try Self.connect(holderURL)
                defer { holder.close() }
                let coordinatorListener = try Self.connect(coordinatorURL)
                defer { coordinatorListener.close() }
                try holder.listen(channel)
                try coordinatorListener.listen(channel)

                try connection.execute("INSERT INTO \(table) VALUES (0, 1)")
                _ = try connection.query("SELECT pg_notify($1, 'marker')", [channel])

                // Hang guards only: each awaited notification is certain to come.
                var heldHeard: [String] = []
                while !heldHeard.contains("from-shard") {
                    let batch = try holder.waitForNotifications(timeout: .seconds(120))
                    if batch.isEmpty { break }
                    heldHeard += batch.map(\.payload)
                }
                var coordinatorHeard: [String] = []
                while !coordinatorHeard.contains("marker") {
                    let batch = try coordinatorListener.waitForNotifications(timeout: .seconds(120))
                    if batch.isEmpty { break }
                    coordinatorHeard += batch.map(\.payload)
                }
                #expect(heldHeard == ["from-shard"])
                #expect(coordinatorHeard == ["marker"])
            }
        }

        /// A `NOTIFY` in a transaction that wrote shards on more than one connection fails the whole write: Citus
        /// commits such a transaction with two-phase commit, and PostgreSQL cannot `PREPARE` a transaction that has
        /// executed `NOTIFY` (SQLSTATE 0A000). With the single-node wake-up trigger on a distributed queue, every insert
        /// reaching two shards would fail.
        @Test func aNotifyTriggerFailsEveryWriteReachingTwoShards() async throws {
            let table = Self.unique("fact_wake2")
            let function = Self.unique("fact_wake2")
            try await Self.onCoordinator(dropping: [table], functions: [function + "()"]) { connection in
                try Self.makeWakeTable(table, function: function, channel: function, on: connection)
                let shards = try connection.query(
                    "SELECT count(DISTINCT get_shard_id_for_distribution_column($1::regclass, v)) AS shards FROM unnest('{0,1}'::integer[]) v",
                    [table])[0].decode(Int.self, "shards")
                try #require(shards == 2)
                #expect(Self.failure(of: "INSERT INTO \(table) VALUES (0, 1)", on: connection) == nil)
                let error = Self.failure(of: "INSERT INTO \(table) VALUES (0, 1), (1, 2)", on: connection)
                #expect(error?.sqlState == "0A000", "\(String(describing: error))")
                #expect(
                    error?.message == "cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY",
                    "\(String(describing: error))")
                let rows = try connection.query("SELECT count(*) AS rows FROM \(table)")[0].decode(Int.self, "rows")
                #expect(rows == 1)
            }
        }

        // MARK: Row-level security

        /// Citus refuses a policy with a subquery on a distributed table (the single-node producer policies read
        /// `app_producers`): created on the distributed table, and when a table that has one is distributed
        /// (SQLSTATE 0A000, "Subqueries are not supported in policies on distributed tables"). A policy that reads no
        /// table works: the producer's apps in a role setting (`ALTER ROLE .. SET`, which Citus propagates to every
        /// node) read with `current_setting`, evaluated on the shard by the session Citus opens there as that role.
        @Test func aPolicyWithASubqueryIsRefusedWhileACurrentSettingPolicyWorks() async throws {
            let coordinatorURL = try #require(CitusCluster.coordinatorURL)
            let workerURLs = CitusCluster.workerURLs
            let mapping = Self.unique("fact_producers")
            let rows = Self.unique("fact_rows")
            let local = Self.unique("fact_local")
            let role = Self.unique("fact_producer")
            let (mine, theirs) = (UUID(), UUID())
            try await Self.onCoordinator(dropping: [rows, local, mapping]) { connection in
                defer {
                    try? connection.execute("DROP TABLE IF EXISTS \(rows), \(local), \(mapping) CASCADE")
                    try? connection.execute("DROP ROLE IF EXISTS \(role)")
                }
                try Self.execute(
                    each: [
                        "CREATE TABLE \(mapping) (role_name name NOT NULL, app_id uuid NOT NULL, PRIMARY KEY (role_name, app_id))",
                        "CREATE TABLE \(rows) (id bigint PRIMARY KEY, app_id uuid NOT NULL)",
                        "CREATE TABLE \(local) (id bigint PRIMARY KEY, app_id uuid NOT NULL)",
                    ], on: connection)
                _ = try connection.query("SELECT create_reference_table($1)", [mapping])
                _ = try connection.query("SELECT create_distributed_table($1, 'id')", [rows])
                let subquery = "app_id IN (SELECT m.app_id FROM \(mapping) m WHERE m.role_name = current_user)"

                let onDistributed = Self.failure(of: "CREATE POLICY by_mapping ON \(rows) USING (\(subquery))", on: connection)
                #expect(onDistributed != nil, "a policy with a subquery was created on a distributed table")
                try connection.execute("CREATE POLICY by_mapping ON \(local) USING (\(subquery))")
                let distributing = Self.failure(of: "SELECT create_distributed_table($1, 'id')", [local], on: connection)
                #expect(distributing?.sqlState == "0A000", "\(String(describing: distributing))")
                #expect(
                    distributing?.detail == "Subqueries are not supported in policies on distributed tables",
                    "\(String(describing: distributing))")

                let apps = "app_id = ANY (string_to_array(current_setting('pushizo.producer_apps', true), ',')::uuid[])"
                try Self.execute(
                    each: [
                        "CREATE POLICY by_setting ON \(rows) USING (\(apps)) WITH CHECK (\(apps))",
                        "ALTER TABLE \(rows) ENABLE ROW LEVEL SECURITY",
                        "CREATE ROLE \(role) LOGIN",
                        "GRANT SELECT, INSERT ON \(rows) TO \(role)",
                        "ALTER ROLE \(role) SET pushizo.producer_apps = '\(mine.uuidString.lowercased())'",
                    ], on: connection)
                _ = try connection.query(
                    "INSERT INTO \(rows) SELECT g, CASE WHEN g % 2 = 0 THEN $1::uuid ELSE $2::uuid END FROM generate_series(1, 64) g",
                    [mine, theirs])
                for url in workerURLs {
                    let worker = try Self.connect(url)
                    defer { worker.close() }
                    let settings = try worker.query(
                        "SELECT coalesce(rolconfig, '{}') AS settings FROM pg_roles WHERE rolname = $1", [role]
                    ).first?.decode([String].self, "settings")
                    #expect(settings == ["pushizo.producer_apps=\(mine.uuidString.lowercased())"], "on \(url)")
                }

                let producer = try Self.connect(coordinatorURL + " user=\(role)")
                defer { producer.close() }
                let seen = try producer.query("SELECT app_id, count(*) AS rows FROM \(rows) GROUP BY app_id")
                #expect(try seen.map { try $0.decode(UUID.self, "app_id") } == [mine])
                #expect(try seen.first?.decode(Int.self, "rows") == 32)
                #expect(Self.failure(of: "INSERT INTO \(rows) VALUES (1001, $1)", [mine], on: producer) == nil)
                let refused = Self.failure(of: "INSERT INTO \(rows) VALUES (1002, $1)", [theirs], on: producer)
                #expect(refused?.sqlState == "42501", "\(String(describing: refused))")
            }
        }
    }
}
