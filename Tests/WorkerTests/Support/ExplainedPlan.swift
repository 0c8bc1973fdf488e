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
    ///
    /// With `generic`, the plan is the one a prepared statement gets once PostgreSQL stops planning it per call
    /// (`plan_cache_mode = force_generic_plan`): made without the parameters' values, so it knows no array's
    /// length. Without, the statement is planned for its values (EXPLAIN plans its statement with them).
    /// - Throws: `PostgresError` from the statement; a test failure when the answer is not a plan.
    init(
        analyzing sql: String, _ parameters: [any PostgresEncodable], on connection: PostgresConnection,
        keep: Bool = false, generic: Bool = false
    ) throws {
        // A prepared statement outlives its transaction: deallocated after the rollback or commit below.
        defer { if generic { try? connection.execute("DEALLOCATE explained_generically") } }
        try connection.execute("BEGIN")
        var committed = false
        defer { if !committed { try? connection.execute("ROLLBACK") } }
        let statement: String
        if generic {
            try connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            try connection.execute("PREPARE explained_generically AS " + sql)
            // EXECUTE takes its arguments as expressions, not as the outer statement's parameters: literals,
            // which PostgreSQL converts to the types PREPARE inferred.
            let literals = parameters.map { parameter in
                parameter.postgresText.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" } ?? "NULL"
            }
            statement = "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained_generically(\(literals.joined(separator: ", ")))"
        } else {
            statement = "EXPLAIN (ANALYZE, FORMAT JSON) " + sql
        }
        text = try #require(try connection.query(statement, generic ? [] : parameters)[0]["QUERY PLAN"])
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

    /// Row pairs the plan's joins formed and then discarded ("Rows Removed by Join Filter", over all loops): a
    /// join of n rows with m compared in a nested loop shows about n x m here, a lookup by key shows none.
    func rowsRemovedByJoinFilters() -> Double {
        func removed(_ node: [String: Any]) -> Double {
            let loops = node["Actual Loops"] as? Double ?? 1
            var rows = (node["Rows Removed by Join Filter"] as? Double ?? 0) * loops
            for child in node["Plans"] as? [[String: Any]] ?? [] { rows += removed(child) }
            return rows
        }
        return removed(root)
    }

    /// The row counts the planner expected of the plan's nodes of `type` ("Function Scan", "Index Scan"...).
    func estimatedRows(ofNodeType type: String) -> [Double] {
        func estimates(_ node: [String: Any]) -> [Double] {
            var rows = node["Node Type"] as? String == type ? [node["Plan Rows"] as? Double ?? 0] : []
            for child in node["Plans"] as? [[String: Any]] ?? [] { rows += estimates(child) }
            return rows
        }
        return estimates(root)
    }
}
