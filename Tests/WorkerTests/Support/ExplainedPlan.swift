import Foundation
import Postgres
import Testing

/// A statement's plan as `EXPLAIN (ANALYZE, FORMAT JSON)` reports it after running it: how tests check that a
/// statement's work is bounded by its input (rows read), not by what else is in a table.
struct ExplainedPlan {
    /// The JSON text PostgreSQL returned.
    let text: String
    private let root: [String: Any]

    /// Runs `sql` with `parameters` under `EXPLAIN ANALYZE` in a transaction, which is rolled back unless
    /// `keep` (a statement that writes then leaves its rows, for the test to read).
    /// - Throws: `PostgresError` from the statement; a test failure when the answer is not a plan.
    init(analyzing sql: String, _ parameters: [any PostgresEncodable], on connection: PostgresConnection, keep: Bool = false) throws {
        try connection.execute("BEGIN")
        var committed = false
        defer { if !committed { try? connection.execute("ROLLBACK") } }
        text = try #require(try connection.query("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, parameters)[0]["QUERY PLAN"])
        let explained = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
        root = try #require(explained.first?["Plan"] as? [String: Any])
        if keep {
            try connection.execute("COMMIT")
            committed = true
        }
    }

    /// Rows of `relation` the plan's scans read: those they returned plus those their filters removed, over
    /// all loops (EXPLAIN reports both per loop).
    func rowsRead(of relation: String) -> Double {
        func read(_ node: [String: Any]) -> Double {
            var rows = 0.0
            if node["Relation Name"] as? String == relation, node["Node Type"] as? String != "ModifyTable" {
                let loops = node["Actual Loops"] as? Double ?? 1
                let returned = node["Actual Rows"] as? Double ?? 0
                let removed = (node["Rows Removed by Filter"] as? Double ?? 0)
                    + (node["Rows Removed by Index Recheck"] as? Double ?? 0)
                rows += (returned + removed) * loops
            }
            for child in node["Plans"] as? [[String: Any]] ?? [] { rows += read(child) }
            return rows
        }
        return read(root)
    }
}
