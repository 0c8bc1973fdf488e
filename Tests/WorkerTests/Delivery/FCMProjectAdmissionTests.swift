import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// Which sends of an FCM batch their projects' grants admit, and when the others come back (docs/fcm.md,
/// "Project quota"), without a database.
@Suite("FCM project admission")
struct FCMProjectAdmissionTests {
    static let at = Date(timeIntervalSince1970: 1_800_000_000)

    static func grant(_ project: String, granted: Int, left: Double, perSecond: Double = 10) -> FCMProjectGrant {
        FCMProjectGrant(
            project: project, quotaPerMinute: perSecond * 61, granted: granted, permitsLeft: left, perSecond: perSecond,
            chargedAt: at)
    }

    @Test func asksCountEachProjectsSendsInFirstSeenOrder() {
        let asks = FCMProjectAdmission.asks(projects: ["p", nil, "q", "p", "p"])
        #expect(asks.map(\.project) == ["p", "q"])
        #expect(asks.map(\.sends) == [3, 1])
    }

    /// A project granted two of its four sends: the first two in batch order go, the others come back one and two
    /// permits later (10 a second, 0.4 left); another project's and an unknown project's sends all go.
    @Test func eachProjectAdmitsWhatItWasGrantedInBatchOrder() {
        let admission = FCMProjectAdmission(
            projects: ["busy", "calm", "busy", nil, "busy", "busy"],
            grants: [Self.grant("busy", granted: 2, left: 0.4), Self.grant("calm", granted: 1, left: 50)],
            retry: Self.at.addingTimeInterval(1))
        #expect(admission.admitted == [0, 1, 2, 3])
        #expect(admission.held.map(\.index) == [4, 5])
        #expect(admission.held.map { $0.until.timeIntervalSince(Self.at) }.map { ($0 * 1000).rounded() } == [60, 160])
    }

    @Test func aProjectWithoutAGrantHoldsAllItsSendsUntilTheRetry() {
        let retry = Self.at.addingTimeInterval(1)
        let admission = FCMProjectAdmission(projects: ["gone", "calm", "gone"], grants: [Self.grant("calm", granted: 1, left: 5)], retry: retry)
        #expect(admission.admitted == [1])
        #expect(admission.held.map(\.index) == [0, 2])
        #expect(admission.held.allSatisfy { $0.until == retry })
    }

    @Test func aHeldSendIsARetryOnItsProjectQuota() {
        guard case .retry(let reason, _, let until) = FCMProjectAdmission.heldOutcome(until: Self.at) else {
            Issue.record("not a retry")
            return
        }
        #expect(reason == .fcmProjectQuota)
        #expect(until == Self.at)
    }
}
