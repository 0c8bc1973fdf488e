import DeliveryCore
import Foundation
import Testing

/// RFC 8259 §6: numbers keep their JSON text from `jsonb` to the provider; nothing goes through `Double`.
@Suite struct JSONValueTests {
    @Test(arguments: [
        "12345678901234567890", "-12345678901234567890", "1.10", "0.1", "1e3", "1E+3", "2.5e-7", "-0", "-0.0",
        "3.141592653589793238462643383279", "123456789012345678901234567890.000000000000000000001", "1e400", "9223372036854775808",
    ])
    func numbersKeepTheirText(literal: String) throws {
        let value = try JSONValue(parsing: #"{"n":\#(literal),"list":[\#(literal)]}"#)
        #expect(value["n"] == .number(literal))
        #expect(value.jsonText == #"{"list":[\#(literal)],"n":\#(literal)}"#)
        #expect(NormalizedData.text(of: try #require(value["n"])) == literal)
    }

    @Test func canonicalIntegersStayInt() throws {
        let value = try JSONValue(parsing: "[0, -1, 3600, 9223372036854775807, -9223372036854775808]")
        #expect(value == [0, -1, 3600, .int(Int64.max), .int(Int64.min)])
        #expect(value.jsonText == "[0,-1,3600,9223372036854775807,-9223372036854775808]")
    }

    @Test func accessorsReadNumbers() throws {
        #expect(JSONValue.number("3600.0").int64Value == 3600)
        #expect(JSONValue.number("36e2").int64Value == 3600)
        #expect(JSONValue.number("1.5").int64Value == nil)
        #expect(JSONValue.number("12345678901234567890").int64Value == nil)
        #expect(JSONValue.number("1e400").doubleValue == .infinity)
        #expect(JSONValue.number("0.5").doubleValue == 0.5)
        #expect(JSONValue.number("1.10").numberText == "1.10")
        #expect(JSONValue.double(3600).numberText == "3600")
        #expect(JSONValue.string("1").numberText == nil)
    }

    /// The writer matches what `JSONEncoder` (`.sortedKeys`, `.withoutEscapingSlashes`) wrote before, so
    /// payload sizes and golden bodies do not move.
    @Test func serializationMatchesJSONEncoder() throws {
        let value: JSONValue = [
            "b": "\u{1}\u{1f}\u{7f}\u{2028}/é\"\\\t\n\r\u{8}\u{c}😀", "B": 1, "a10": 0.5, "a9": [true, false, nil], "_": 1e20,
            "é": ["x": 3600.0, "y": 1e-7], "A": [:], "e": [],
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        #expect(value.jsonText == String(decoding: try encoder.encode(value), as: UTF8.self))
        #expect(JSONValue.double(.nan).jsonText == "null")
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let nested: JSONValue = ["b": ["x": [1, 2], "e": [], "o": [:]], "a": [:], "s": "t"]
        let nestedExpected = String(decoding: try encoder.encode(nested), as: UTF8.self)
        #expect(nested.prettyJSONText == nestedExpected, "\(nestedExpected)")
        let valueExpected = String(decoding: try encoder.encode(value), as: UTF8.self)
        #expect(value.prettyJSONText == valueExpected, "\(valueExpected)")
        #expect(JSONValue.number("12345678901234567890").prettyJSONText == "12345678901234567890")
    }

    @Test func stringsRoundTrip() throws {
        let text = #"["\u00e9\ud83d\ude00\/\"\\\b\f\n\r\t", "ş", ""]"#
        let value = try JSONValue(parsing: text)
        #expect(value == ["é😀/\"\\\u{8}\u{c}\n\r\t", "ş", ""])
        #expect(try JSONValue(parsing: value.jsonText) == value)
    }

    @Test(arguments: [
        "", " ", "01", "1.", ".5", "+1", "1e", "-", "--1", "0x10", "NaN", "Infinity", "[1,]", "{\"a\":1,}", "{a:1}",
        "[1 2]", "\"\u{1}\"", "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"abc", "[", "{\"a\"}",
        "tru", "nul", "1 2", "'a'", "\"\\u12G4\"",
    ])
    func refusesWhatIsNotJSON(text: String) {
        #expect(throws: DecodingError.self) { try JSONValue(parsing: text) }
        // The shallow check refuses it too, at the top and nested where it builds nothing (blank text is an
        // empty array there).
        #expect(throws: DecodingError.self) { try JSONValue(validatingShallowly: Array(text.utf8)) }
        guard text.contains(where: { !$0.isWhitespace }) else { return }
        #expect(throws: DecodingError.self) { try JSONValue(validatingShallowly: Array("{\"aps\": {\"a\": [\(text)]}}".utf8)) }
    }

    @Test func theShallowCheckKeepsTheTopLevelAndEmptiesWhatIsNested() throws {
        let text = #"{"aps": {"alert": {"title": "\u00e9 ş"}, "badge": 1}, "list": [1, [2]], "n": 1.50, "s": "x\n", "t": true}"#
        #expect(try JSONValue(validatingShallowly: Array(text.utf8)) == ["aps": [:], "list": [], "n": .number("1.50"), "s": "x\n", "t": true])
        #expect(try JSONValue(validatingShallowly: Array("[1, {\"a\": 2}]".utf8)) == [1, [:]])
        #expect(try JSONValue(validatingShallowly: Array("\"top\"".utf8)) == "top")
        // Invalid UTF-8 and over-deep nesting below the kept level are still refused.
        #expect(throws: DecodingError.self) { try JSONValue(validatingShallowly: [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x5B, 0x22, 0xFF, 0x22, 0x5D, 0x7D]) }
        let tooDeep = "{\"a\": " + String(repeating: "[", count: 512) + String(repeating: "]", count: 512) + "}"
        #expect(throws: DecodingError.self) { try JSONValue(validatingShallowly: Array(tooDeep.utf8)) }
    }

    @Test func refusesInvalidUTF8AndDeepNesting() throws {
        #expect(throws: DecodingError.self) { try JSONValue(parsing: [0x22, 0xFF, 0x22]) }
        #expect(throws: DecodingError.self) { try JSONValue(parsing: String(repeating: "[", count: 513) + String(repeating: "]", count: 513)) }
        let deepest = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(try JSONValue(parsing: deepest).arrayValue != nil)
    }

    @Test func lastRepeatedKeyWinsAndWhitespaceIsAllowed() throws {
        #expect(try JSONValue(parsing: " \t\r\n{ \"a\" : 1 , \"a\" : [ ] }\n") == ["a": []])
        #expect(try JSONValue(parsing: "true") == true)
    }

    /// The string-object writer gives the same text as the general one, for keys given in any order and for
    /// values that need escaping, non-ASCII and empty ones.
    @Test func anObjectOfStringsIsWrittenAsTheGeneralWriterWritesIt() {
        let members: [(key: String, value: String)] = [
            ("provider", "apns"), ("apns_id", "0a1b"), ("provider_message_id", "q\"uo\\te\n\u{01}/ş🙂"),
            ("a", ""), ("Z", "upper"), ("ä", "after z"),
        ]
        let general = JSONValue.object(Dictionary(uniqueKeysWithValues: members.map { ($0.key, JSONValue.string($0.value)) })).jsonText
        #expect(JSONValue.objectText(ofStrings: members) == general)
        #expect(JSONValue.objectText(ofStrings: members.reversed()) == general)
        #expect(JSONValue.objectText(ofStrings: []) == "{}")
    }
}
