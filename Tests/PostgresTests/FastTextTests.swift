import Foundation
import Testing
@testable import Postgres

/// The byte-level parsers and writers behind parameters and results give exactly what the general
/// conversions (Foundation's, Swift's, the element-by-element array literal) give.
@Suite("Parameter and result text without intermediate strings")
struct FastTextTests {
    @Test func malformedUUIDTextIsADecodingError() throws {
        for malformed in ["", "00112233-4455-6677-8899-aabbccddeef", "0011223g-4455-6677-8899-aabbccddeeff"] {
            #expect(throws: PostgresError.self) { try UUID(postgresText: malformed) }
        }
        let id = UUID()
        #expect(try UUID(postgresText: id.uuidString.lowercased()) == id)
        #expect(id.postgresText == id.uuidString.lowercased())
    }

    /// Each integer type reads exactly the texts its `String` initializer reads, with the same value.
    @Test func integersFromBytesAgreeWithSwiftsParser() throws {
        let texts = [
            "0", "-0", "+7", "42", "-", "+", "", "12a", "a12", " 1", "1 ", "--1", "+-1", "007",
            "127", "128", "-128", "-129", "255", "256", "-1",
            "2147483647", "2147483648", "-2147483648", "-2147483649",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
            "99999999999999999999999",
        ]
        func check<T: FixedWidthInteger & PostgresDecodable>(_ type: T.Type) {
            for text in texts {
                var copy = text
                let fromBytes = copy.withUTF8 { try? T(postgresBytes: $0) }
                #expect(fromBytes == T(text), "\(T.self) from \"\(text)\"")
            }
        }
        check(Int.self)
        check(Int64.self)
        check(Int32.self)
        check(UInt8.self)
    }

    @Test func boolUUIDDateAndByteaFromBytes() throws {
        func bytes<T: PostgresDecodable>(_ text: String, _ type: T.Type) throws -> T {
            var copy = text
            return try copy.withUTF8 { try T(postgresBytes: $0) }
        }
        #expect(try bytes("t", Bool.self) == true)
        #expect(try bytes("false", Bool.self) == false)
        #expect(throws: PostgresError.self) { try bytes("x", Bool.self) }
        let id = UUID()
        #expect(try bytes(id.uuidString.lowercased(), UUID.self) == id)
        #expect(try bytes("2024-06-01 10:00:00.25+00", Date.self) == Date(timeIntervalSince1970: 1_717_236_000.25))
        #expect(try bytes("-infinity", Date.self) == .distantPast)
        #expect(try bytes("0044-03-15 12:00:00+00 BC", Date.self) == PostgresTimestamp.parse("0044-03-15 12:00:00+00 BC"))
        #expect(throws: PostgresError.self) { try bytes("2024-06-01 10:00:00+00 AD", Date.self) }
        #expect(try bytes(#"\x00ff5c"#, [UInt8].self) == [0, 255, 0x5c])
        #expect(throws: PostgresError.self) { try bytes(#"\x0"#, [UInt8].self) }
        #expect(try bytes("{1,2}", [Int].self) == [1, 2])
        #expect(try bytes("ünï", String.self) == "ünï")
    }

    /// The literal each element type writes itself is the one the general path writes: every element's
    /// `postgresText` double-quoted with `"` and `\` escaped, `NULL` for nil.
    @Test func arrayLiteralsAreTheGeneralForm() throws {
        func general<T: PostgresEncodable>(_ values: [T]) -> String {
            "{" + values.map { value in
                guard let text = value.postgresText else { return "NULL" }
                var quoted = "\""
                for character in text {
                    if character == "\"" || character == "\\" { quoted.append("\\") }
                    quoted.append(character)
                }
                return quoted + "\""
            }.joined(separator: ",") + "}"
        }
        let strings: [String?] = ["a", nil, "", "quote\"d", "back\\slash\\\"", "ünïcødé 🚀", "NULL", "{,}"]
        #expect(strings.postgresText == general(strings))
        #expect(strings.compactMap { $0 }.postgresText == general(strings.compactMap { $0 }))
        let ids: [UUID?] = [UUID(), nil, UUID()]
        #expect(ids.postgresText == general(ids))
        let dates: [Date?] = [
            Date(timeIntervalSince1970: 1_700_000_000.123456), nil, .distantFuture, .distantPast,
            PostgresTimestamp.parse("0044-03-15 12:00:00+00 BC"), Date(timeIntervalSinceReferenceDate: 0),
        ]
        #expect(dates.postgresText == general(dates))
        let integers: [Int64?] = [0, -1, .max, .min, nil]
        #expect(integers.postgresText == general(integers))
        #expect([Int32.min, 7].postgresText == general([Int32.min, 7]))
        #expect([1, -2].postgresText == general([1, -2]))
        let flags: [Bool?] = [true, nil, false]
        #expect(flags.postgresText == general(flags))
        #expect([1.5, -0.25].postgresText == general([1.5, -0.25]))
        #expect([String]().postgresText == "{}")
    }

    /// The server reads every element of the literals each type writes, NULLs and edge instants included.
    @Test func serverReadsEveryElement() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            let dates: [Date?] = [Date(timeIntervalSince1970: 1_700_000_000.5), nil, .distantFuture, .distantPast]
            let ids: [UUID?] = [UUID(), nil]
            let integers: [Int64?] = [.min, nil, .max]
            let flags: [Bool?] = [nil, true, false]
            let row = try #require(try c.query(
                """
                SELECT array_to_string(array(SELECT coalesce(extract(epoch FROM d)::text, 'null') FROM unnest($1::timestamptz[]) d), ',') AS dates,
                       array_to_string(array(SELECT coalesce(u::text, 'null') FROM unnest($2::uuid[]) u), ',') AS ids,
                       array_to_string(array(SELECT coalesce(i::text, 'null') FROM unnest($3::int8[]) i), ',') AS integers,
                       array_to_string(array(SELECT coalesce(b::text, 'null') FROM unnest($4::bool[]) b), ',') AS flags
                """, [dates, ids, integers, flags]).first)
            #expect(row["dates"] == "1700000000.500000,null,Infinity,-Infinity")
            #expect(row["ids"] == "\(ids[0]!.uuidString.lowercased()),null")
            #expect(row["integers"] == "-9223372036854775808,null,9223372036854775807")
            #expect(row["flags"] == "null,true,false")
        }
    }

    /// A column that repeats down a result is decoded once per run of equal bytes: each row still gets its own
    /// value, a NULL between equal values leaves the kept one in place, and a bad value names its column.
    @Test func repeatedValuesAreDecodedOncePerRun() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            let long = String(repeating: "settings ", count: 40)
            let rows = try c.query(
                """
                SELECT t, b FROM (VALUES (1, $1, '\\x0102'::bytea), (2, $1, '\\x0102'), (3, NULL, NULL), (4, $1, '\\x0102'),
                                         (5, 'other', '\\x03'), (6, $1, '\\x0102'), (7, 'other', '\\x03'),
                                         (8, 'otheR', '\\x04'), (9, '', '\\x'), (10, '', '\\x')) v(n, t, b) ORDER BY n
                """, [long])
            var text = PostgresRepeatedValue<String>()
            var bytes = PostgresRepeatedValue<[UInt8]>()
            var seen: [(String?, [UInt8]?, [UInt8])] = []
            for row in rows {
                let t = try row.decodeIfPresent(String.self, at: 0, repeating: &text)
                let b = try row.decodeIfPresent([UInt8].self, at: 1, repeating: &bytes)
                seen.append((t, b, text.raw))
            }
            // Equal lengths with different bytes (7, 8) are told apart; empty values repeat too (9, 10).
            #expect(seen.map(\.0) == [long, long, nil, long, "other", long, "other", "otheR", "", ""])
            #expect(seen.map(\.1) == [[1, 2], [1, 2], nil, [1, 2], [3], [1, 2], [3], [4], [], []])
            // What is kept: the last non-NULL value's bytes.
            #expect(seen.map { String(decoding: $0.2, as: UTF8.self) } == [long, long, long, long, "other", long, "other", "otheR", "", ""])
            var number = PostgresRepeatedValue<Int>()
            let bad = try c.query("SELECT 'x' || n AS count FROM generate_series(1, 2) n")
            #expect { _ = try bad[0].decodeIfPresent(Int.self, at: 0, repeating: &number) } throws: { error in
                (error as? PostgresError)?.message.contains("column \"count\"") == true
            }
            #expect(number.value == nil)
        }
    }
}
