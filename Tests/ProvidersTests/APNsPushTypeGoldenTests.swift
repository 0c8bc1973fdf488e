import Foundation
import Testing
import DeliveryCore
@testable import Providers

/// Golden requests of the `voip` and `liveactivity` push types. Expected headers follow Apple's "Sending
/// notification requests to APNs" (`apns-push-type`, the topic suffixes `.voip` and
/// `.push-type.liveactivity`, the 5120-byte VoIP payload limit); Live Activity payloads follow the examples and
/// keys of "Starting and updating Live Activities with ActivityKit push notifications" (`timestamp`, `event`,
/// `content-state`, `stale-date`, `dismissal-date`, `relevance-score`, `attributes-type`, `attributes`, and the
/// `alert` with `title`, `body` and `sound`); VoIP pushes follow "Responding to VoIP notifications from
/// PushKit" (the app's own dictionary, no alert).
@Suite struct APNsPushTypeGoldenTests {
    static let token = "0f" + String(repeating: "a1", count: 31)
    static let apnsID = UUID(uuidString: "6B1C2C4E-7A61-4F0C-9C2D-0E3D5B8F9A10")!
    static let now = Date(timeIntervalSince1970: 1_700_000_000.5)

    func request(_ message: String, language: String? = "en") throws -> PushRequest {
        let delivery = APNsDelivery(
            deviceToken: Self.token, environment: "sandbox", topic: "com.example.app", apnsID: Self.apnsID,
            message: try NotificationMessage(json: try JSONValue(parsing: message)), subscriberLanguage: language,
            appDefaultLanguage: "en", placeholderValues: PlaceholderValues(tags: ["hero": "Power Panda"], language: language),
            msgID: "MSGID", campaignID: "spring",
            expiration: try NotificationMessage(json: try JSONValue(parsing: message)).ttl.map { Self.now.addingTimeInterval(Double($0)) },
            now: Self.now)
        return try APNsRequestFactory.makeRequest(delivery, bearerToken: "JWT")
    }

    func text(_ request: PushRequest) -> String { String(decoding: request.body, as: UTF8.self) }

    func headers(pushType: String, priority: String, topic: String, extra: [PushHeader] = []) -> [PushHeader] {
        [
            PushHeader("authorization", "bearer JWT"),
            PushHeader("apns-id", "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10"),
            PushHeader("apns-push-type", pushType),
            PushHeader("apns-priority", priority),
            PushHeader("apns-topic", topic),
        ] + extra
    }

    @Test func voipGolden() throws {
        // priority normal is overridden: a call invitation is always priority 10; no ttl, no apns-expiration
        // (APNs then delivers a VoIP push at once or not at all).
        let voip = try request(#"{"apns_push_type": "voip", "priority": "normal", "data": {"caller": "Ann", "call_id": 7}}"#)
        #expect(voip.headers == headers(pushType: "voip", priority: "10", topic: "com.example.app.voip"))
        #expect(text(voip) == #"{"aps":{},"on":{"campaignId":"spring","data":{"call_id":7,"caller":"Ann"},"msgId":"MSGID"}}"#)
        // A ttl gives an expiration, as for every push.
        let ringing = try request(#"{"apns_push_type": "voip", "ttl": 30}"#)
        #expect(ringing.header("apns-expiration") == "1700000030")
    }

    @Test func voipPayloadLimitIs5120Bytes() throws {
        let room = String(repeating: "a", count: 4500)
        #expect(try request(#"{"apns_push_type": "voip", "data": {"x": "\#(room)"}}"#).body.count > 4096)
        let big = String(repeating: "a", count: 5100)
        #expect(throws: APNsRequestError(reason: .payloadTooLarge, detail: "the APNs voip payload is 5171 bytes; the limit is 5120")) {
            try request(#"{"apns_push_type": "voip", "data": {"x": "\#(big)"}}"#)
        }
    }

    @Test func liveActivityUpdateGolden() throws {
        let update = try request(#"""
            {"apns_push_type": "liveactivity", "headings": "{{ hero }} is on an adventure!", "contents": "{{ hero }} found a sword!",
             "ios_sound": "chime.aiff",
             "live_activity": {"event": "update", "timestamp": 1685952000,
                               "content_state": {"currentHealthLevel": 0.941, "eventDescription": "Power Panda found a sword!"}}}
            """#)
        #expect(update.headers == headers(pushType: "liveactivity", priority: "10", topic: "com.example.app.push-type.liveactivity"))
        #expect(text(update) == #"{"aps":{"alert":{"body":"Power Panda found a sword!","sound":"chime.aiff","title":"Power Panda is on an adventure!"},"content-state":{"currentHealthLevel":0.941,"eventDescription":"Power Panda found a sword!"},"event":"update","timestamp":1685952000}}"#)
        // A silent update (no text) has no alert; priority normal is 5, stale-date and relevance-score pass through.
        let quiet = try request(#"""
            {"apns_push_type": "liveactivity", "priority": "normal",
             "live_activity": {"event": "update", "timestamp": 1685952000, "content_state": {"currentHealthLevel": 0.5},
                               "stale-date": 1, "stale_date": 1685959200, "relevance_score": 100}}
            """#)
        #expect(quiet.headers == headers(pushType: "liveactivity", priority: "5", topic: "com.example.app.push-type.liveactivity"))
        #expect(text(quiet) == #"{"aps":{"content-state":{"currentHealthLevel":0.5},"event":"update","relevance-score":100,"stale-date":1685959200,"timestamp":1685952000}}"#)
    }

    @Test func liveActivityStartAndEndGolden() throws {
        let start = try request(#"""
            {"apns_push_type": "liveactivity", "headings": "Adventure Started!", "contents": "{{ hero }} has embarked on an adventure!",
             "subtitle": "not part of a Live Activity alert", "ios_sound": "chime.aiff",
             "live_activity": {"event": "start", "timestamp": 1705547598,
                               "content_state": {"currentHealthLevel": 100, "eventDescription": "Adventure has begun!"},
                               "attributes_type": "AdventureAttributes", "attributes": {"currentHealthLevel": 100, "eventDescription": "Adventure has begun!"}}}
            """#)
        #expect(start.header("apns-push-type") == "liveactivity")
        #expect(text(start) == #"{"aps":{"alert":{"body":"Power Panda has embarked on an adventure!","sound":"chime.aiff","title":"Adventure Started!"},"attributes":{"currentHealthLevel":100,"eventDescription":"Adventure has begun!"},"attributes-type":"AdventureAttributes","content-state":{"currentHealthLevel":100,"eventDescription":"Adventure has begun!"},"event":"start","timestamp":1705547598}}"#)
        let end = try request(#"""
            {"apns_push_type": "liveactivity",
             "live_activity": {"event": "end", "timestamp": 1685952000, "dismissal_date": 1685959200,
                               "content_state": {"currentHealthLevel": 0, "eventDescription": "Power Panda has been knocked down!"}}}
            """#)
        #expect(text(end) == #"{"aps":{"content-state":{"currentHealthLevel":0,"eventDescription":"Power Panda has been knocked down!"},"dismissal-date":1685959200,"event":"end","timestamp":1685952000}}"#)
    }

    @Test func liveActivityTextsAreShortenedToTheLimit() throws {
        let long = String(repeating: "é", count: 3000)
        let body = try request(#"{"apns_push_type": "liveactivity", "contents": "\#(long)", "live_activity": {"event": "update", "timestamp": 1, "content_state": {}}}"#).body
        #expect(body.count <= APNsRequestFactory.maximumPayloadSize)
        #expect(text(try request(#"{"apns_push_type": "liveactivity", "contents": "\#(long)", "live_activity": {"event": "update", "timestamp": 1, "content_state": {}}}"#)).contains("…"))
        // The content state alone too large: refused, not cut.
        let state = String(repeating: "x", count: 4200)
        #expect(throws: APNsRequestError.self) {
            try request(#"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1, "content_state": {"s": "\#(state)"}}}"#)
        }
    }

    /// The types of Apple's `apns-push-type` table beyond VoIP and Live Activity: each with its topic suffix,
    /// priority and payload ("Sending notification requests to APNs"; "Creating a location push service
    /// extension"; "Creating a Push to Talk app"; "Keeping your complications up to date"; "Using push
    /// notifications to signal changes"; "Sending MDM commands to a device"; "Updating widgets with WidgetKit
    /// push notifications").
    @Test func everyOtherPushTypeGolden() throws {
        let location = try request(#"{"apns_push_type": "location", "priority": "normal", "data": {"query": 7}}"#)
        #expect(location.headers == headers(pushType: "location", priority: "5", topic: "com.example.app.location-query"))
        #expect(text(location) == #"{"aps":{},"on":{"campaignId":"spring","data":{"query":7},"msgId":"MSGID"}}"#)
        #expect(try request(#"{"apns_push_type": "location"}"#).header("apns-priority") == "10")

        // Push to Talk: priority 10 and apns-expiration 0 whatever the message says.
        let ptt = try request(#"{"apns_push_type": "pushtotalk", "priority": "normal", "ttl": 600, "data": {"speaker": "Ann"}}"#)
        #expect(ptt.headers == headers(pushType: "pushtotalk", priority: "10", topic: "com.example.app.voip-ptt",
                                       extra: [PushHeader("apns-expiration", "0")]))
        #expect(text(ptt) == #"{"aps":{},"on":{"campaignId":"spring","data":{"speaker":"Ann"},"msgId":"MSGID"}}"#)

        let complication = try request(#"{"apns_push_type": "complication", "ttl": 60}"#)
        #expect(complication.headers == headers(pushType: "complication", priority: "10", topic: "com.example.app.complication",
                                                extra: [PushHeader("apns-expiration", "1700000060")]))
        #expect(text(complication) == #"{"aps":{},"on":{"campaignId":"spring","msgId":"MSGID"}}"#)

        let files = try request(#"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "NSFileProviderWorkingSetContainerItemIdentifier", "domain": "work"}}"#)
        #expect(files.headers == headers(pushType: "fileprovider", priority: "10", topic: "com.example.app.pushkit.fileprovider"))
        #expect(text(files) == #"{"container-identifier":"NSFileProviderWorkingSetContainerItemIdentifier","domain":"work"}"#)

        // MDM: the channel's topic is the certificate's UID topic, sent as it is.
        let mdm = try request(#"{"apns_push_type": "mdm", "priority": "normal", "mdm_push_magic": "5E5A1E4B-magic"}"#)
        #expect(mdm.headers == headers(pushType: "mdm", priority: "5", topic: "com.example.app"))
        #expect(text(mdm) == #"{"mdm":"5E5A1E4B-magic"}"#)

        let widgets = try request(#"{"apns_push_type": "widgets"}"#)
        #expect(widgets.headers == headers(pushType: "widgets", priority: "10", topic: "com.example.app.push-type.widgets"))
        #expect(text(widgets) == #"{"aps":{"content-changed":true}}"#)
    }

    /// Apple takes `liveactivity`, `location` and `widgets` over token-based authentication only, and `mdm` from
    /// an MDM push certificate only: the other kind of channel fails the delivery as `push_type_unsupported`
    /// without a request, and never pauses the channel.
    @Test func eachTypeGoesOnlyOverTheCredentialsAppleTakes() throws {
        func outcome(_ message: String, certificate: Bool) throws -> String {
            let plan = APNsRequestPlan(topic: "com.example.app", usesChannelEndpoint: true, usesCertificate: certificate)
            let delivery = APNsDelivery(
                deviceToken: Self.token, environment: "production", topic: "com.example.app", apnsID: Self.apnsID,
                message: try NotificationMessage(json: try JSONValue(parsing: message)), subscriberLanguage: "en",
                appDefaultLanguage: "en", placeholderValues: PlaceholderValues(tags: [:], language: "en"),
                msgID: "MSGID", campaignID: nil, expiration: nil, now: Self.now)
            switch plan.request(for: delivery, authorization: APNsProviderAuthorization(bearerToken: "JWT")) {
            case .record(let outcome): return "\(outcome.event)/\(outcome.reason?.rawValue ?? "-")"
            case .send(let request, _): return "send \(request.header("authorization") == nil ? "unsigned" : "signed")"
            }
        }
        let messages = [
            "liveactivity": #"{"apns_push_type": "liveactivity", "live_activity": {"event": "end", "timestamp": 1}}"#,
            "location": #"{"apns_push_type": "location"}"#, "widgets": #"{"apns_push_type": "widgets"}"#,
            "mdm": #"{"apns_push_type": "mdm", "mdm_push_magic": "m"}"#, "voip": #"{"apns_push_type": "voip"}"#,
            "pushtotalk": #"{"apns_push_type": "pushtotalk"}"#, "complication": #"{"apns_push_type": "complication"}"#,
            "fileprovider": #"{"apns_push_type": "fileprovider", "file_provider": {"container_identifier": "a"}}"#,
        ]
        var token: [String: String] = [:]
        var certificate: [String: String] = [:]
        for (name, message) in messages {
            token[name] = try outcome(message, certificate: false)
            certificate[name] = try outcome(message, certificate: true)
        }
        #expect(token == [
            "liveactivity": "send signed", "location": "send signed", "widgets": "send signed", "mdm": "failed/push_type_unsupported",
            "voip": "send signed", "pushtotalk": "send signed", "complication": "send signed", "fileprovider": "send signed",
        ])
        #expect(certificate == [
            "liveactivity": "failed/push_type_unsupported", "location": "failed/push_type_unsupported",
            "widgets": "failed/push_type_unsupported", "mdm": "send unsigned",
            "voip": "send unsigned", "pushtotalk": "send unsigned", "complication": "send unsigned",
            "fileprovider": "failed/push_type_unsupported",
        ])
    }

    @Test func ordinaryPushesKeepTheBareTopic() throws {
        #expect(try request(#"{"contents": "hi"}"#).header("apns-topic") == "com.example.app")
        #expect(try request(#"{"content_available": true}"#).header("apns-push-type") == "background")
    }
}
