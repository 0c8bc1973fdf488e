import DeliveryCore
import Foundation
import Testing

@Suite struct CredentialHoldsTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    /// FCM `THIRD_PARTY_AUTH_ERROR` as `FCMResponseClassifier` reads it.
    let thirdPartyAuth = ProviderAnswer(
        .retry(reason: .thirdPartyAuthError, detail: ["status": 401, "fcm_error": "THIRD_PARTY_AUTH_ERROR"]),
        fault: .partialCredential)

    @Test func aRefusedSubscriptionIsHeldForItsHoldAndNoOtherIs() throws {
        var holds = CredentialHolds()
        let refused = UUID()
        let outcome = holds.judge(thirdPartyAuth, subscription: refused, at: start)
        let until = start.addingTimeInterval(300)
        guard case .retry(.thirdPartyAuthError, let detail, until) = outcome else {
            Issue.record("expected a retry not before the hold's end, got \(outcome)")
            return
        }
        #expect(detail["fcm_error"] == "THIRD_PARTY_AUTH_ERROR")
        #expect(detail["held_until"]?.stringValue == until.formatted(.iso8601))

        // Another push to it waits, without a request, until the hold ends; the channel's other
        // subscriptions are not held at all.
        let held = try #require(holds.heldOutcome(for: refused, at: start.addingTimeInterval(60)))
        guard case .retry(.thirdPartyAuthError, let heldDetail, until) = held else {
            Issue.record("expected the held retry, got \(held)")
            return
        }
        #expect(heldDetail["status"] == nil, "nothing was sent")
        #expect(heldDetail["refused_at"]?.stringValue == start.formatted(.iso8601))
        #expect(holds.heldOutcome(for: UUID(), at: start.addingTimeInterval(60)) == nil)
        // At the hold's end the subscription is tried again.
        #expect(holds.heldOutcome(for: refused, at: until) == nil)
    }

    @Test func otherAnswersHoldNothingAndPassThroughUnchanged() {
        var holds = CredentialHolds()
        let subscription = UUID()
        let answers = [
            ProviderAnswer(.sent(providerMessageID: "m"), fault: .accepted),
            ProviderAnswer(.channelError(reason: .permissionDenied), fault: .channel),
            ProviderAnswer(.retry(reason: .quotaExceeded), fault: .transient),
            ProviderAnswer(.failed(reason: .senderIDMismatch), fault: .subscription, suspectsChannel: true),
        ]
        for answer in answers {
            #expect(holds.judge(answer, subscription: subscription, at: start) == answer.outcome)
        }
        #expect(holds.heldSubscriptions == 0)
        #expect(holds.heldOutcome(for: subscription, at: start) == nil)
    }

    @Test func aRefusalAgainRestartsTheHold() throws {
        var holds = CredentialHolds()
        let subscription = UUID()
        _ = holds.judge(thirdPartyAuth, subscription: subscription, at: start)
        let again = start.addingTimeInterval(400)
        _ = holds.judge(thirdPartyAuth, subscription: subscription, at: again)
        #expect(holds.heldSubscriptions == 1)
        let held = try #require(holds.heldOutcome(for: subscription, at: again.addingTimeInterval(299)))
        guard case .retry(_, _, let notBefore) = held else { Issue.record("\(held)"); return }
        #expect(notBefore == again.addingTimeInterval(300))
    }

    @Test func aProviderFloorLaterThanTheHoldIsKept() {
        var holds = CredentialHolds()
        let later = start.addingTimeInterval(900)
        let answer = ProviderAnswer(.retry(reason: .thirdPartyAuthError, notBefore: later), fault: .partialCredential)
        guard case .retry(_, _, let notBefore) = holds.judge(answer, subscription: UUID(), at: start) else {
            Issue.record("expected a retry")
            return
        }
        #expect(notBefore == later)
    }

    @Test func heldSubscriptionsAreBoundedWhateverTheAnswers() {
        var holds = CredentialHolds(policy: CredentialHolds.Policy(hold: .seconds(300), maximumHeld: 4))
        let subscriptions = (0..<10).map { _ in UUID() }
        for (index, subscription) in subscriptions.enumerated() {
            _ = holds.judge(thirdPartyAuth, subscription: subscription, at: start.addingTimeInterval(Double(index)))
        }
        #expect(holds.heldSubscriptions == 4)
        let now = start.addingTimeInterval(20)
        // The most recent four are held; the older ones cost a request again.
        #expect(subscriptions.prefix(6).allSatisfy { holds.heldOutcome(for: $0, at: now) == nil })
        #expect(subscriptions.suffix(4).allSatisfy { holds.heldOutcome(for: $0, at: now) != nil })
        // Expired holds are dropped at the next refusal.
        _ = holds.judge(thirdPartyAuth, subscription: UUID(), at: start.addingTimeInterval(1000))
        #expect(holds.heldSubscriptions == 1)
    }

    @Test func nonsensePoliciesStaySane() {
        let policy = CredentialHolds.Policy(hold: .seconds(-5), maximumHeld: -3)
        #expect(policy.hold == .zero)
        #expect(policy.maximumHeld == 1)
    }
}
