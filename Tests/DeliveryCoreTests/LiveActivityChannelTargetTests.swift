import Testing
@testable import DeliveryCore

/// The `{"live_activity_channel": "<name>"}` target form (docs/targets.md, "A Live Activity broadcast channel").
@Suite struct LiveActivityChannelTargetTests {
    func parse(_ text: String) throws -> LiveActivityChannelTarget? {
        try LiveActivityChannelTarget(parsing: try JSONValue(parsing: text))
    }

    @Test func namesOneChannelAlone() throws {
        #expect(try parse(#"{"live_activity_channel": "match-7"}"#) == LiveActivityChannelTarget(name: "match-7"))
        // Another form is not this one's to judge.
        #expect(try parse(#"{"all": true}"#) == nil)
    }

    @Test func refusesWhatIsNotOneNameAlone() {
        for (text, message) in [
            (#"{"live_activity_channel": "m", "platforms": ["ios"]}"#, #"live_activity_channel stands alone; remove "platforms""#),
            (#"{"live_activity_channel": "m", "all": true}"#, #"live_activity_channel stands alone; remove "all""#),
            (#"{"live_activity_channel": ""}"#, "live_activity_channel must be a non-empty string"),
            (#"{"live_activity_channel": 7}"#, "live_activity_channel must be a non-empty string"),
            (#"{"live_activity_channel": "\#(String(repeating: "x", count: 201))"}"#, "live_activity_channel is longer than 200 bytes"),
        ] {
            #expect(throws: AudienceTargetError(message)) { try parse(text) }
        }
    }
}
