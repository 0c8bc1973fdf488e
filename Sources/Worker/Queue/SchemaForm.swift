import Foundation
import Postgres

/// The form the schema is in: a single PostgreSQL's, as the migrations build it, or the Citus form
/// `pushizo-worker distribute` switches it to (docs/scale-out.md, "The distribute step"). Statements that Citus runs
/// differently (a `FOR UPDATE SKIP LOCKED` across shards, which it refuses) are chosen by it.
public enum SchemaForm: Sendable, Equatable {
    case singleNode
    case citus

    /// Read from the catalog: the Citus form once the distribute step's first step has replaced the trigger
    /// `subscriptions_deleted` with its row form (`pushizo_subscription_deleted_row`), before any table is
    /// distributed; the same test as `pushizo_citus_form()` (migration 0037), written out so that it also reads a
    /// schema without that function or without tables.
    public static func read(on connection: PostgresConnection) throws -> SchemaForm {
        let row = try connection.query(
            """
            SELECT EXISTS (SELECT FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                           WHERE t.tgrelid = to_regclass('subscriptions') AND t.tgname = 'subscriptions_deleted'
                             AND p.proname = 'pushizo_subscription_deleted_row') AS citus
            """)[0]
        return try row.decode(Bool.self, "citus") ? .citus : .singleNode
    }
}
