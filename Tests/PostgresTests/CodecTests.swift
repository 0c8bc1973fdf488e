import Foundation
import Testing
@testable import Postgres

/// Values sent as parameters and read back through real PostgreSQL types.
@Suite("Encoding and decoding through PostgreSQL")
struct CodecTests {
    /// Sends `value` cast to `type`, reads it back as text and decodes it.
    private static func roundTrip<T: PostgresEncodable & PostgresDecodable>(
        _ value: T, as type: String, on connection: PostgresConnection
    ) throws -> T {
        let rows = try connection.query("SELECT $1::\(type) AS v", [value])
        return try #require(rows.first).decode(T.self, "v")
    }

    @Test func scalarsRoundTrip() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            for s in ["", "plain", "quote ' and \" and \\ backslash", "ünïcødé ✓ 🚀 日本語", "comma, {brace} NULL", "line\nbreak\ttab"] {
                #expect(try Self.roundTrip(s, as: "text", on: c) == s)
            }
            for i in [0, 1, -1, Int.max, Int.min] { #expect(try Self.roundTrip(i, as: "int8", on: c) == i) }
            for i in [Int32.max, Int32.min, 0] { #expect(try Self.roundTrip(i, as: "int4", on: c) == i) }
            for i in [Int64.max, Int64.min, 42] { #expect(try Self.roundTrip(i, as: "int8", on: c) == i) }
            for d in [0.1, -0.0, 3.141592653589793, 1e308, .leastNonzeroMagnitude, -2.5e-10, .infinity, -.infinity] {
                let back = try Self.roundTrip(d, as: "float8", on: c)
                #expect(back == d && back.sign == d.sign)
            }
            #expect(try Self.roundTrip(Double.nan, as: "float8", on: c).isNaN)
            #expect(try Self.roundTrip(true, as: "bool", on: c) == true)
            #expect(try Self.roundTrip(false, as: "bool", on: c) == false)
            let id = UUID()
            #expect(try Self.roundTrip(id, as: "uuid", on: c) == id)
        }
    }

    @Test func datesRoundTripWithMicroseconds() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let micros: [Int64] = [0, 1, -1, 1_717_171_717_123_456, -86_400_000_001, 253_402_300_799_000_000, 4_102_444_799_999_999, -62_135_596_800_000_000]
            for value in micros {
                // Built like the decoder does, from 2001 (Date's storage), so the test value is exact.
                let date = Date(timeIntervalSinceReferenceDate: Double(value - 978_307_200_000_000) / 1_000_000)
                let back = try Self.roundTrip(date, as: "timestamptz", on: c)
                #expect(back == date, "\(value)")
                // The server agrees on the instant: epoch microseconds computed in SQL.
                let epoch = try #require(try c.query("SELECT (extract(epoch FROM $1::timestamptz) * 1000000)::int8 AS us", [date]).first)
                #expect(try epoch.decode(Int64.self, "us") == value)
            }
            // Server-side text in other forms: a timestamp without zone (read as UTC), a date, infinity.
            let row = try #require(try c.query("""
                SELECT '2024-02-29 23:59:59.5'::timestamp AS ts, '2024-03-01'::date AS d,
                       'infinity'::timestamptz AS inf, '2024-06-01 12:00:00+02'::timestamptz AS shifted,
                       '0044-03-15 12:00:00+00 BC'::timestamptz AS bc
                """).first)
            #expect(try row.decode(Date.self, "ts") == Date(timeIntervalSince1970: 1_709_251_199.5))
            #expect(try row.decode(Date.self, "d") == Date(timeIntervalSince1970: 1_709_251_200))
            #expect(try row.decode(Date.self, "inf") == .distantFuture)
            #expect(try row.decode(Date.self, "shifted") == Date(timeIntervalSince1970: 1_717_236_000))
            #expect(row["shifted"] == "2024-06-01 10:00:00+00")  // TimeZone=UTC and DateStyle=ISO are forced
            let bc = try row.decode(Date.self, "bc")
            let bcEpoch = try #require(try c.query("SELECT extract(epoch FROM '0044-03-15 12:00:00+00 BC'::timestamptz)::float8 AS e").first)
            #expect(bc.timeIntervalSince1970 == (try bcEpoch.decode(Double.self, "e")))
        }
    }

    @Test func byteaRoundTrips() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let all = (0...255).map { UInt8($0) }
            #expect(try Self.roundTrip(all, as: "bytea", on: c) == all)
            #expect(try Self.roundTrip([UInt8](), as: "bytea", on: c) == [])
            let length = try #require(try c.query("SELECT length($1::bytea) AS n", [all]).first)
            #expect(try length.decode(Int.self, "n") == 256)
            // The escape output format decodes too.
            try c.execute("SET bytea_output TO escape")
            #expect(try Self.roundTrip(all, as: "bytea", on: c) == all)
        }
    }

    @Test func arraysRoundTripWithQuotingAndNull() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let tricky = ["a", "", "with space", "comma,inside", "{braces}", "quote\"d", "back\\slash", "NULL", "null", "ünïcødé 🚀", " lead", "trail "]
            #expect(try Self.roundTrip(tricky, as: "text[]", on: c) == tricky)
            #expect(try Self.roundTrip([String](), as: "text[]", on: c) == [])
            // The server sees each element exactly (not just a round trip through our own parser).
            let elements = try c.query("SELECT u FROM unnest($1::text[]) WITH ORDINALITY AS t(u, i) ORDER BY i", [tricky])
            #expect(try elements.map { try $0.decode(String.self, "u") } == tricky)

            let withNull: [String?] = ["x", nil, "NULL"]
            let row = try #require(try c.query("SELECT $1::text[] AS v, ($1::text[])[2] IS NULL AS second_null, ($1::text[])[3] AS third", [withNull]).first)
            #expect(row["v"] == #"{x,NULL,"NULL"}"#)
            #expect(try row.decode(Bool.self, "second_null"))
            #expect(try row.decode(String.self, "third") == "NULL")
            #expect(throws: PostgresError.self) { try row.decode([String].self, "v") }

            let ids = [UUID(), UUID(), UUID()]
            #expect(try Self.roundTrip(ids, as: "uuid[]", on: c) == ids)
            let count = try #require(try c.query("SELECT count(*) AS n FROM unnest($1::uuid[])", [ids]).first)
            #expect(try count.decode(Int.self, "n") == 3)
            #expect(try Self.roundTrip([1, -2, Int.max], as: "int8[]", on: c) == [1, -2, Int.max])
            #expect(try Self.roundTrip([[1, 2], [3, 4]], as: "int4[]", on: c) == [[1, 2], [3, 4]])
            #expect(try Self.roundTrip([true, false], as: "bool[]", on: c) == [true, false])
            let blobs: [[UInt8]] = [[0, 1, 255], [], [0x5c, 0x22]]
            #expect(try Self.roundTrip(blobs, as: "bytea[]", on: c) == blobs)
            let dates = [Date(timeIntervalSince1970: 1_700_000_000.25), Date(timeIntervalSince1970: 0)]
            #expect(try Self.roundTrip(dates, as: "timestamptz[]", on: c) == dates)
            // Non-default lower bound output: [0:1]={a,b}
            let shifted = try #require(try c.query("SELECT '[0:1]={a,b}'::text[] AS v").first)
            #expect(try shifted.decode([String].self, "v") == ["a", "b"])
        }
    }

    @Test func optionalsAndRowAccess() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let none: Int? = nil
            let some: Int? = 7
            let row = try #require(try c.query("SELECT $1::int8 AS a, $2::int8 AS b, 'x' AS \"Mixed Case\"", [none, some]).first)
            #expect(row.columnNames == ["a", "b", "Mixed Case"])
            #expect(row["a"] == nil)
            #expect(try row.decodeIfPresent(Int.self, "a") == nil)
            #expect(try row.decodeIfPresent(Int.self, "b") == 7)
            #expect(row["Mixed Case"] == "x")
            let nullError = try #require(throws: PostgresError.self) { try row.decode(Int.self, "a") }
            #expect(nullError.code == .decodingFailed && nullError.message.contains("\"a\""))
            let missing = try #require(throws: PostgresError.self) { try row.decodeIfPresent(Int.self, "nope") }
            #expect(missing.code == .decodingFailed && missing.message.contains("\"nope\""))
            let bad = try #require(throws: PostgresError.self) { try row.decode(UUID.self, "Mixed Case") }
            #expect(bad.message.contains("Mixed Case"))

            let many = try c.query("SELECT g AS n FROM generate_series(1, 1000) AS g")
            #expect(many.count == 1000)
            #expect(many.affectedRows == 1000)
            #expect(try many.reduce(0) { $0 + (try $1.decode(Int.self, "n")) } == 500_500)
        }
    }

    @Test func arrayTextParserEdgeCases() throws {
        #expect(PostgresArrayText.parse("{}") == [])
        #expect(PostgresArrayText.parse(#"{a,"b,c",NULL,"NULL", d e }"#) == ["a", "b,c", nil, "NULL", "d e"])
        #expect(PostgresArrayText.parse(#"{"\\\"",{1,"}"}}"#) == [#"\""#, #"{1,"}"}"#])
        #expect(PostgresArrayText.parse("{a,b") == nil)
        #expect(PostgresArrayText.parse(#"{"a}"#) == nil)
        #expect(PostgresArrayText.parse("{a,,b}") == nil)
        #expect(PostgresTimestamp.parse("2024-13-01 00:00:00+00") == nil)
        #expect(PostgresTimestamp.parse("2024-01-01 00:00:00+00 junk") == nil)
        #expect(PostgresTimestamp.parse("2024-01-01T00:00:00Z") == Date(timeIntervalSince1970: 1_704_067_200))
        #expect(PostgresTimestamp.parse("2024-01-01 05:30:00+05:30") == Date(timeIntervalSince1970: 1_704_067_200))
    }

    /// A producer may store any instant PostgreSQL accepts; reading one back or writing it again must never
    /// trap (an overflow used to crash the worker on year 294276) nor produce text the server refuses.
    @Test func timestampsAtTheEdgesOfPostgresRangeNeitherTrapNorOverflow() async throws {
        #expect(PostgresTimestamp.parse("9999999-12-31 23:59:59+00") == nil)
        #expect(PostgresTimestamp.format(Date(timeIntervalSinceReferenceDate: 1e300)) == "infinity")
        #expect(PostgresTimestamp.format(Date(timeIntervalSinceReferenceDate: -1e300)) == "-infinity")
        #expect(PostgresTimestamp.format(Date(timeIntervalSinceReferenceDate: .nan)) == "-infinity")
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            for text in ["294276-12-31 00:00:00+00", "4714-11-24 00:00:00+00 BC", "0001-01-01 00:00:00+00 BC"] {
                let stored = try connection.query("SELECT $1::timestamptz AS t", [text])[0]
                let date = try stored.decode(Date.self, "t")
                // A Double holds about 2 ms of resolution in the year 294276: equal to that, never refused.
                let back = try connection.query(
                    "SELECT abs(extract(epoch FROM $1::timestamptz - $2::timestamptz)) < 0.01 AS same", [date, text])[0]
                #expect(back["same"] == "t", "\(text)")
            }
            // Past the last storable instant: written as infinity rather than refused.
            let beyond = try connection.query(
                "SELECT $1::timestamptz AS t", [Date(timeIntervalSinceReferenceDate: 9.3e12)])[0]
            #expect(beyond["t"] == "infinity")
        }
    }
}
