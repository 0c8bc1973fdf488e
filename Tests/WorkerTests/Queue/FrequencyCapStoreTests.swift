import DeliveryCore
import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// The reservation and the release against PostgreSQL (migration 0002).
@Suite("Frequency cap grants in PostgreSQL")
struct FrequencyCapStoreTests {
    static func caps(_ rules: (Int, Int)...) -> FrequencyCaps {
        FrequencyCaps(rules: rules.map { FrequencyCapRule(max: $0.0, perSeconds: $0.1) })
    }

    static func grants(_ connection: PostgresConnection) throws -> Int {
        try connection.query("SELECT count(*) AS n FROM frequency_cap_grants")[0].decode(Int.self, "n")
    }

    @Test func aGrantIsReusedByEveryDeviceAndTheCapDeniesTheNextNotification() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let user = try seed.user("u1")
                let other = try seed.user("u2")
                let caps = Self.caps((2, 86_400))
                let (n1, n2, n3) = (UUID(), UUID(), UUID())
                func reserve(_ key: UUID, _ notification: UUID) throws -> FrequencyCapDecision {
                    try FrequencyCapStore.reserve(
                        on: seed.connection,
                        FrequencyCapRequest(appID: seed.appID, capKey: key, notificationID: notification, caps: caps))
                }
                #expect(try reserve(user, n1) == .granted(reused: false))
                // The user's second device (and any retry) reuses the grant: nothing more is counted.
                #expect(try reserve(user, n1) == .granted(reused: true))
                #expect(try reserve(user, n2) == .granted(reused: false))
                #expect(try reserve(user, n3) == .denied(rule: FrequencyCapRule(max: 2, perSeconds: 86_400), used: 2))
                // Already-granted notifications still go to more devices once the cap is full.
                #expect(try reserve(user, n2) == .granted(reused: true))
                // Another user has a quota of their own.
                #expect(try reserve(other, n3) == .granted(reused: false))
                #expect(try Self.grants(seed.connection) == 3)
            }
        }
    }

    @Test func everyRuleMustHoldAndGrantsLeaveTheWindow() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let key = UUID()  // a subscription without a user: any uuid is a key
                // At most 1 per 10 s and 2 per hour.
                let caps = Self.caps((2, 3600), (1, 10))
                func reserve(_ notification: UUID) throws -> FrequencyCapDecision {
                    try FrequencyCapStore.reserve(
                        on: seed.connection,
                        FrequencyCapRequest(appID: seed.appID, capKey: key, notificationID: notification, caps: caps))
                }
                func age(seconds: Int) throws {
                    _ = try seed.connection.query(
                        "UPDATE frequency_cap_grants SET granted_at = granted_at - make_interval(secs => $1)", [seconds])
                }
                #expect(try reserve(UUID()) == .granted(reused: false))
                #expect(try reserve(UUID()) == .denied(rule: FrequencyCapRule(max: 1, perSeconds: 10), used: 1))
                try age(seconds: 11)  // the first grant leaves the 10-second window, not the hour
                #expect(try reserve(UUID()) == .granted(reused: false))
                try age(seconds: 11)
                #expect(try reserve(UUID()) == .denied(rule: FrequencyCapRule(max: 2, perSeconds: 3600), used: 2))
                try age(seconds: 3600)  // both leave the hour
                #expect(try reserve(UUID()) == .granted(reused: false))
                // max 0 denies everything capped.
                #expect(
                    try FrequencyCapStore.reserve(
                        on: seed.connection,
                        FrequencyCapRequest(appID: seed.appID, capKey: UUID(), notificationID: UUID(), caps: Self.caps((0, 60))))
                        == .denied(rule: FrequencyCapRule(max: 0, perSeconds: 60), used: 0))
            }
        }
    }

    @Test func grantsOlderThanTheRetentionArePrunedOnTheWay() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let key = UUID()
                let request = { (notification: UUID) in
                    FrequencyCapRequest(appID: seed.appID, capKey: key, notificationID: notification, caps: Self.caps((5, 60)))
                }
                _ = try FrequencyCapStore.reserve(on: seed.connection, request(UUID()))
                _ = try seed.connection.query(
                    "UPDATE frequency_cap_grants SET granted_at = granted_at - make_interval(secs => $1)",
                    [FrequencyCapStore.minimumGrantRetention + 1])
                _ = try FrequencyCapStore.reserve(on: seed.connection, request(UUID()))
                #expect(try Self.grants(seed.connection) == 1)
            }
        }
    }

    /// Claims every delivery of the notification and returns them by subscription.
    static func claimAll(_ seed: Seed) throws -> [UUID: ClaimedDelivery] {
        let claimed = try ClaimStore.claim(on: seed.connection, limit: 100, lease: .seconds(60), workerID: "t")
        return Dictionary(uniqueKeysWithValues: claimed.map { ($0.subscriptionID, $0) })
    }

    static func completion(_ delivery: ClaimedDelivery, _ event: DeliveryEvent, release: Bool = true) -> DeliveryCompletion {
        var completion = DeliveryCompletion(
            source: delivery.source, fence: delivery.fence, event: event, reason: event == .failed ? .unregistered : nil,
            detailJSON: "{}", nextRunAt: nil)
        if release && event != .sent {
            completion.capRelease = FrequencyCapRelease(
                appID: delivery.appID, capKey: delivery.capKey, notificationID: delivery.notificationID)
        }
        return completion
    }

    @Test func aNotificationThatFailedOnEveryDeviceOfTheUserGivesItsGrantBack() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                _ = try seed.connection.query(
                    #"UPDATE apps SET frequency_caps = '[{"max": 1, "per_seconds": 86400}]' WHERE id = $1"#, [seed.appID])
                let user = try seed.user("u1")
                let phone = try seed.subscription(user: user)
                let tablet = try seed.subscription(user: user)
                let notification = try seed.notification(target: #"{"include_external_ids": ["u1"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let claimed = try Self.claimAll(seed)
                let phoneDelivery = try #require(claimed[phone])
                #expect(phoneDelivery.capKey == user)
                #expect(phoneDelivery.userID == user)
                #expect(phoneDelivery.frequencyCapsJSON == #"[{"max": 1, "per_seconds": 86400}]"#)
                let request = FrequencyCapRequest(
                    appID: seed.appID, capKey: user, notificationID: notification,
                    caps: try FrequencyCaps(jsonText: try #require(phoneDelivery.frequencyCapsJSON)))
                #expect(try FrequencyCapStore.reserve(on: seed.connection, request) == .granted(reused: false))

                // The phone fails while the tablet is still queued: the grant stays (the tablet may get it).
                #expect(try CompletionStore.complete(on: seed.connection, [Self.completion(phoneDelivery, .failed)]) == 1)
                #expect(try Self.grants(seed.connection) == 1)
                // The tablet fails too: no device got it, none is left, so it does not count.
                #expect(try CompletionStore.complete(on: seed.connection, [Self.completion(try #require(claimed[tablet]), .failed)]) == 1)
                #expect(try Self.grants(seed.connection) == 0)
                #expect(try FrequencyCapStore.reserve(
                    on: seed.connection,
                    FrequencyCapRequest(appID: seed.appID, capKey: user, notificationID: UUID(), caps: request.caps))
                    == .granted(reused: false))
            }
        }
    }

    @Test func aNotificationSentToOneDeviceKeepsItsGrantWhenAnotherFails() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let user = try seed.user("u1")
                let phone = try seed.subscription(user: user)
                let tablet = try seed.subscription(user: user)
                let anonymous = try seed.subscription()
                let notification = try seed.notification(
                    target: #"{"include_subscription_ids": ["\#(phone)", "\#(tablet)", "\#(anonymous)"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let claimed = try Self.claimAll(seed)
                let caps = Self.caps((1, 86_400))
                for key in [user, anonymous] {
                    _ = try FrequencyCapStore.reserve(
                        on: seed.connection,
                        FrequencyCapRequest(appID: seed.appID, capKey: key, notificationID: notification, caps: caps))
                }
                #expect(try Self.grants(seed.connection) == 2)
                // One batch: the phone sent, the tablet failed; the anonymous subscription (its own key) failed.
                try CompletionStore.complete(
                    on: seed.connection,
                    [
                        Self.completion(try #require(claimed[phone]), .sent),
                        Self.completion(try #require(claimed[tablet]), .failed),
                        Self.completion(try #require(claimed[anonymous]), .failed),
                    ])
                let left = try seed.connection.query("SELECT cap_key FROM frequency_cap_grants").map { try $0.decode(UUID.self, "cap_key") }
                #expect(left == [user])
            }
        }
    }

    /// Two devices of a user fail at the same moment on two workers: each completion sees the other's
    /// delivery still queued unless the check runs after the key's lock, in a fresh statement. Here both
    /// completions are held at the lock until both have deleted their rows; the grant must still go.
    @Test func simultaneousFailuresOnTwoWorkersStillGiveTheGrantBack() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                let user = try seed.user("u1")
                let phone = try seed.subscription(user: user)
                let tablet = try seed.subscription(user: user)
                let notification = try seed.notification(target: #"{"include_external_ids": ["u1"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let claimed = try Self.claimAll(seed)
                let deliveries = [try #require(claimed[phone]), try #require(claimed[tablet])]
                _ = try FrequencyCapStore.reserve(
                    on: seed.connection,
                    FrequencyCapRequest(appID: seed.appID, capKey: user, notificationID: notification, caps: Self.caps((1, 60))))

                // A third session holds the key's lock while both completions start.
                let holder = try PostgresConnection(connectionString: url)
                defer { holder.close() }
                try holder.execute("BEGIN")
                _ = try holder.query("SELECT pg_advisory_xact_lock(pushizo_frequency_cap_lock_key($1, $2))", [seed.appID, user])
                let results = Mutex<[Result<Int, any Error>]>([])
                let done = DispatchGroup()
                for delivery in deliveries {
                    done.enter()
                    Thread {
                        let result = Result {
                            let connection = try PostgresConnection(connectionString: url)
                            defer { connection.close() }
                            return try CompletionStore.complete(on: connection, [Self.completion(delivery, .failed)])
                        }
                        results.withLock { $0.append(result) }
                        done.leave()
                    }.start()
                }
                // Wait (hang guard 30 s) until both completions wait for the advisory lock.
                var waiting = 0
                for _ in 0..<1500 {
                    waiting = try seed.connection.query(
                        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    )[0].decode(Int.self, "n")
                    if waiting == 2 { break }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                #expect(waiting == 2)
                try holder.execute("COMMIT")
                done.wait()
                #expect(try results.withLock { try $0.map { try $0.get() } } == [1, 1])
                #expect(try Self.grants(seed.connection) == 0)
                #expect(try seed.connection.query(
                    "SELECT count(*) AS n FROM delivery_events WHERE notification_id = $1 AND event = 'failed'", [notification]
                )[0]["n"] == "2")
            }
        }
    }
}
