import Testing
@testable import Postgres

@Suite("SQLStatements")
struct SQLStatementsTests {
    @Test func splitsAtTopLevelSemicolonsAndDropsComments() {
        let script = """
            -- pushizo:no-transaction
            -- a comment; with a semicolon
            CREATE INDEX CONCURRENTLY IF NOT EXISTS a_x ON a (x); /* block; /* nested; */ still */
            INSERT INTO t VALUES ('it''s; one', E'back\\'; slash', "semi;colon");
            CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$;
            SELECT $1::int, a$b FROM c;
            ;
            """
        #expect(SQLStatements.split(script) == [
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS a_x ON a (x)",
            "INSERT INTO t VALUES ('it''s; one', E'back\\'; slash', \"semi;colon\")",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$",
            "SELECT $1::int, a$b FROM c",
        ])
    }

    @Test func aLastStatementWithoutSemicolonIsKept() {
        #expect(SQLStatements.split("SELECT 1;\nSELECT 2\n-- end") == ["SELECT 1", "SELECT 2"])
        #expect(SQLStatements.split("-- only a comment\n").isEmpty)
    }
}

@Suite("MigrationHeader")
struct MigrationHeaderTests {
    @Test func directivesAreReadFromTheLeadingComments() throws {
        let header = try MigrationHeader(
            sql: "-- Adds an index.\n-- pushizo:no-transaction\n--pushizo:oldest-worker 30\n\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (x);",
            fileName: "0031_i.sql")
        #expect(header == MigrationHeader(noTransaction: true, oldestWorker: 30))
        // After the first statement a directive is only a comment.
        let late = try MigrationHeader(sql: "CREATE TABLE t (x int);\n-- pushizo:no-transaction\n", fileName: "0001_t.sql")
        #expect(late == MigrationHeader())
    }

    @Test(arguments: ["-- pushizo:no-transactions", "-- pushizo:oldest-worker", "-- pushizo:oldest-worker x", "-- pushizo:notransaction"])
    func unknownOrMalformedDirectivesAreRefused(line: String) {
        let error = #expect(throws: PostgresError.self) { try MigrationHeader(sql: "\(line)\nSELECT 1;", fileName: "0002_x.sql") }
        #expect(error?.message.contains("0002_x.sql") == true)
    }

    /// Outside a transaction a file runs again from the top after a failure: a `CREATE INDEX` without
    /// `CONCURRENTLY IF NOT EXISTS name` would fail or block writes on the rerun.
    @Test(arguments: [
        "CREATE INDEX i ON t (x);", "CREATE INDEX CONCURRENTLY i ON t (x);", "create unique index concurrently on t (x);",
    ])
    func aNoTransactionFileMustCreateIndexesResumably(statement: String) throws {
        let error = #expect(throws: PostgresError.self) {
            try MigrationHeader(sql: "-- pushizo:no-transaction\n\(statement)", fileName: "0003_x.sql")
        }
        #expect(error?.message.contains("IF NOT EXISTS") == true)
        _ = try MigrationHeader(sql: "-- pushizo:no-transaction\ncreate unique index concurrently if not exists \"I\" on t (x);", fileName: "0003_x.sql")
        // In a transaction, a plain CREATE INDEX stays allowed (the released migrations use it).
        _ = try MigrationHeader(sql: statement, fileName: "0003_x.sql")
    }

    @Test func theIndexNameIsReadAsWritten() {
        #expect(MigrationHeader.concurrentIndexName("CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_x ON deliveries (x)") == "deliveries_x")
        #expect(MigrationHeader.concurrentIndexName("create unique index concurrently if not exists \"Odd name\" on t (x)") == "\"Odd name\"")
        #expect(MigrationHeader.concurrentIndexName("CREATE INDEX deliveries_x ON deliveries (x)") == nil)
    }
}

@Suite("SchemaWindow")
struct SchemaWindowTests {
    static let known = ["0001_a.sql", "0002_b.sql", "0003_c.sql"]

    @Test func everyKnownMigrationAppliedIsCompatible() {
        let applied = [SchemaWindow.Applied(version: 1, name: "a"), .init(version: 2, name: "b"), .init(version: 3, name: "c")]
        #expect(SchemaWindow.judge(known: Self.known, applied: applied) == .compatible(newer: []))
    }

    @Test func missingMigrationsAreNamedInOrder() {
        #expect(SchemaWindow.judge(known: Self.known, applied: [.init(version: 2, name: "b")]) == .behind(pending: ["0001_a.sql", "0003_c.sql"]))
        #expect(SchemaWindow.judge(known: Self.known, applied: []) == .behind(pending: Self.known))
    }

    /// A newer release's migrations are within the window unless one names a newer oldest worker.
    @Test func newerMigrationsAreAllowedUnlessTheyNeedANewerWorker() {
        let base = [SchemaWindow.Applied(version: 1, name: "a"), .init(version: 2, name: "b"), .init(version: 3, name: "c")]
        #expect(SchemaWindow.judge(known: Self.known, applied: base + [.init(version: 4, name: "d"), .init(version: 5, name: "e", oldestWorker: 3)])
            == .compatible(newer: ["0004_d.sql", "0005_e.sql"]))
        #expect(SchemaWindow.judge(known: Self.known, applied: base + [.init(version: 4, name: "d"), .init(version: 5, name: "e", oldestWorker: 4)])
            == .beyondWindow([.init(fileName: "0005_e.sql", oldestWorker: 4)]))
    }
}
