import DeliveryCore
import Foundation
import Testing

/// Every branch of the one decision path, without a database: the worker and `preview` drive exactly this.
@Suite struct DeliveryDecisionTests {
    let now = Date(timeIntervalSince1970: 1_780_000_000)  // 2026-05-28T20:26:40Z
    static let caps = FrequencyCaps(rules: [FrequencyCapRule(max: 3, perSeconds: 86_400)])

    func facts(
        attempt: Int = 1, canceled: Bool = false, start: Date? = nil, status: String = "active", platform: String = "ios",
        channel: Bool = true, pausedUntil: Date? = nil, quietHours: Bool = false, caps: FrequencyCaps? = nil
    ) -> DeliveryFacts {
        var facts = DeliveryFacts(
            attempt: attempt, maxAttempts: 3, notificationCanceled: canceled, notificationStart: start ?? now,
            subscriptionID: UUID(), capKey: UUID(), subscriptionStatus: status, platform: Platform(platform),
            hasChannel: channel, channelPausedUntil: pausedUntil,
            // All day but one second: any `now` is inside it.
            quietHoursStart: quietHours ? "00:00:00" : nil, quietHoursEnd: quietHours ? "23:59:59" : nil,
            timezone: "UTC", defaultTimezone: nil)
        facts.frequencyCaps = caps
        return facts
    }

    func message(_ json: String = #"{"contents": {"en": "hi"}}"#) -> NotificationMessage {
        // Test inputs are valid by construction.
        try! NotificationMessage(json: try! JSONValue(parsing: json))
    }

    /// Loads `json` and returns the step after it (answering a cap step with `cap` when one comes).
    func decide(_ facts: DeliveryFacts, _ json: String = #"{"contents": {"en": "hi"}}"#, cap: FrequencyCapAnswer? = nil) -> DeliveryStep {
        var decision = DeliveryDecision(facts, now: now)
        if decision.next() == .loadMessage { decision.messageLoaded(message(json)) }
        if case .reserveFrequencyCap = decision.next(), let cap { decision.frequencyCapAnswered(cap) }
        return decision.next()
    }

    func summary(_ step: DeliveryStep) -> String {
        switch step {
        case .loadMessage: "load"
        case .reserveFrequencyCap(_, let provider): "cap/\(provider)"
        case .send(let provider): "send/\(provider)"
        case .complete(let outcome, _): "\(outcome.event)/\(outcome.reason?.rawValue ?? "-")"
        }
    }

    @Test func beforeTheMessageOnlyAbandonedAndCanceledAreKnown() {
        #expect(DeliveryDecision(facts(), now: now).next() == .loadMessage)
        #expect(summary(DeliveryDecision(facts(attempt: 4), now: now).next()) == "failed/max_attempts")
        #expect(summary(DeliveryDecision(facts(canceled: true), now: now).next()) == "skipped/canceled")
        // Abandoned wins over canceled; neither needs the message.
        #expect(summary(DeliveryDecision(facts(attempt: 4, canceled: true), now: now).next()) == "failed/max_attempts")
    }

    @Test func anUnusableMessageCompletesWithItsOutcome() {
        var decision = DeliveryDecision(facts(), now: now)
        decision.messageUnusable(.retry(reason: .messageUnavailable))
        #expect(decision.next() == .complete(.retry(reason: .messageUnavailable), provider: nil))
    }

    @Test func everyCheckInOrder() {
        #expect(decide(facts()) == .send(.apns))
        #expect(decide(facts(platform: "android")) == .send(.fcm))
        #expect(decide(facts(platform: "web")) == .send(.webpush))
        #expect(summary(decide(facts(start: now.addingTimeInterval(-100)), #"{"contents": {"en": "x"}, "ttl": 60}"#)) == "skipped/expired")
        #expect(summary(decide(facts(status: "invalid"))) == "skipped/subscription_inactive")
        #expect(decide(facts(platform: "fridge")) == .complete(.failed(reason: .unknownPlatform, detail: ["platform": "fridge"]), provider: nil))
        #expect(decide(facts(channel: false)) == .complete(.skipped(reason: .noChannel, detail: ["provider": "apns"]), provider: .apns))
        #expect(summary(decide(facts(quietHours: true))) == "deferred/quiet_hours")
        let paused = now.addingTimeInterval(60)
        #expect(decide(facts(pausedUntil: paused)) == .complete(.retry(reason: .channelPaused, detail: ["provider": "apns"], notBefore: paused), provider: .apns))
        #expect(decide(facts(pausedUntil: now.addingTimeInterval(-1))) == .send(.apns))
        // Earlier checks win: expired before inactive, inactive before unknown platform, no channel before
        // quiet hours, quiet hours before a paused channel.
        #expect(summary(decide(facts(start: now.addingTimeInterval(-100), status: "invalid"), #"{"contents": {"en": "x"}, "ttl": 60}"#)) == "skipped/expired")
        #expect(summary(decide(facts(status: "invalid", platform: "fridge"))) == "skipped/subscription_inactive")
        #expect(summary(decide(facts(channel: false, quietHours: true))) == "skipped/no_channel")
        #expect(summary(decide(facts(pausedUntil: paused, quietHours: true))) == "deferred/quiet_hours")
    }

    @Test func ttlZeroIsOneAttemptAndCannotWaitForQuietHours() {
        let nowOrNever = #"{"contents": {"en": "x"}, "ttl": 0}"#
        #expect(decide(facts(start: now.addingTimeInterval(-30)), nowOrNever) == .send(.apns))
        #expect(summary(decide(facts(attempt: 2), nowOrNever)) == "skipped/expired")
        #expect(summary(decide(facts(quietHours: true), nowOrNever)) == "skipped/expired")
        // A ttl that ends before the window does: skipped now, naming the window's end.
        guard case .complete(.skipped(.expired, let detail), .apns) = decide(facts(quietHours: true), #"{"contents": {"en": "x"}, "ttl": 60}"#) else {
            Issue.record("expected skipped/expired")
            return
        }
        #expect(detail["quiet_hours_until"] != nil)
    }

    @Test func quietHoursHoldNeitherExemptNorSilentPushes() {
        #expect(decide(facts(quietHours: true), #"{"contents": {"en": "x"}, "quiet_hours_exempt": true}"#) == .send(.apns))
        // Row 12: a background sync is not lost to the night.
        #expect(decide(facts(quietHours: true), #"{"content_available": true, "ttl": 600}"#) == .send(.apns))
        #expect(decide(facts(platform: "android", quietHours: true), #"{"content_available": true, "ttl": 600}"#) == .send(.fcm))
        // A visible push with the same ttl is held (and so expires before the window ends).
        #expect(summary(decide(facts(quietHours: true), #"{"contents": {"en": "x"}, "ttl": 600}"#)) == "skipped/expired")
    }

    @Test func unknownZonesAreCollectedOnce() {
        var base = facts(quietHours: true)
        base.timezone = "Mars/Olympus"
        var decision = DeliveryDecision(base, now: now)
        decision.messageLoaded(message())
        _ = decision.next()
        _ = decision.next()
        #expect(decision.unknownZones == ["Mars/Olympus"])
    }

    @Test func badgeOrSoundOnlyPushesGoToAPNsAndAreSkippedElsewhere() {
        let badgeOnly = #"{"ios_badge_type": "SetTo", "ios_badge_count": 0}"#
        #expect(decide(facts(), badgeOnly) == .send(.apns))
        #expect(decide(facts(), #"{"ios_sound": "default"}"#) == .send(.apns))
        for platform in ["android", "web"] {
            let step = decide(facts(platform: platform), badgeOnly)
            #expect(summary(step) == "skipped/nothing_to_show", "\(platform)")
        }
        // Checked before quiet hours: a push that will be skipped is not held first.
        #expect(summary(decide(facts(platform: "android", quietHours: true), badgeOnly)) == "skipped/nothing_to_show")
        // Not before the channel check: an app without the channel is told so.
        #expect(summary(decide(facts(platform: "web", channel: false), badgeOnly)) == "skipped/no_channel")
        // Headings alone are something to show.
        #expect(decide(facts(platform: "android"), #"{"headings": {"en": "t"}, "ios_sound": "default"}"#) == .send(.fcm))
    }

    @Test func aMissingSenderFailsAfterEveryRuleCheck() {
        var noFCM = facts(platform: "android")
        noFCM.providersWithSender = [.apns]
        #expect(decide(noFCM) == .complete(.failed(reason: .providerNotSupported, detail: ["provider": "fcm"]), provider: .fcm))
        noFCM.channelPausedUntil = now.addingTimeInterval(60)
        #expect(summary(decide(noFCM)) == "retrying/channel_paused")
    }

    @Test func theLeaseGuardPutsTheDeliveryBackBeforeTheCaps() {
        var short = facts(caps: Self.caps)
        short.deliveryTimeout = .seconds(10)
        short.leaseRemaining = .seconds(9.5)
        #expect(decide(short) == .complete(.retry(reason: .leaseExpiring), provider: .apns))
        short.leaseRemaining = .seconds(10)
        #expect(decide(short) == .reserveFrequencyCap(Self.caps, provider: .apns))
        // What is left is refreshed by the owner before each step (loading the message takes time).
        var decision = DeliveryDecision(facts(caps: Self.caps), now: now)
        decision.messageLoaded(message())
        decision.frequencyCapAnswered(.granted)
        #expect(decision.next() == .send(.apns))
        var timed = facts()
        timed.deliveryTimeout = .seconds(10)
        timed.leaseRemaining = .seconds(60)
        decision = DeliveryDecision(timed, now: now)
        decision.messageLoaded(message())
        #expect(decision.next() == .send(.apns))
        decision.leaseRemaining(.seconds(3))
        #expect(decision.next() == .complete(.retry(reason: .leaseExpiring), provider: .apns))
        // No deadline or no lease: no guard.
        short.deliveryTimeout = nil
        short.leaseRemaining = .seconds(0)
        #expect(decide(short, cap: .granted) == .send(.apns))
    }

    @Test func capsAreAskedLastAndOnlyForCappedMessages() {
        let capped = facts(caps: Self.caps)
        #expect(decide(capped) == .reserveFrequencyCap(Self.caps, provider: .apns))
        #expect(decide(capped, cap: .granted) == .send(.apns))
        let rule = FrequencyCapRule(max: 3, perSeconds: 86_400)
        guard case .complete(.skipped(.frequencyCapped, let detail), .apns) = decide(capped, cap: .denied(rule: rule, used: 3)) else {
            Issue.record("expected skipped/frequency_capped")
            return
        }
        #expect(detail == ["max": 3, "per_seconds": 86_400, "used": 3, "cap_key": .string(capped.capKey.uuidString.lowercased())])
        #expect(decide(capped, cap: .unavailable(error: "down")) == .complete(.retry(reason: .capUnavailable, detail: ["error": "down"]), provider: .apns))
        // Exempt and silent messages, empty caps: no step.
        #expect(decide(capped, #"{"contents": {"en": "x"}, "frequency_cap_exempt": true}"#) == .send(.apns))
        #expect(decide(capped, #"{"content_available": true}"#) == .send(.apns))
        #expect(decide(facts(caps: FrequencyCaps(rules: []))) == .send(.apns))
        // Anything that stops earlier never reaches the cap step.
        #expect(summary(decide(facts(quietHours: true, caps: Self.caps))) == "deferred/quiet_hours")
        #expect(summary(decide(facts(pausedUntil: now.addingTimeInterval(60), caps: Self.caps))) == "retrying/channel_paused")
    }

    @Test func domainTypesKeepTheStoredText() {
        for text in ["ios", "android", "web", "huawei", "fridge", "IOS", ""] {
            #expect(Platform(text).text == text)
        }
        #expect(Platform("IOS") == .unknown("IOS"))
        #expect(Platform("ios").provider == .apns && Platform("android").provider == .fcm && Platform("web").provider == .webpush)
        #expect(Platform("huawei").provider == .huawei)
        #expect(Platform("fridge").provider == nil)
        #expect(Provider.allCases.map(\.rawValue) == ["apns", "fcm", "webpush", "huawei"])
        #expect(Provider.allCases.allSatisfy { $0.platform.provider == $0 })
        #expect(DeliveryEvent.allCases.map(\.rawValue) == ["sent", "failed", "retrying", "skipped", "deferred"])
        #expect(DeliveryOutcome.channelError(reason: DeliveryReason(rawValue: "x")).event == .retrying)
        #expect(DeliveryOutcome.deferred(until: now).reason == DeliveryReason.quietHours)
        #expect(DeliveryReason.nothingToShow.rawValue == "nothing_to_show")
        #expect(DeliveryReason.leaseExpiring.rawValue == "lease_expiring")
    }
}
