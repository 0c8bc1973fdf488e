import Foundation
import Testing
@testable import Postgres

/// `PostgresBinaryArray` read by a real server's `array_recv`: the server must see exactly what the text
/// literal of the same values gives it.
@Suite("Binary-format array parameters")
struct BinaryArrayTests {
    /// The server's text of `$1::type` sent once as a binary array and once as a text literal.
    private static func serverText(
        _ binary: PostgresBinaryArray, _ literal: any PostgresEncodable, as type: String, on c: PostgresConnection
    ) throws -> (binary: String?, text: String?) {
        let row = try #require(try c.query("SELECT $1::\(type)::text AS b, $2::\(type)::text AS t", [binary, literal]).first)
        return (row["b"], row["t"])
    }

    @Test func eachElementTypeReadsAsItsTextLiteral() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let integers: [Int64] = [0, 1, -1, .max, .min, 1_234_567_890_123]
            var seen = try Self.serverText(.bigint(integers), integers, as: "bigint[]", on: c)
            #expect(seen.binary == seen.text && seen.binary == "{0,1,-1,9223372036854775807,-9223372036854775808,1234567890123}")

            let tiny = [0, 5, 11, 32_767, -32_768]
            seen = try Self.serverText(.smallint(tiny), tiny, as: "smallint[]", on: c)
            #expect(seen.binary == seen.text && seen.binary == "{0,5,11,32767,-32768}")

            let small: [Int?] = [0, nil, 2_147_483_647, -2_147_483_648, 7]
            seen = try Self.serverText(.integer(small), small, as: "integer[]", on: c)
            #expect(seen.binary == seen.text && seen.binary == "{0,NULL,2147483647,-2147483648,7}")

            let texts: [String?] = ["a", "", nil, "quote\" back\\slash", "NULL", "ünïcødé 🚀 日本語", "{braces},comma"]
            seen = try Self.serverText(.text(texts), texts, as: "text[]", on: c)
            #expect(seen.binary == seen.text && seen.binary != nil)
            let plain = ["x", "y"]
            seen = try Self.serverText(.text(plain), plain, as: "text[]", on: c)
            #expect(seen.binary == "{x,y}")

            let flags = [true, false, true]
            seen = try Self.serverText(.boolean(flags), flags, as: "boolean[]", on: c)
            #expect(seen.binary == seen.text && seen.binary == "{t,f,t}")

            let ids: [UUID?] = [UUID(), nil, UUID(uuidString: "00000000-0000-4000-8000-0000000000ff")]
            seen = try Self.serverText(.uuid(ids), ids, as: "uuid[]", on: c)
            #expect(seen.binary == seen.text && seen.binary?.contains("00000000-0000-4000-8000-0000000000ff") == true)

            // Microsecond rounding, negative instants (before 2000 and before 1970), BC, and the infinities as the
            // text form maps them (including out-of-range instants).
            let dates: [Date?] = [
                Date(timeIntervalSince1970: 1_700_000_000.1234565), Date(timeIntervalSince1970: -1.5),
                Date(timeIntervalSinceReferenceDate: -31_622_400.000_001), nil, .distantFuture, .distantPast,
                Date(timeIntervalSince1970: -70_000_000_000), Date(timeIntervalSinceReferenceDate: 1e16),
                Date(timeIntervalSinceReferenceDate: -1e16),
            ]
            seen = try Self.serverText(.timestamptz(dates), dates, as: "timestamptz[]", on: c)
            #expect(seen.binary == seen.text && seen.binary != nil)
            #expect(seen.binary?.contains("infinity") == true && seen.binary?.contains("BC") == true)
        }
    }

    @Test func emptyArraysAndUnnestOfSeveral() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let empty = try #require(try c.query(
                "SELECT cardinality($1::bigint[]) AS a, cardinality($2::text[]) AS b, cardinality($3::uuid[]) AS c",
                [PostgresBinaryArray.bigint([]), PostgresBinaryArray.text([String]()), PostgresBinaryArray.uuid([])]).first)
            #expect(try empty.decode(Int.self, "a") == 0 && empty.decode(Int.self, "b") == 0 && empty.decode(Int.self, "c") == 0)

            // Mixed with text parameters in one statement, prepared and not, as the completion write sends them.
            let sql = "SELECT i, t, u, $3::int AS k FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS x(i, t, u) ORDER BY u"
            for prepared in [false, true] {
                let parameters: [any PostgresEncodable] = [PostgresBinaryArray.bigint([10, 20]), PostgresBinaryArray.text(["a", nil]), 5]
                let rows = prepared ? try c.preparedQuery(sql, parameters) : try c.query(sql, parameters)
                #expect(try rows.map { try $0.decode(Int.self, "i") } == [10, 20])
                #expect(try rows.map { try $0.decodeIfPresent(String.self, "t") } == ["a", nil])
                #expect(try rows.map { try $0.decode(Int.self, "k") } == [5, 5])
            }
            let pipelined = try c.pipeline([
                PostgresStatement("SELECT sum(v)::int8 AS s FROM unnest($1::bigint[]) v", [PostgresBinaryArray.bigint([1, 2, 3])]),
            ])
            #expect(try pipelined[0].first?.decode(Int.self, "s") == 6)
        }
    }

    @Test func anOptionalBinaryArrayIsSentAsTheArray() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let wrapped: PostgresBinaryArray? = .bigint([1, 2, 3])
            let none: PostgresBinaryArray? = nil
            let row = try #require(try c.query("SELECT $1::bigint[]::text AS v, $2::bigint[] IS NULL AS n", [wrapped, none]).first)
            #expect(row["v"] == "{1,2,3}")
            #expect(try row.decode(Bool.self, "n"))
        }
    }

    @Test func aMismatchedElementTypeIsRefusedByTheServer() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            // bigint elements where the SQL says integer[]: refused (42804), never read as other numbers.
            let error = #expect(throws: PostgresError.self) {
                try c.query("SELECT $1::integer[] AS v", [PostgresBinaryArray.bigint([1])])
            }
            #expect(error?.sqlState == "42804")
            // Values beyond smallint and integer are refused as their text would be, never stored as other numbers.
            for (binary, type) in [(PostgresBinaryArray.integer([1, 3_000_000_000, nil]), "integer[]"),
                                   (PostgresBinaryArray.integer([-3_000_000_000]), "integer[]"),
                                   (PostgresBinaryArray.smallint([40_000]), "smallint[]")] {
                let refused = #expect(throws: PostgresError.self) { try c.query("SELECT $1::\(type) AS v", [binary]) }
                #expect(refused?.sqlState == "22P03", "\(type)")
            }
            // A NUL inside a text element is refused as in text format.
            #expect(throws: PostgresError.self) { try c.query("SELECT $1::text[] AS v", [PostgresBinaryArray.text(["a\u{0}b"])]) }
            // The connection is still usable.
            #expect(try c.query("SELECT 1 AS one").first?.decode(Int.self, "one") == 1)
        }
    }
}
