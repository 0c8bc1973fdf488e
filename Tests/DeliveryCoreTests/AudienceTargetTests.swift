import DeliveryCore
import Foundation
import Testing

@Suite("AudienceSelection parses notifications.target")
struct AudienceTargetTests {
    @Test func subscriptionIDsWithPlatforms() throws {
        let id = UUID()
        let selection = try AudienceSelection(
            parsing: ["include_subscription_ids": [.string(id.uuidString)], "platforms": ["ios", "web"]])
        #expect(selection.target == .subscriptionIDs([id]))
        #expect(selection.platforms == ["ios", "web"])
    }

    @Test func externalIDs() throws {
        let selection = try AudienceSelection(parsing: ["include_external_ids": ["u1", "u2"]])
        #expect(selection.target == .externalIDs(["u1", "u2"]))
        #expect(selection.platforms == nil)
    }

    /// A repeated id is listed once, in the order first given: it would reach its device once anyway, and is
    /// then neither looked up nor counted against a bulk pass's budget again. External ids are compared by their
    /// bytes, as PostgreSQL compares them (case and Unicode normalization both tell users apart); a UUID's text in
    /// either case is the same subscription.
    @Test func repeatedIDsAreListedOnce() throws {
        let id = UUID()
        let other = UUID()
        let subscriptions = try AudienceSelection(parsing: [
            "include_subscription_ids": [.string(id.uuidString), .string(other.uuidString), .string(id.uuidString.lowercased())]
        ])
        #expect(subscriptions.target == .subscriptionIDs([id, other]))
        let users = try AudienceSelection(parsing: ["include_external_ids": ["u2", "u1", "u2", "U1", "u1"]])
        #expect(users.target == .externalIDs(["u2", "u1", "U1"]))
        #expect(subscriptions.target.listedIDCount == 2 && users.target.listedIDCount == 3)
        #expect(AudienceTarget.all.listedIDCount == 0)
        // Two spellings of "café" (precomposed é, and e + U+0301) are equal as Swift strings but two users.
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        let accented = try AudienceSelection(parsing: ["include_external_ids": [.string(composed), .string(decomposed), .string(composed)]])
        guard case .externalIDs(let ids) = accented.target else { Issue.record("\(accented.target)"); return }
        #expect(ids.map { Array($0.utf8) } == [Array(composed.utf8), Array(decomposed.utf8)])
    }

    @Test func allAndFilters() throws {
        #expect(try AudienceSelection(parsing: ["all": true, "platforms": ["web"]]).target == .all)
        let selection = try AudienceSelection(parsing: [
            "filters": [
                ["field": "tag", "key": "level", "relation": ">", "value": 3],
                ["field": "tag", "key": "vip", "relation": "=", "value": true],
                ["field": "tag", "key": "plan", "relation": "in", "value": ["gold", 2]],
                ["field": "tag", "key": "gone", "relation": "not_exists"],
                ["field": "tag", "key": "score", "relation": "<", "value": 2.5],
                ["field": "language", "relation": "!=", "value": "tr"],
                ["field": "country", "relation": "exists"],
                ["field": "platform", "relation": "in", "value": ["ios", "web"]],
            ]
        ])
        #expect(
            selection.target
                == .filters([
                    AudienceFilter(field: .tag(key: "level"), relation: .greaterThan("3")),
                    AudienceFilter(field: .tag(key: "vip"), relation: .equals("true")),
                    AudienceFilter(field: .tag(key: "plan"), relation: .oneOf(["gold", "2"])),
                    AudienceFilter(field: .tag(key: "gone"), relation: .notExists),
                    AudienceFilter(field: .tag(key: "score"), relation: .lessThan("2.5")),
                    AudienceFilter(field: .language, relation: .notEquals("tr")),
                    AudienceFilter(field: .country, relation: .exists),
                    AudienceFilter(field: .platform, relation: .oneOf(["ios", "web"])),
                ]))
        #expect(!selection.target.isListed)
        #expect(AudienceTarget.externalIDs(["a"]).isListed)
    }

    @Test(arguments: [
        (JSONValue.array([]), "must be a JSON object"),
        (JSONValue.object([:]), "names no audience"),
        (["include_external_ids": [], "all": true], "several audiences"),
        (["include_external_ids": []], "include_external_ids is empty"),
        (["include_external_ids": [1]], "include_external_ids[0] must be a non-empty string"),
        (["include_subscription_ids": ["nope"]], "include_subscription_ids[0] is not a UUID"),
        (["include_external_ids": ["a"], "platforms": ["tv"]], "unknown platform \"tv\""),
        (["include_external_ids": ["a"], "segment": "x"], "unknown target key \"segment\""),
        (["all": false], "all must be true"),
        (["filters": []], "filters is empty"),
        (["filters": ["x"]], "filters[0] must be an object"),
        (["filters": [["field": "tag", "key": "a"]]], "filters[0].relation must be a string"),
        (["filters": [["field": "tag", "key": "a", "relation": "~", "value": "x"]]], "relation \"~\" is unknown"),
        (["filters": [["field": "tag", "relation": "=", "value": "x"]]], "filters[0].key must be a non-empty string"),
        (["filters": [["field": "city", "relation": "=", "value": "x"]]], "field \"city\" is unknown"),
        (["filters": [["field": "tag", "key": "a", "relation": ">", "value": "three"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "0x10"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "1e400"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "1e1000"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "inf"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": ""]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "."]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": "1 000"]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": "<", "value": true]]], "value must be a number or a numeric string"),
        (["filters": [["field": "tag", "key": "a", "relation": ">", "value": .number("1e400")]]], "value must be a number or a numeric string"),
        (["filters": [["field": "language", "relation": ">", "value": 3]]], "applies to tag filters only"),
        (["filters": [["field": "tag", "key": "a", "relation": "=", "value": ["x"]]]], "value must be a string or a number"),
        (["filters": [["field": "tag", "key": "a", "relation": "=", "value": .null]]], "value must be a string or a number"),
        (["filters": [["field": "tag", "key": "a", "relation": "in", "value": []]]], "non-empty array for in"),
        (["filters": [["field": "tag", "key": "a", "relation": "exists", "value": 1]]], "not allowed with exists"),
        (["filters": [["field": "platform", "relation": "=", "value": "tv"]]], "unknown platform \"tv\""),
        (["filters": [["field": "platform", "relation": "exists"]]], "does not apply to platform"),
        (["filters": [["field": "language", "key": "x", "relation": "=", "value": "tr"]]], "key is only for tag"),
        (["filters": [["field": "tag", "key": "a", "relation": "=", "value": "x", "op": 1]]], "unknown key \"op\""),
    ] as [(JSONValue, String)])
    func refusesBadTargetsNamingTheKey(target: JSONValue, expected: String) {
        #expect {
            try AudienceSelection(parsing: target)
        } throws: { error in
            (error as? AudienceTargetError)?.message.contains(expected) == true
        }
    }

    /// OneSignal's filters send numbers as strings (`"value": "15"`); `>` and `<` read them as the tag
    /// strings are read (`pushizo_numeric_or_null`), and JSON numbers keep their exact text.
    @Test(arguments: [
        (JSONValue.string("15"), "15"), (" 15 ", "15"), ("-2.5", "-2.5"), ("+7", "+7"), ("15.", "15."), (".5", ".5"),
        ("1e3", "1e3"), ("1E-3", "1E-3"), ("\t8\n", "8"), (15, "15"), (2.5, "2.5"),
        (.number("12345678901234567890"), "12345678901234567890"), (.number("1.10"), "1.10"),
    ] as [(JSONValue, String)])
    func numericStringsAndExactNumbersCompare(value: JSONValue, expected: String) throws {
        for (relation, expectedRelation) in [(">", AudienceFilter.Relation.greaterThan(expected)), ("<", .lessThan(expected))] {
            let selection = try AudienceSelection(
                parsing: ["filters": [["field": "tag", "key": "level", "relation": .string(relation), "value": value]]])
            #expect(selection.target == .filters([AudienceFilter(field: .tag(key: "level"), relation: expectedRelation)]))
        }
    }

    @Test func equalityKeepsTheNumberAsWritten() throws {
        let target = try JSONValue(parsing: #"{"filters": [{"field": "tag", "key": "id", "relation": "=", "value": 12345678901234567890}]}"#)
        #expect(try AudienceSelection(parsing: target).target
            == .filters([AudienceFilter(field: .tag(key: "id"), relation: .equals("12345678901234567890"))]))
    }

    @Test func refusesTooManyFiltersAndInValues() {
        let filter: JSONValue = ["field": "country", "relation": "exists"]
        let many = JSONValue.array(Array(repeating: filter, count: AudienceTarget.maximumFilters + 1))
        #expect(throws: AudienceTargetError("filters lists 101 filters; at most 100")) {
            try AudienceSelection(parsing: ["filters": many])
        }
        let values = JSONValue.array((0...AudienceTarget.maximumIDs).map { .string("v\($0)") })
        #expect(throws: AudienceTargetError.self) {
            try AudienceSelection(parsing: ["filters": [["field": "tag", "key": "a", "relation": "in", "value": values]]])
        }
    }

    @Test func refusesMoreThanTwentyThousandIDs() {
        let ids = JSONValue.array((0...AudienceTarget.maximumIDs).map { .string("user-\($0)") })
        #expect(throws: AudienceTargetError.self) {
            try AudienceSelection(parsing: ["include_external_ids": ids])
        }
    }
}
