import DeliveryCore
import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// `preview` and the worker's pipeline decide every preview document alike: the pipeline is given the
/// document's claim, its message and a cap reservation answering from `recent_notifications`, with
/// senders that accept everything.
@Suite("preview and the worker decide alike")
struct DecisionParityTests {
    struct AcceptingSender: OneByOneSender {
        let provider: Provider
        func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome {
            .sent(providerMessageID: nil)
        }
    }

    static let base = PreviewTests.base

    static func with(_ changes: [([String], JSONValue)]) -> JSONValue {
        func set(_ node: JSONValue, _ path: ArraySlice<String>, _ value: JSONValue) -> JSONValue {
            guard let key = path.first else { return value }
            var members = node.objectValue ?? [:]
            members[key] = set(members[key] ?? [:], path.dropFirst(), value)
            return .object(members)
        }
        return changes.reduce(base) { set($0, $1.0[...], $1.1) }
    }

    static let allDay: [([String], JSONValue)] = [(["app", "quiet_hours_start"], "00:00:00"), (["app", "quiet_hours_end"], "23:59:59")]
    static let android: [([String], JSONValue)] = [
        (["subscription", "platform"], "android"), (["subscription", "token"], "fcm-token"),
        (["app", "channels", "fcm"], ["project_id": "p"]),
    ]
    static let web: [([String], JSONValue)] = [
        (["subscription", "platform"], "web"), (["subscription", "token"], "https://updates.push.services.mozilla.com/wpush/v2/abc"),
        (["app", "channels", "webpush"], ["subject": "mailto:ops@example.com"]),
    ]
    static let badgeOnly: JSONValue = ["ios_badge_type": "SetTo", "ios_badge_count": 0]
    static let silent: JSONValue = ["content_available": true, "ttl": 600]
    static let caps: [([String], JSONValue)] = [(["app", "frequency_caps"], [["max": 1, "per_seconds": 3600]])]

    static let documents: [(String, JSONValue)] = [
        ("send", base),
        ("canceled", with([(["notification", "status"], "canceled")])),
        ("abandoned", with([(["delivery", "attempt"], 11)])),
        ("abandoned, lower max", with([(["delivery", "attempt"], 3), (["delivery", "max_attempts"], 2)])),
        ("invalid message", with([(["notification", "message"], ["contents": 5])])),
        ("expired", with([(["notification", "created_at"], "2026-11-29T10:00:00Z")])),
        ("inactive", with([(["subscription", "status"], "unsubscribed")])),
        ("unknown platform", with([(["subscription", "platform"], "fridge")])),
        ("no channel", with([(["app", "channels"], [:])])),
        ("paused", with([(["app", "channels", "apns", "paused_until"], "2026-11-30T00:00:00Z")])),
        ("quiet hours", with(allDay + [(["notification", "message", "ttl"], .null)])),
        ("quiet hours, ttl too short", with(allDay + [(["notification", "message", "ttl"], 60)])),
        ("quiet hours, silent", with(allDay + [(["notification", "message"], silent)])),
        ("quiet hours, silent android", with(allDay + android + [(["notification", "message"], silent)])),
        ("badge only ios", with([(["notification", "message"], badgeOnly)])),
        ("badge only android", with(android + [(["notification", "message"], badgeOnly)])),
        ("badge only web", with(web + [(["notification", "message"], badgeOnly)])),
        ("sound only ios", with([(["notification", "message"], ["ios_sound": "default"])])),
        ("android", with(android)),
        ("web", with(web)),
        ("caps, room", with(caps + [(["recent_notifications"], [])])),
        ("caps, full", with(caps + [(["recent_notifications"], ["2026-11-29T18:00:00Z"])])),
        ("caps, full, silent", with(caps + [(["recent_notifications"], ["2026-11-29T18:00:00Z"]), (["notification", "message"], silent)])),
        ("caps, full, in quiet hours", with(caps + allDay + [(["recent_notifications"], ["2026-11-29T18:00:00Z"]), (["notification", "message", "ttl"], .null)])),
    ]

    @Test(arguments: 0..<documents.count) func sameDecision(index: Int) async throws {
        let (name, document) = Self.documents[index]
        var notes: [JSONValue] = []
        let input = try PreviewInput(document, notes: &notes)
        let recent = input.recentNotifications ?? []
        let at = input.at
        let stored = input.storedMessage
        let pipeline = DeliveryPipeline(
            senders: Provider.allCases.map { AcceptingSender(provider: $0) }, maxAttempts: input.maxAttempts,
            retryPolicy: RetryPolicy(baseDelay: .seconds(1), maximumDelay: .seconds(10)), logger: Logger(label: "test", minimumLevel: .error),
            quietHoursSpread: input.quietHoursSpread,
            loadMessages: { ids in Dictionary(uniqueKeysWithValues: ids.map { ($0, stored) }) },
            reserveFrequencyCap: { request in
                if let (rule, used) = Preview.firstFullRule(request.caps, recent: recent, at: at) {
                    return .denied(rule: rule, used: used)
                }
                return .granted(reused: false)
            })
        var delivery = input.delivery
        if let caps = input.frequencyCaps { delivery.frequencyCapsJSON = caps.jsonValue.jsonText }
        let (outcome, provider) = await pipeline.decide(delivery, now: input.at)
        let worker = Preview.decision(for: outcome, provider: provider)
        let preview = try #require(try Preview.run(document)["decision"])
        #expect(preview["action"] == worker["action"], "\(name)")
        #expect(preview["reason"] == worker["reason"], "\(name)")
        #expect(preview["until"] == worker["until"], "\(name)")
        #expect(preview["provider"] == worker["provider"], "\(name)")
        if outcome.reason == DeliveryReason.frequencyCapped { #expect(preview["detail"] == worker["detail"], "\(name)") }
    }

    /// The documents cover every kind of step the decision has.
    @Test func documentsCoverEveryOutcome() async throws {
        var reasons = Set<String>()
        for (_, document) in Self.documents {
            let decision = try #require(try Preview.run(document)["decision"])
            reasons.insert("\(decision["action"]?.stringValue ?? "")/\(decision["reason"]?.stringValue ?? "-")")
        }
        #expect(reasons.isSuperset(of: [
            "send/-", "skip/canceled", "fail/max_attempts", "fail/invalid_message", "skip/expired", "skip/subscription_inactive",
            "fail/unknown_platform", "skip/no_channel", "defer/channel_paused", "defer/quiet_hours", "skip/nothing_to_show",
            "skip/frequency_capped",
        ]))
    }
}

@Suite("preview: what a silent push drops")
struct SilentPushNotesTests {
    @Test func notesNameTheDroppedFieldsPerProvider() throws {
        let silent: JSONValue = [
            "content_available": true, "contents": ["en": "hidden"], "ios_sound": "ding.caf",
            "ios_badge_type": "SetTo", "ios_badge_count": 2, "android_sound": "ding", "data": ["sync": "inbox"],
        ]
        let ios = try Preview.run(DecisionParityTests.with([(["notification", "message"], silent)]))
        let iosNotes = ios["notes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let iosDrops = try #require(iosNotes.first { $0.contains("drops") })
        #expect(iosDrops.contains("headings, contents and subtitle") && iosDrops.contains("ios_sound") && iosDrops.contains("ios_badge_type"))
        #expect(!iosDrops.contains("android_sound"))
        #expect(iosNotes.contains { $0.contains("quiet hours do not hold it") })
        let android = try Preview.run(DecisionParityTests.with(DecisionParityTests.android + [(["notification", "message"], silent)]))
        let androidDrops = try #require(android["notes"]?.arrayValue?.compactMap(\.stringValue).first { $0.contains("drops") })
        #expect(androidDrops.contains("android_sound") && !androidDrops.contains("ios_sound"))
        // A visible push gets no such note.
        let visible = try Preview.run(DecisionParityTests.base)
        #expect(!(visible["notes"]?.arrayValue?.compactMap(\.stringValue) ?? []).contains { $0.contains("silent push") })
    }
}
