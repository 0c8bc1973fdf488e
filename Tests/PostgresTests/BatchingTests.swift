import Foundation
import Testing
@testable import Postgres

@Suite("Prepared statements, pipelines, column indexes")
struct BatchingTests {
    @Test func preparedQueryReusesTheStatementAndSurvivesDiscard() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                try c.execute("CREATE TABLE t (id int PRIMARY KEY, label text)")
                let insert = "INSERT INTO t (id, label) VALUES ($1, $2) RETURNING id"
                for i in 1...5 {
                    let row = try #require(try c.preparedQuery(insert, [i, "n\(i)"]).first)
                    #expect(try row.decode(Int.self, "id") == i)
                }
                let prepared = try c.query("SELECT count(*) AS n FROM pg_prepared_statements WHERE statement = $1", [insert])
                #expect(try prepared.first?.decode(Int.self, "n") == 1)
                // DISCARD ALL drops server-side statements; the next call prepares again.
                try c.execute("DISCARD ALL")
                #expect(try c.preparedQuery("SELECT count(*) AS n FROM t").first?.decode(Int.self, "n") == 5)
                #expect(try c.preparedQuery(insert, [6, nil as String?]).count == 1)
                let duplicate = try #require(throws: PostgresError.self) { try c.preparedQuery(insert, [6, "again"]) }
                #expect(duplicate.sqlState == "23505")
            }
        }
    }

    /// A statement dropped while the connection is inside a transaction (`DISCARD ALL` cannot run there, so
    /// `DEALLOCATE` stands in for a pooler or an operator): that call fails and aborts the transaction, and the
    /// next call, after the rollback, prepares it again instead of failing the same way forever.
    @Test func aStatementDroppedInsideATransactionIsPreparedAgainByTheNextCall() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                let select = "SELECT $1::int + 1 AS v"
                #expect(try c.preparedQuery(select, [1]).first?.decode(Int.self, "v") == 2)
                #expect(throws: PostgresError.self) {
                    try c.transaction { c in
                        try c.execute("DEALLOCATE ALL")
                        let error = try #require(throws: PostgresError.self) { try c.preparedQuery(select, [2]) }
                        #expect(error.sqlState == "26000")
                        throw error
                    }
                }
                #expect(try c.transaction { try $0.preparedQuery(select, [3]).first?.decode(Int.self, "v") } == 4)
            }
        }
    }

    @Test func pipelineRunsABatchAtomically() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                try c.execute("CREATE TABLE t (id int PRIMARY KEY, label text)")
                #expect(try c.pipeline([]).isEmpty)
                let results = try c.pipeline([
                    PostgresStatement("INSERT INTO t VALUES ($1, $2)", [1, "one"]),
                    PostgresStatement("INSERT INTO t VALUES ($1, $2), ($3, $4)", [2, "two", 3, "three"]),
                    PostgresStatement("SELECT label FROM t ORDER BY id"),
                ])
                #expect(results.count == 3)
                #expect(results.map(\.affectedRows) == [1, 2, 3])
                #expect(try results[2].map { try $0.decode(String.self, "label") } == ["one", "two", "three"])

                // A failing statement: the error is thrown, and the whole batch is rolled back.
                let error = try #require(throws: PostgresError.self) {
                    try c.pipeline([
                        PostgresStatement("INSERT INTO t VALUES ($1, $2)", [4, "four"]),
                        PostgresStatement("INSERT INTO t VALUES ($1, $2)", [1, "duplicate"]),
                        PostgresStatement("INSERT INTO t VALUES ($1, $2)", [5, "five"]),
                    ])
                }
                #expect(error.sqlState == "23505")
                #expect(!c.isConnectionBad)
                #expect(try c.query("SELECT count(*) AS n FROM t").first?.decode(Int.self, "n") == 3)

                // Large enough to need several socket writes and reads in flight at once.
                let many = (10..<3010).map { PostgresStatement("INSERT INTO t VALUES ($1, $2) RETURNING id", [$0, String(repeating: "x", count: 200)]) }
                let inserted = try c.pipeline(many)
                #expect(inserted.count == 3000)
                #expect(try inserted.last?.first?.decode(Int.self, "id") == 3009)
                #expect(try c.query("SELECT count(*) AS n FROM t").first?.decode(Int.self, "n") == 3003)
            }
        }
    }

    @Test func columnIndexesDecodeLikeNames() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let result = try c.query("SELECT g AS n, CASE WHEN g % 2 = 0 THEN NULL ELSE g::text END AS odd FROM generate_series(1, 4) AS g")
            let n = try #require(result.columnIndex("n"))
            let odd = try #require(result.columnIndex("odd"))
            #expect(result.columnIndex("missing") == nil)
            #expect(try result.map { try $0.decode(Int.self, at: n) } == [1, 2, 3, 4])
            #expect(try result.map { try $0.decodeIfPresent(String.self, at: odd) } == ["1", nil, "3", nil])
            #expect(result[1][index: odd] == nil)
            let error = try #require(throws: PostgresError.self) { try result[1].decode(String.self, at: odd) }
            #expect(error.message.contains("\"odd\""))
            #expect(throws: PostgresError.self) { try result[0].decode(Int.self, at: 7) }
        }
    }
}
