import Postgres

/// The form of the queue a worker runs against, read from the catalog once at start-up (docs/scale-out.md, "The
/// shape: queue lanes"): one PostgreSQL, or a Citus cluster on which `pushizo-worker distribute` has made
/// `deliveries` a hash-distributed table whose shards each hold one lane.
public enum QueueTopology: Sendable, Equatable, CustomStringConvertible {
    /// One PostgreSQL server (the `citus` extension absent, or `deliveries` not distributed): every statement in its
    /// single-node form, no lane named.
    case singleNode
    /// `deliveries` distributed by `lane` over Citus's shards: the lanes, one representative value per shard (the
    /// least `integer` whose `worker_hash` falls in the shard's hash range, as the distribute step's
    /// `pushizo_lane()` draws them), ascending. Never empty.
    case lanes([Int32])

    public var description: String {
        switch self {
        case .singleNode: "single node"
        case .lanes(let lanes): "Citus, \(lanes.count) lanes"
        }
    }

    /// The lanes of a distributed queue; nil on a single node.
    public var laneValues: [Int32]? {
        guard case .lanes(let lanes) = self else { return nil }
        return lanes
    }

    /// A catalog the worker cannot read a topology from: `deliveries` is distributed, but not by hash on `lane`, or
    /// some shard's hash range holds no representative (the shard count and the ranges disagree).
    public struct Unreadable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads the topology from the catalog: `pg_dist_partition` (Citus's metadata table, present only where the
    /// extension is created) listing `deliveries`, and the hash ranges of its shards (`pg_dist_shard`), each
    /// mapped to its least non-negative representative. Two catalog reads on a single node, three on Citus; no
    /// row of the queue is read.
    /// - Throws: ``Unreadable`` for a distribution of `deliveries` the worker does not know; ``PostgresError``.
    public static func read(on connection: PostgresConnection) throws -> QueueTopology {
        let citus = try connection.query(
            "SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS citus")[0].decode(Bool.self, "citus")
        guard citus else { return .singleNode }
        let distribution = try connection.query(
            """
            SELECT p.partmethod::text AS method, a.attname::text AS column
            FROM pg_dist_partition p
            LEFT JOIN pg_attribute a ON a.attrelid = p.logicalrelid
                AND a.attname = column_to_column_name(p.logicalrelid, p.partkey)
            WHERE p.logicalrelid = 'deliveries'::regclass
            """)
        guard let row = distribution.first else { return .singleNode }
        let method = try row.decode(String.self, "method")
        let column = try row.decodeIfPresent(String.self, "column")
        guard method == "h", column == "lane" else {
            throw Unreadable(
                description: "deliveries is distributed by \(column ?? "no column") (method \(method)), not by hash on lane")
        }
        // Each shard's least representative in 0 ... 100 × shard count (the distribute step's search, which finds
        // one for every shard of every count it supports; a shard without one is reported, not skipped).
        let shards = try connection.query(
            """
            WITH shards AS (
                SELECT shardid, shardminvalue::integer AS low, shardmaxvalue::integer AS high
                FROM pg_dist_shard WHERE logicalrelid = 'deliveries'::regclass
            )
            SELECT s.shardid, (SELECT min(v) FROM generate_series(0, 100 * (SELECT count(*) FROM shards)::integer) v
                               WHERE worker_hash(v) BETWEEN s.low AND s.high) AS lane
            FROM shards s ORDER BY lane
            """)
        var lanes: [Int32] = []
        for shard in shards {
            guard let lane = try shard.decodeIfPresent(Int32.self, "lane") else {
                throw Unreadable(
                    description: "shard \(try shard.decode(Int64.self, "shardid")) of deliveries holds no lane value")
            }
            lanes.append(lane)
        }
        guard !lanes.isEmpty else { throw Unreadable(description: "deliveries is distributed but has no shards") }
        return .lanes(lanes)
    }
}
