import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// `preview` of VoIP and Live Activity messages: the same factory's headers and payload, the decision for
/// other providers, and a note when the subscription's kind would not be reached by expansion.
@Suite("preview of APNs push types")
struct PushTypePreviewTests {
    func input(message: JSONValue, platform: String = "ios", kind: String? = nil, apns: JSONValue = ["topic": "com.example.app"]) -> JSONValue {
        var subscription: [String: JSONValue] = [
            "id": "6f1c6e0e-5a0b-4d6e-9d5e-6b6a1c2d3e4f", "platform": .string(platform),
            "token": "a0a0aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999",
        ]
        if let kind { subscription["kind"] = .string(kind) }
        return [
            "at": "2026-11-29T21:30:00Z",
            "app": ["default_language": "en", "channels": ["apns": apns, "fcm": ["project_id": "p"]]],
            "subscription": .object(subscription),
            "notification": ["id": "0b7c1b2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "message": message],
        ]
    }

    func header(_ output: JSONValue, _ name: String) -> String? {
        output["request"]?["headers"]?.arrayValue?.first { $0["name"]?.stringValue == name }?["value"]?.stringValue
    }

    func notes(_ output: JSONValue) -> [String] { output["notes"]?.arrayValue?.compactMap(\.stringValue) ?? [] }

    static let voip: JSONValue = ["apns_push_type": "voip", "data": ["caller": "Ann"]]
    static let liveActivity: JSONValue = [
        "apns_push_type": "liveactivity",
        "live_activity": ["event": "update", "timestamp": 1_685_952_000, "content_state": ["eta": 2]],
    ]

    @Test func showsThePushTypeTopicAndPayload() throws {
        let voip = try Preview.run(input(message: Self.voip, kind: "voip"))
        #expect(voip["decision"]?["action"] == "send")
        #expect(header(voip, "apns-push-type") == "voip")
        #expect(header(voip, "apns-topic") == "com.example.app.voip")
        #expect(header(voip, "apns-priority") == "10")
        #expect(header(voip, "apns-expiration") == nil)
        #expect(voip["request"]?["body"]?["on"]?["data"] == ["caller": "Ann"])
        #expect(!notes(voip).contains { $0.contains("subscription.kind") })

        let live = try Preview.run(input(message: Self.liveActivity, kind: "liveactivity"))
        #expect(header(live, "apns-push-type") == "liveactivity")
        #expect(header(live, "apns-topic") == "com.example.app.push-type.liveactivity")
        #expect(live["request"]?["body_text"] == #"{"aps":{"content-state":{"eta":2},"event":"update","timestamp":1685952000}}"#)
    }

    /// The other types of Apple's `apns-push-type` table, each with its topic, priority, expiration and body; an
    /// MDM push only on a certificate channel (the preview reads only that the settings hold a certificate).
    @Test func showsEveryOtherPushType() throws {
        let cases: [(message: JSONValue, topic: String, priority: String, expiration: String?, body: String)] = [
            (["apns_push_type": "location", "priority": "normal"], "com.example.app.location-query", "5", nil, #"{"aps":{},"on":{"#),
            (["apns_push_type": "pushtotalk", "ttl": 60], "com.example.app.voip-ptt", "10", "0", #"{"aps":{},"on":{"#),
            (["apns_push_type": "complication"], "com.example.app.complication", "10", nil, #"{"aps":{},"on":{"#),
            (["apns_push_type": "fileprovider", "file_provider": ["container_identifier": "root"]],
             "com.example.app.pushkit.fileprovider", "10", nil, #"{"container-identifier":"root"}"#),
            (["apns_push_type": "widgets"], "com.example.app.push-type.widgets", "10", nil, #"{"aps":{"content-changed":true}}"#),
        ]
        for (message, topic, priority, expiration, body) in cases {
            let type = message["apns_push_type"]?.stringValue ?? "?"
            let output = try Preview.run(input(message: message, kind: type))
            #expect(output["decision"]?["action"] == "send", "\(type)")
            #expect(header(output, "apns-push-type") == type)
            #expect(header(output, "apns-topic") == topic)
            #expect(header(output, "apns-priority") == priority)
            #expect(header(output, "apns-expiration") == expiration)
            #expect(output["request"]?["body_text"]?.stringValue?.hasPrefix(body) == true, "\(type): \(output["request"]?["body_text"] ?? .null)")
        }
        let mdm: JSONValue = ["apns_push_type": "mdm", "mdm_push_magic": "magic"]
        let onToken = try Preview.run(input(message: mdm, kind: "mdm"))
        #expect(onToken["decision"]?["reason"] == "push_type_unsupported")
        let certificate: JSONValue = ["topic": "com.apple.mgmt.External.5e5a", "certificate": "-----BEGIN CERTIFICATE-----", "private_key": "-----BEGIN PRIVATE KEY-----"]
        let onCertificate = try Preview.run(input(message: mdm, kind: "mdm", apns: certificate))
        #expect(onCertificate["decision"]?["action"] == "send")
        #expect(header(onCertificate, "apns-topic") == "com.apple.mgmt.External.5e5a")
        #expect(header(onCertificate, "authorization") == nil)
        #expect(onCertificate["request"]?["body_text"] == #"{"mdm":"magic"}"#)
        let widgetsOnCertificate = try Preview.run(input(message: ["apns_push_type": "widgets"], kind: "widgets", apns: certificate))
        #expect(widgetsOnCertificate["decision"]?["reason"] == "push_type_unsupported")
        // From the database, the channel's public members only: the certificate becomes `authentication`.
        let publicForm = PreviewStore.publicSettings(certificate, provider: "apns")
        #expect(publicForm == ["topic": "com.apple.mgmt.External.5e5a", "authentication": "certificate"])
        let fromDatabase = try Preview.run(input(message: mdm, kind: "mdm", apns: .object(publicForm)))
        #expect(fromDatabase["request"]?["body_text"] == #"{"mdm":"magic"}"#)
        #expect(header(fromDatabase, "authorization") == nil)
    }

    /// FCM's pass-through options in the request `preview` prints.
    @Test func showsTheFCMOptions() throws {
        let message: JSONValue = ["contents": "hi", "collapse_id": "c", "fcm_analytics_label": "spring_1", "android_direct_boot_ok": true]
        let output = try Preview.run(input(message: message, platform: "android"))
        #expect(output["request"]?["body"]?["message"]?["fcm_options"] == ["analytics_label": "spring_1"])
        #expect(output["request"]?["body"]?["message"]?["android"]?["direct_boot_ok"] == true)
        #expect(output["request"]?["body"]?["message"]?["android"]?["collapse_key"] == "c")
        let bad = try Preview.run(input(message: ["contents": "hi", "fcm_analytics_label": "no spaces"], platform: "android"))
        #expect(bad["decision"]?["reason"] == "invalid_message")
    }

    @Test func notesAKindExpansionWouldNotReach() throws {
        // An alert to a VoIP token, and a VoIP push to a device token (kind absent = device).
        for (message, kind) in [(["contents": "hi"] as JSONValue, Optional("voip")), (Self.voip, nil)] {
            let output = try Preview.run(input(message: message, kind: kind))
            #expect(notes(output).contains { $0.contains("expansion would not create this delivery") }, "\(notes(output))")
        }
    }

    @Test func fcmFailsThePushTypes() throws {
        for message in [Self.voip, Self.liveActivity] {
            let output = try Preview.run(input(message: message, platform: "android", kind: "voip"))
            #expect(output["decision"]?["action"] == "fail")
            #expect(output["decision"]?["reason"] == "push_type_unsupported")
        }
    }

    @Test func invalidLiveActivityFailsNamingTheField() throws {
        let output = try Preview.run(input(message: ["apns_push_type": "liveactivity", "live_activity": ["event": "update"]], kind: "liveactivity"))
        #expect(output["decision"]?["action"] == "fail")
        #expect(output["decision"]?["reason"] == "invalid_message")
        #expect("\(output["decision"] ?? .null)".contains("live_activity.timestamp"))
    }

    /// A millisecond date shows the worker's decision: `invalid_message` naming the member, no request.
    @Test(arguments: ["timestamp", "stale_date"])
    func millisecondDateFailsNamingTheField(member: String) throws {
        var activity: [String: JSONValue] = ["event": "update", "timestamp": 1_764_590_400, "content_state": ["eta": 2]]
        activity[member] = 1_764_590_400_000
        let output = try Preview.run(input(message: ["apns_push_type": "liveactivity", "live_activity": .object(activity)], kind: "liveactivity"))
        #expect(output["decision"]?["action"] == "fail")
        #expect(output["decision"]?["reason"] == "invalid_message")
        #expect("\(output["decision"] ?? .null)".contains("live_activity.\(member)"))
        #expect(output["request"] == nil)
    }
}
