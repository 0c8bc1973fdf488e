import Postgres

/// The table rights `run` and `check` need, asked of PostgreSQL before the first claim: a role without them
/// would fail every statement with SQLSTATE 42501 (`insufficient_privilege`) for as long as it ran.
public enum WorkerRights {
    /// The rights migration 0027 grants the `pushizo_worker` group on its tables (docs/operations.md, "Roles"), as
    /// `(table, privilege)`. A table a migration has not created yet is not asked about (the worker then waits for
    /// its migrations like any other worker).
    static let needed: [(table: String, privileges: [String])] = [
        ("deliveries", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("notification_event_counts", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("app_claim_turns", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("app_send_buckets", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("expansion_slices", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("frequency_cap_grants", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("provider_tokens", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("delivery_events", ["SELECT", "INSERT"]),
        ("notifications", ["SELECT", "UPDATE", "DELETE"]),
        ("subscriptions", ["SELECT", "UPDATE"]),
        ("app_channels", ["SELECT", "UPDATE"]),
        ("queue_depth_samples", ["SELECT", "INSERT", "UPDATE"]),
        ("apps", ["SELECT"]),
        ("users", ["SELECT"]),
        ("time_zone_names", ["SELECT"]),
        ("worker_heartbeats", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("live_activity_channels", ["SELECT", "UPDATE"]),
        ("live_activity_channel_sends", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ]

    /// Asks `has_table_privilege` for each of ``needed`` as the session's role (its own rights, its groups' and
    /// PUBLIC's: what PostgreSQL checks when the statements run).
    /// - Throws: ``PostgresError`` with SQLSTATE `42501`, naming the role and every right it lacks, when it lacks
    ///   any (``PostgresError/needsReconfiguration``); the query's own error otherwise.
    public static func verify(on connection: PostgresConnection) throws {
        let pairs = needed.flatMap { entry in entry.privileges.map { (entry.table, $0) } }
        let rows = try connection.query(
            """
            SELECT current_user AS role, string_agg(privilege || ' on ' || name, ', ' ORDER BY ordinal) AS missing
            FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS needed(name, privilege, ordinal)
            WHERE to_regclass(name) IS NOT NULL AND NOT has_table_privilege(to_regclass(name), privilege)
            """, [pairs.map(\.0), pairs.map(\.1)])
        guard let missing = rows.first?["missing"] else { return }
        let role = rows.first?["role"] ?? "?"
        throw PostgresError(
            code: .queryFailed, message: "role \"\(role)\" lacks rights the worker needs: \(missing)", sqlState: "42501",
            hint: "make it a member of pushizo_worker (docs/operations.md, \"Roles\")")
    }
}
