import DeliveryCore
import Testing

@Suite("apps.frequency_caps parsing")
struct FrequencyCapsTests {
    @Test func parsesRulesInOrder() throws {
        let caps = try FrequencyCaps(jsonText: #"[{"max": 3, "per_seconds": 86400}, {"per_seconds": 3600, "max": 1.0}]"#)
        #expect(caps.rules == [FrequencyCapRule(max: 3, perSeconds: 86_400), FrequencyCapRule(max: 1, perSeconds: 3600)])
        #expect(caps.longestRuleWindow == 86_400)
        #expect(!caps.isEmpty)
        #expect(try FrequencyCaps(parsing: caps.jsonValue) == caps)
    }

    @Test func emptyListIsNoCaps() throws {
        let caps = try FrequencyCaps(jsonText: "[]")
        #expect(caps.isEmpty)
        #expect(caps.longestRuleWindow == 0)
    }

    @Test(arguments: [
        (#"{"max": 3}"#, "notAnArray", "frequency_caps"),
        ("nonsense", "notJSON", "frequency_caps"),
        ("[3]", "notAnObject", "frequency_caps[0]"),
        (#"[{"max": 3}]"#, "missingMember", "frequency_caps[0].per_seconds"),
        (#"[{"per_seconds": 60}]"#, "missingMember", "frequency_caps[0].max"),
        (#"[{"max": null, "per_seconds": 60}]"#, "missingMember", "frequency_caps[0].max"),
        (#"[{"max": 1, "per_seconds": 60}, {"max": 3, "per_second": 60}]"#, "unknownMember", "frequency_caps[1].per_second"),
        (#"[{"max": 2.5, "per_seconds": 60}]"#, "invalidNumber", "frequency_caps[0].max"),
        (#"[{"max": "3", "per_seconds": 60}]"#, "invalidNumber", "frequency_caps[0].max"),
        (#"[{"max": -1, "per_seconds": 60}]"#, "invalidNumber", "frequency_caps[0].max"),
        (#"[{"max": 1000001, "per_seconds": 60}]"#, "invalidNumber", "frequency_caps[0].max"),
        (#"[{"max": 3, "per_seconds": 0}]"#, "invalidNumber", "frequency_caps[0].per_seconds"),
        (#"[{"max": 3, "per_seconds": 31622401}]"#, "invalidNumber", "frequency_caps[0].per_seconds"),
        (#"[{"max": 3, "per_seconds": 1e300}]"#, "invalidNumber", "frequency_caps[0].per_seconds"),
    ])
    func refusesMalformedRulesNamingThePlace(text: String, code: String, field: String) {
        #expect {
            _ = try FrequencyCaps(jsonText: text)
        } throws: { error in
            guard let error = error as? FrequencyCapsError else { return false }
            return error.code.description == code && error.field == field
        }
    }

    @Test func boundsAreInclusive() throws {
        let caps = try FrequencyCaps(jsonText: #"[{"max": 0, "per_seconds": 1}, {"max": 1000000, "per_seconds": 31622400}]"#)
        #expect(caps.rules.map(\.max) == [0, 1_000_000])
    }
}
