import DeliveryCore
import Foundation
import Testing

@Suite struct ChannelFaultEvidenceTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let forbidden = ProviderAnswer(
        .failed(reason: .vapidForbidden, detail: ["status": 403]), fault: .subscription, suspectsChannel: true)

    func shape(_ outcome: DeliveryOutcome) -> String {
        switch outcome {
        case .failed(let reason, _, let invalidate): "failed \(reason)\(invalidate ? " invalidate" : "")"
        case .channelError(let reason, let detail, _):
            "channel \(reason) \(detail["refused_subscriptions"]?.int64Value ?? -1)/\(detail["refused_origins"]?.int64Value ?? -1)"
        default: "\(outcome)"
        }
    }

    @Test func oneSubscriptionRefusedAgainAndAgainNeverPausesTheChannel() {
        var evidence = ChannelFaultEvidence(policy: .webPush)
        let subscription = UUID()
        for second in 0..<100 {
            let origin = second.isMultiple(of: 2) ? "https://a.example" : "https://b.example"
            let outcome = evidence.judge(forbidden, subscription: subscription, origin: origin, at: start.addingTimeInterval(Double(second)))
            #expect(shape(outcome) == "failed vapid_forbidden")
        }
        #expect(evidence.trackedRefusals == 1)
    }

    @Test func manySubscriptionsAtOneOriginNeverPauseAWebPushChannel() {
        var evidence = ChannelFaultEvidence(policy: .webPush)
        for second in 0..<50 {
            let outcome = evidence.judge(forbidden, subscription: UUID(), origin: "https://hostile.example", at: start.addingTimeInterval(Double(second)))
            #expect(shape(outcome) == "failed vapid_forbidden")
        }
        #expect(evidence.trackedRefusals == ChannelFaultEvidence.Policy.webPush.maximumTracked)
    }

    @Test func distinctSubscriptionsAtDistinctOriginsWithinTheWindowPause() {
        var evidence = ChannelFaultEvidence(policy: .webPush)
        #expect(shape(evidence.judge(forbidden, subscription: UUID(), origin: "https://a.example", at: start)) == "failed vapid_forbidden")
        #expect(shape(evidence.judge(forbidden, subscription: UUID(), origin: "https://b.example", at: start + 1)) == "failed vapid_forbidden")
        #expect(shape(evidence.judge(forbidden, subscription: UUID(), origin: "https://a.example", at: start + 2)) == "channel vapid_forbidden 3/2")
        // Later refusals within the window pause again (a channel that stays wrong stays paused).
        #expect(shape(evidence.judge(forbidden, subscription: UUID(), origin: "https://c.example", at: start + 300)) == "channel vapid_forbidden 4/3")
    }

    @Test func refusalsOutsideTheWindowAreForgotten() {
        var evidence = ChannelFaultEvidence(policy: .webPush)
        _ = evidence.judge(forbidden, subscription: UUID(), origin: "https://a.example", at: start)
        _ = evidence.judge(forbidden, subscription: UUID(), origin: "https://b.example", at: start + 1)
        let late = evidence.judge(forbidden, subscription: UUID(), origin: "https://c.example", at: start + 602)
        #expect(shape(late) == "failed vapid_forbidden")
        #expect(evidence.trackedRefusals == 1)
    }

    @Test func anAcceptanceWithinTheWindowProvesTheCredentials() {
        var evidence = ChannelFaultEvidence(policy: .webPush)
        _ = evidence.judge(ProviderAnswer(.sent(providerMessageID: nil), fault: .accepted), subscription: UUID(), origin: "https://a.example", at: start)
        for (index, origin) in ["https://a.example", "https://b.example", "https://c.example", "https://d.example"].enumerated() {
            let outcome = evidence.judge(forbidden, subscription: UUID(), origin: origin, at: start + Double(index + 1))
            #expect(shape(outcome) == "failed vapid_forbidden")
            #expect(evidence.recordRefusal(subscription: UUID(), origin: origin, at: start + Double(index + 1)) == .credentialsWork)
        }
        // Once the acceptance is older than the window, refusals count again.
        var verdicts: [ChannelFaultEvidence.Verdict] = []
        for index in 0..<3 {
            verdicts.append(evidence.recordRefusal(subscription: UUID(), origin: "https://o\(index).example", at: start + 700))
        }
        #expect(verdicts.last == .channelAtFault(subscriptions: 3, origins: 3))
    }

    @Test func provenCredentialsInvalidateWhenTheAnswerAsks() {
        let mismatch = ProviderAnswer(
            .failed(reason: .senderIDMismatch), fault: .subscription, suspectsChannel: true, invalidatesWhenCredentialsWork: true)
        var evidence = ChannelFaultEvidence(policy: .singleOrigin)
        // Without proof: only this delivery fails.
        #expect(shape(evidence.judge(mismatch, subscription: UUID(), origin: "https://fcm", at: start)) == "failed sender_id_mismatch")
        _ = evidence.judge(ProviderAnswer(.sent(providerMessageID: nil), fault: .accepted), subscription: UUID(), origin: "https://fcm", at: start + 1)
        #expect(shape(evidence.judge(mismatch, subscription: UUID(), origin: "https://fcm", at: start + 2)) == "failed sender_id_mismatch invalidate")
    }

    @Test func singleOriginPolicyNeedsOnlyDistinctSubscriptions() {
        let notForTopic = ProviderAnswer(.failed(reason: .deviceTokenNotForTopic), fault: .subscription, suspectsChannel: true)
        var evidence = ChannelFaultEvidence(policy: .singleOrigin)
        let origin = "https://api.push.apple.com"
        #expect(shape(evidence.judge(notForTopic, subscription: UUID(), origin: origin, at: start)) == "failed device_token_not_for_topic")
        #expect(shape(evidence.judge(notForTopic, subscription: UUID(), origin: origin, at: start + 1)) == "failed device_token_not_for_topic")
        #expect(shape(evidence.judge(notForTopic, subscription: UUID(), origin: origin, at: start + 2)) == "channel device_token_not_for_topic 3/1")
    }

    @Test func answersThatAreNotSuspectPassThrough() {
        var evidence = ChannelFaultEvidence(policy: .singleOrigin)
        let answers: [ProviderAnswer] = [
            ProviderAnswer(.channelError(reason: .invalidProviderToken), fault: .channel),
            ProviderAnswer(.failed(reason: .unregistered, invalidateSubscription: true), fault: .subscription),
            ProviderAnswer(.retry(reason: DeliveryReason.http(status: 503)), fault: .transient),
        ]
        for answer in answers {
            for _ in 0..<5 {
                #expect(evidence.judge(answer, subscription: UUID(), origin: "https://x", at: start) == answer.outcome)
            }
        }
        #expect(evidence.trackedRefusals == 0)
    }
}

@Suite struct LRUCacheTests {
    @Test func holdsAtMostCapacityAndDropsTheLeastRecentlyUsed() {
        var cache = LRUCache<String, Int>(capacity: 3)
        cache.insert(1, forKey: "a")
        cache.insert(2, forKey: "b")
        cache.insert(3, forKey: "c")
        #expect(cache.value(forKey: "a") == 1)  // "b" is now the least recently used
        #expect(cache.insert(4, forKey: "d") == 2)
        #expect(cache.count == 3)
        #expect(!cache.contains("b"))
        #expect(cache.contains("a") && cache.contains("c") && cache.contains("d"))
        // Replacing a held key evicts nothing.
        #expect(cache.insert(5, forKey: "a") == nil)
        #expect(cache.value(forKey: "a") == 5)
    }

    @Test func manyKeysStayWithinTheBound() {
        var cache = LRUCache<Int, [UInt8]>(capacity: 64)
        for key in 0..<10_000 { cache.insert([UInt8](repeating: 1, count: 16), forKey: key) }
        #expect(cache.count == 64)
        #expect(cache.contains(9_999) && !cache.contains(9_935))
        cache.removeAll { _ in true }
        #expect(cache.count == 0)
        #expect(LRUCache<Int, Int>(capacity: 0).capacity == 1)
    }
}
