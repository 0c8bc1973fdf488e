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

    @Test func laterFormsAreRecognizedButNotExpanded() throws {
        #expect(try AudienceSelection(parsing: ["all": true]).target == .unsupported(form: "all"))
        #expect(try AudienceSelection(parsing: ["filters": []]).target == .unsupported(form: "filters"))
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
    ] as [(JSONValue, String)])
    func refusesBadTargetsNamingTheKey(target: JSONValue, expected: String) {
        #expect {
            try AudienceSelection(parsing: target)
        } throws: { error in
            (error as? AudienceTargetError)?.message.contains(expected) == true
        }
    }

    @Test func refusesMoreThanTwentyThousandIDs() {
        let ids = JSONValue.array((0...AudienceTarget.maximumIDs).map { .string("user-\($0)") })
        #expect(throws: AudienceTargetError.self) {
            try AudienceSelection(parsing: ["include_external_ids": ids])
        }
    }
}
