import Foundation
import Testing
@testable import DeliveryCore

/// `apns_push_type` and `live_activity`: each rule of the message fields with its minimal input, and the
/// decision path for VoIP and Live Activity pushes (exempt from nothing unless the message says so).
@Suite struct PushTypeMessageTests {
    func parse(_ json: String) throws -> NotificationMessage {
        try NotificationMessage(json: try JSONValue(parsing: json))
    }

    /// The field a refused message names, and the start of its reason.
    func refusal(_ json: String) -> String {
        do {
            _ = try parse(json)
            return "accepted"
        } catch let error as MessageError {
            return error.field
        } catch {
            return "\(error)"
        }
    }

    static let update = #""live_activity": {"event": "update", "timestamp": 1685952000, "content_state": {"level": 1}}"#

    @Test func voipNeedsNoTextAndCarriesData() throws {
        let message = try parse(#"{"apns_push_type": "voip", "data": {"caller": "Ann"}}"#)
        #expect(message.apnsPushType == .voip)
        #expect(message.liveActivity == nil)
        #expect(APNsPushType.voip.subscriptionKind == "voip")
        #expect(APNsPushType.voip.topicSuffix == ".voip")
    }

    @Test func liveActivityMembersAreRead() throws {
        let message = try parse(#"""
            {"apns_push_type": "liveactivity", "contents": {"en": "Adventure started"},
             "live_activity": {"event": "start", "timestamp": 1705547598, "content_state": {"level": 100},
                               "stale_date": 1705551198, "relevance_score": 100, "attributes_type": "AdventureAttributes",
                               "attributes": {"name": "Power Panda"}}}
            """#)
        #expect(message.apnsPushType == .liveActivity)
        #expect(message.liveActivity == .init(
            event: .start, timestamp: 1_705_547_598, contentState: ["level": 100], staleDate: 1_705_551_198,
            relevanceScore: 100, attributesType: "AdventureAttributes", attributes: ["name": "Power Panda"]))
        #expect(APNsPushType.liveActivity.topicSuffix == ".push-type.liveactivity")
        // An update or end needs no text; an end needs no content state.
        #expect(try parse(#"{"apns_push_type": "liveactivity", \#(Self.update)}"#).liveActivity?.event == .update)
        #expect(try parse(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1, "dismissal_date": 2}}"#)
            .liveActivity?.dismissalDate == 2)
    }

    @Test func eachRuleNamesItsField() {
        #expect(refusal(#"{"apns_push_type": "alrt", "contents": "x"}"#) == "apns_push_type")
        #expect(refusal(#"{"apns_push_type": 1, "contents": "x"}"#) == "apns_push_type")
        #expect(refusal(#"{"apns_push_type": "voip", "contents": "Ann calls"}"#) == "contents")
        #expect(refusal(#"{"apns_push_type": "voip", "headings": {"en": "Call"}}"#) == "headings")
        #expect(refusal(#"{"apns_push_type": "voip", "content_available": true}"#) == "content_available")
        #expect(refusal(#"{"apns_push_type": "voip", \#(Self.update)}"#) == "live_activity")
        #expect(refusal(#"{"contents": "x", \#(Self.update)}"#) == "live_activity")
        #expect(refusal(#"{"apns_push_type": "liveactivity"}"#) == "live_activity")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": []}"#) == "live_activity")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"timestamp": 1, "content_state": {}}}"#) == "live_activity.event")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "begin", "timestamp": 1, "content_state": {}}}"#) == "live_activity.event")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "content_state": {}}}"#) == "live_activity.timestamp")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": -1, "content_state": {}}}"#) == "live_activity.timestamp")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1.5, "content_state": {}}}"#) == "live_activity.timestamp")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": "1", "content_state": {}}}"#) == "live_activity.timestamp")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1}}"#) == "live_activity.content_state")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1, "content_state": [1]}}"#) == "live_activity.content_state")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1, "content_state": {}, "dismissal_date": 5}}"#) == "live_activity.dismissal_date")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1, "stale_date": -5}}"#) == "live_activity.stale_date")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1, "relevance_score": "high"}}"#) == "live_activity.relevance_score")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1, "content_state": {}, "attributes": {}}}"#) == "live_activity.attributes")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1, "attributes_type": "A"}}"#) == "live_activity.attributes_type")
        let start = #""event": "start", "timestamp": 1, "content_state": {}"#
        #expect(refusal(#"{"apns_push_type": "liveactivity", "contents": "x", "live_activity": {\#(start), "attributes": {}}}"#) == "live_activity.attributes_type")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "contents": "x", "live_activity": {\#(start), "attributes_type": "", "attributes": {}}}"#) == "live_activity.attributes_type")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "contents": "x", "live_activity": {\#(start), "attributes_type": "A"}}"#) == "live_activity.attributes")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "live_activity": {\#(start), "attributes_type": "A", "attributes": {}}}"#) == "contents")
        #expect(refusal(#"{"apns_push_type": "liveactivity", "contents": "x", "live_activity": {\#(start), "attributes_type": "A", "attributes": {}}}"#) == "accepted")
    }

    /// Apple's Live Activity dates are UNIX epoch seconds; a millisecond value (JavaScript's `Date.now()`) would
    /// read as a time thousands of years ahead, and ActivityKit then ignores every correct update after it.
    @Test(arguments: ["timestamp", "stale_date", "dismissal_date"])
    func millisecondDatesAreRefusedNamingTheirField(member: String) throws {
        var members = ["\"timestamp\": 1764590400"]
        members.append("\"\(member)\": 1764590400000")
        let message = #"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", \#(members.joined(separator: ", "))}}"#
        let error = try #require(throws: MessageError.self) { try parse(message) }
        #expect(error.field == "live_activity.\(member)")
        #expect(error.code == .invalidValue)
        #expect(error.message.contains("milliseconds: send 1764590400"), "\(error.message)")
        // The same member in seconds is accepted.
        let seconds = #"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1764590400, "\#(member)": 1764590400}}"#
        #expect(try parse(seconds).liveActivity != nil)
    }

    @Test func epochSecondsRangeEndsBefore2200() throws {
        func timestamp(_ value: Int) -> String {
            #"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": \#(value)}}"#
        }
        #expect(NotificationMessage.LiveActivity.latestEpochSeconds == 7_258_118_399)  // 2199-12-31T23:59:59Z
        #expect(try parse(timestamp(0)).liveActivity?.timestamp == 0)
        #expect(try parse(timestamp(7_258_118_399)).liveActivity?.timestamp == 7_258_118_399)
        #expect(refusal(timestamp(7_258_118_400)) == "live_activity.timestamp")
        // Microseconds are no seconds either, and the reason does not pretend they are milliseconds.
        let error = try #require(throws: MessageError.self) { try parse(timestamp(1_764_590_400_000_000)) }
        #expect(error.message.hasSuffix("which is not a time in seconds"), "\(error.message)")
    }

    /// The types beyond VoIP and Live Activity (Apple, "Sending notification requests to APNs", the
    /// `apns-push-type` table): each its own subscription kind and topic suffix, no text, its members.
    @Test func everyOtherPushTypeIsReadWithItsMembers() throws {
        let suffixes: [APNsPushType: String] = [
            .location: ".location-query", .pushToTalk: ".voip-ptt", .complication: ".complication",
            .fileProvider: ".pushkit.fileprovider", .mdm: "", .widgets: ".push-type.widgets",
        ]
        for (type, suffix) in suffixes {
            #expect(type.topicSuffix == suffix)
            #expect(try APNsPushType.subscriptionKind(of: .string(type.rawValue)) == type.rawValue)
        }
        #expect(try parse(#"{"apns_push_type": "location", "data": {"query": 7}}"#).apnsPushType == .location)
        #expect(try parse(#"{"apns_push_type": "pushtotalk", "data": {"speaker": "Ann"}}"#).apnsPushType == .pushToTalk)
        #expect(try parse(#"{"apns_push_type": "complication"}"#).apnsPushType == .complication)
        #expect(try parse(#"{"apns_push_type": "widgets"}"#).apnsPushType == .widgets)
        let files = try parse(#"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "NSFileProviderWorkingSetContainerItemIdentifier", "domain": "work"}}"#)
        #expect(files.fileProvider == .init(containerIdentifier: "NSFileProviderWorkingSetContainerItemIdentifier", domain: "work"))
        #expect(try parse(#"{"apns_push_type": "mdm", "mdm_push_magic": "8A1F-magic"}"#).mdmPushMagic == "8A1F-magic")
        // Credentials and fixed headers, as Apple documents them per type.
        #expect(APNsPushType.allCases.filter { $0.credentials == .token } == [.liveActivity, .location, .fileProvider, .widgets])
        #expect(APNsPushType.allCases.filter { $0.credentials == .certificate } == [.mdm])
        #expect(APNsPushType.allCases.filter(\.alwaysHighPriority) == [.voip, .pushToTalk])
        #expect(APNsPushType.allCases.filter(\.expiresImmediately) == [.pushToTalk])
    }

    @Test func everyOtherPushTypeRuleNamesItsField() {
        for type in ["location", "pushtotalk", "complication", "widgets"] {
            #expect(refusal(#"{"apns_push_type": "\#(type)", "contents": "x"}"#) == "contents")
            #expect(refusal(#"{"apns_push_type": "\#(type)", "content_available": true}"#) == "content_available")
        }
        #expect(refusal(#"{"apns_push_type": "fileprovider"}"#) == "file_provider.container_identifier")
        #expect(refusal(#"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": ""}}"#) == "file_provider.container_identifier")
        #expect(refusal(#"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": 5}}"#) == "file_provider.container_identifier")
        #expect(refusal(#"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "a", "domain": 1}}"#) == "file_provider.domain")
        #expect(refusal(#"{"apns_push_type": "mdm"}"#) == "mdm_push_magic")
        #expect(refusal(#"{"apns_push_type": "mdm", "mdm_push_magic": ""}"#) == "mdm_push_magic")
        for message in [
            #"{"apns_push_type": "mdm", "mdm_push_magic": "m", "data": {"a": 1}}"#,
            #"{"apns_push_type": "widgets", "data": {"a": 1}}"#,
            #"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "a"}, "data": {"a": 1}}"#,
        ] {
            #expect(refusal(message) == "data")
        }
        // A type's member without that type.
        #expect(refusal(#"{"contents": "x", "mdm_push_magic": "m"}"#) == "mdm_push_magic")
        #expect(refusal(#"{"apns_push_type": "voip", "file_provider": {"container_identifier": "a"}}"#) == "file_provider")
    }

    @Test func expansionReadsTheKindByTheSameRules() throws {
        #expect(try APNsPushType.subscriptionKind(of: nil) == "device")
        #expect(try APNsPushType.subscriptionKind(of: .null) == "device")
        #expect(try APNsPushType.subscriptionKind(of: "voip") == "voip")
        #expect(try APNsPushType.subscriptionKind(of: "liveactivity") == "liveactivity")
        #expect(throws: MessageError.self) { try APNsPushType.subscriptionKind(of: "alert") }
        #expect(throws: MessageError.self) { try APNsPushType.subscriptionKind(of: 5) }
    }

    // MARK: The decision path

    let now = Date(timeIntervalSince1970: 1_780_000_000)

    func decide(_ json: String, platform: String = "ios", quietHours: Bool = false, caps: Bool = false) throws -> String {
        var facts = DeliveryFacts(
            attempt: 1, maxAttempts: 3, notificationCanceled: false, notificationStart: now,
            subscriptionID: UUID(), capKey: UUID(), subscriptionStatus: "active", platform: Platform(platform),
            hasChannel: true, channelPausedUntil: nil,
            quietHoursStart: quietHours ? "00:00:00" : nil, quietHoursEnd: quietHours ? "23:59:59" : nil,
            timezone: "UTC", defaultTimezone: nil)
        if caps { facts.frequencyCaps = FrequencyCaps(rules: [FrequencyCapRule(max: 1, perSeconds: 60)]) }
        var decision = DeliveryDecision(facts, now: now)
        if decision.next() == .loadMessage { decision.messageLoaded(try parse(json)) }
        switch decision.next() {
        case .loadMessage: return "load"
        case .reserveFrequencyCap: return "cap"
        case .send(let provider): return "send/\(provider)"
        case .complete(let outcome, _): return "\(outcome.event)/\(outcome.reason?.rawValue ?? "-")"
        }
    }

    static let voip = #"{"apns_push_type": "voip", "data": {"caller": "Ann"}}"#
    static let liveActivity = #"{"apns_push_type": "liveactivity", \#(update)}"#

    @Test func fcmAndWebPushFailThePushTypes() throws {
        for message in [Self.voip, Self.liveActivity, #"{"apns_push_type": "widgets"}"#, #"{"apns_push_type": "mdm", "mdm_push_magic": "m"}"#] {
            #expect(try decide(message) == "send/apns")
            #expect(try decide(message, platform: "android") == "failed/push_type_unsupported")
            #expect(try decide(message, platform: "web") == "failed/push_type_unsupported")
        }
    }

    @Test func quietHoursAndCapsApplyUnlessTheMessageIsExempt() throws {
        for message in [Self.voip, Self.liveActivity] {
            #expect(try decide(message, quietHours: true) == "deferred/quiet_hours")
            #expect(try decide(message, caps: true) == "cap")
        }
        #expect(try decide(#"{"apns_push_type": "voip", "quiet_hours_exempt": true}"#, quietHours: true) == "send/apns")
        #expect(try decide(#"{"apns_push_type": "voip", "frequency_cap_exempt": true}"#, caps: true) == "send/apns")
    }
}
