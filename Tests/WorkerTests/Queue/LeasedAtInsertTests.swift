import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// Deliveries an expansion chunk leases to its own worker as it inserts them (``ExpansionStore/InsertLease``;
/// docs/performance.md, "Deliveries leased at insert") against a real PostgreSQL: written as a first claim leaves
/// them, read back in the claim's row shape, never for a send-limited app or rows due at local time (those are
/// expanded ahead whatever the room), and never inserted beyond the room the worker gave: without room the
/// notification waits, left as it was.
@Suite("Deliveries leased at insert against PostgreSQL")
struct LeasedAtInsertTests {
    static let workerID = "leasing-worker"

    /// An app with `count` active iOS subscriptions and one notification to all of them (`message`).
    static func seedBroadcast(_ url: String, count: Int, message: String = #"{"contents": {"en": "hi"}}"#) throws
        -> (seed: Seed, notificationID: UUID)
    {
        let seed = try Seed(url)
        try seed.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
        _ = try seed.connection.query(
            """
            INSERT INTO subscriptions (app_id, platform, token, apns_environment, language)
            SELECT $1, 'ios', md5(n::text) || md5('x' || n), 'production', 'en' FROM generate_series(1, $2) n
            """, [seed.appID, count])
        let id = try seed.notification(message: message, target: #"{"all": true}"#)
        return (seed, id)
    }

    /// The apps a lease's terms were asked about.
    final class Asked: Sendable {
        let apps = Mutex<[UUID]>([])
    }

    /// The slots a lease's terms handed out.
    final class Held: Sendable {
        let slots = Mutex(0)
    }

    /// Terms that lease up to `quota` rows of any chunk and record what they were asked.
    static func lease(quota: Int, seconds: Int64 = 120, asked: Asked = Asked()) -> ExpansionStore.InsertLease {
        ExpansionStore.InsertLease(workerID: workerID, lease: .seconds(seconds), leasesPages: false) { app, upTo in
            asked.apps.withLock { $0.append(app) }
            return min(quota, upTo)
        }
    }

    /// The deliveries' lease columns: rows per (leased_by, attempt, fence, due now).
    static func leaseStates(_ connection: PostgresConnection) throws -> [String: Int] {
        var states: [String: Int] = [:]
        for row in try connection.query(
            """
            SELECT coalesce(leased_by, '-') || '/' || attempt || '/' || fence || '/' || (run_at <= now()) AS state,
                   count(*) AS n
            FROM deliveries GROUP BY 1
            """)
        {
            states[try row.decode(String.self, "state")] = try row.decode(Int.self, "n")
        }
        return states
    }

    @Test func aChunkInsertsOnlyWhatItLeasesAsAFirstClaimLeavesItAndStopsThere() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try Self.seedBroadcast(url, count: 50)
                let asked = Asked()
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                let result = try ExpansionStore.expandNext(
                    on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 20, asked: asked),
                    leased: &leased)
                // The room's worth and no more: the 30 others are not inserted ahead.
                #expect(result == .expanding(notificationID: notificationID, created: 20))
                #expect(asked.apps.withLock { $0 } == [seed.appID])
                #expect(leased.count == 20)
                // 20 leased as a first claim leaves them (due at the lease's end).
                #expect(try Self.leaseStates(seed.connection) == ["\(Self.workerID)/1/1/false": 20])
                // The cursor is the 20th subscription's, the count the 20 inserted.
                let saved = try seed.connection.query(
                    """
                    SELECT n.status, n.targeted_count,
                           n.expansion_cursor = (SELECT subscription_id FROM deliveries ORDER BY 1 DESC LIMIT 1) AS at_last
                    FROM notifications n WHERE n.id = $1
                    """, [notificationID])[0]
                #expect(try saved.decode(String.self, "status") == "expanding")
                #expect(try saved.decode(Int.self, "targeted_count") == 20)
                #expect(try saved.decode(Bool.self, "at_last"))

                // Returned by the insert in the claim's row shape, each under its first fence, at the notification's
                // version as the chunk left it (what a claim reads, and the message cache with it).
                let deliveries = try ClaimStore.leasedRows(leased, on: seed.connection)
                #expect(Set(deliveries.map(\.id)) == Set(leased.ids))
                #expect(
                    Set(leased.ids) == Set(
                        try seed.connection.query("SELECT id FROM deliveries").map { try $0.decode(Int64.self, "id") }))
                #expect(deliveries.allSatisfy { $0.fence == 1 && $0.attempt == 1 && $0.notificationID == notificationID })
                #expect(deliveries.allSatisfy { $0.platform == "ios" && $0.channelProvider == "apns" })
                #expect(deliveries.first?.databaseClock != nil)
                let version = try seed.connection.query(
                    "SELECT xmin::text AS version FROM notifications WHERE id = $1", [notificationID]
                )[0].decode(String.self, "version")
                #expect(deliveries.allSatisfy { $0.messageVersion == version })
                // Nothing is left for a claim.
                #expect(
                    try ClaimStore.claim(on: seed.connection, limit: 200, lease: .seconds(120), workerID: "claimer").isEmpty)

                // The next chunks go on from the cursor: 20, then the last 10, and the notification is expanded.
                #expect(
                    try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 20), leased: &leased)
                        == .expanding(notificationID: notificationID, created: 20))
                #expect(
                    try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 20), leased: &leased)
                        == .expanded(notificationID: notificationID, created: 10))
                #expect(try Self.leaseStates(seed.connection) == ["\(Self.workerID)/1/1/false": 50])
            }
        }
    }

    /// A worker without room for the app expands nothing of it: the notification is left as it was and the call
    /// says it waits for room; told that no app has room, the pick does not even take it.
    @Test func withoutRoomNothingIsInsertedAheadAndTheNotificationWaits() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try Self.seedBroadcast(url, count: 30)
                let asked = Asked()
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                #expect(
                    try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 0, asked: asked),
                        leased: &leased) == .waitingForRoom(appIDs: [seed.appID]))
                #expect(asked.apps.withLock { $0 } == [seed.appID])
                #expect(leased.count == 0)
                let noRoom = ExpansionStore.InsertLease(workerID: Self.workerID, lease: .seconds(120), noRoom: true) {
                    _, _ in
                    Issue.record("the room of an app was asked while no app has room")
                    return 0
                }
                #expect(
                    try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects, pick: .skippingSmall, lease: noRoom,
                        leased: &leased) == .waitingForRoom(appIDs: []))
                let left = try seed.connection.query(
                    """
                    SELECT status, targeted_count, expansion_cursor, expansion_touched_at,
                           (SELECT count(*) FROM deliveries) AS deliveries
                    FROM notifications WHERE id = $1
                    """, [notificationID])[0]
                #expect(try left.decode(String.self, "status") == "pending")
                #expect(try left.decodeIfPresent(Int.self, "targeted_count") == nil)
                #expect(try left.decodeIfPresent(UUID.self, "expansion_cursor") == nil)
                // Not pushed behind the others: it is still the first the next pick with room takes.
                #expect(try left.decodeIfPresent(Date.self, "expansion_touched_at") == nil)
                #expect(try left.decode(Int.self, "deliveries") == 0)
            }
        }
    }

    /// Notifications whose rows are never leased are expanded ahead whatever the room: a send-limited app's and
    /// one delivered at local time, even when no app has room.
    @Test func rowsThatCannotBeLeasedAreExpandedAheadWithoutRoom() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, waiting) = try Self.seedBroadcast(url, count: 10)
                let localTime = try seed.notification(
                    message: #"{"contents": {"en": "hi"}, "delivery_time_of_day": "09:00"}"#, target: #"{"all": true}"#)
                let other = try Seed(url)
                try other.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (app_id, platform, token, apns_environment, language)
                    SELECT $1, 'ios', md5('l' || n::text) || md5('y' || n), 'production', 'en' FROM generate_series(1, 10) n
                    """, [other.appID])
                _ = try seed.connection.query("UPDATE apps SET max_sends_per_second = 1000 WHERE id = $1", [other.appID])
                let limited = try other.notification(message: #"{"contents": {"en": "hi"}}"#, target: #"{"all": true}"#)
                let noRoom = ExpansionStore.InsertLease(workerID: Self.workerID, lease: .seconds(120), noRoom: true) {
                    _, _ in 0
                }
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                var expanded: Set<UUID> = []
                for _ in 0..<3 {
                    switch try ExpansionStore.expandNext(
                        on: seed.connection, suspects: &suspects, pick: .skippingSmall, lease: noRoom, leased: &leased)
                    {
                    case .expanded(let id, let created)?:
                        #expect(created == 10)
                        expanded.insert(id)
                    case let other:
                        #expect(other == .waitingForRoom(appIDs: []))
                    }
                    #expect(leased.count == 0)
                }
                #expect(expanded == [localTime, limited])
                #expect(
                    try seed.connection.query(
                        "SELECT count(*) AS n FROM deliveries WHERE notification_id = $1", [waiting]
                    )[0].decode(Int.self, "n") == 0)
            }
        }
    }

    @Test func aSendLimitedAppsRowsAreNeverLeasedAtInsert() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try Self.seedBroadcast(url, count: 40)
                _ = try seed.connection.query(
                    "UPDATE apps SET max_sends_per_second = 1000 WHERE id = $1", [seed.appID])
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                let result = try ExpansionStore.expandNext(
                    on: seed.connection, suspects: &suspects,
                    lease: Self.lease(quota: 1000), leased: &leased)
                #expect(result == .expanded(notificationID: notificationID, created: 40))
                #expect(leased.count == 0)
                #expect(try Self.leaseStates(seed.connection) == ["-/0/0/true": 40])
                // The claim charges the bucket for what it takes (burst 100).
                let claimed = try ClaimStore.claim(
                    on: seed.connection, limit: 200, lease: .seconds(120), workerID: "claimer")
                #expect(claimed.count == 40)
                let tokens = try seed.connection.query(
                    "SELECT tokens::float8 AS tokens FROM app_send_buckets WHERE app_id = $1", [seed.appID]
                )[0].decode(Double.self, "tokens")
                #expect(tokens < 61)
            }
        }
    }

    @Test func rowsDueAtLocalTimeAreNeverLeasedAtInsert() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try Self.seedBroadcast(
                    url, count: 30, message: #"{"contents": {"en": "hi"}, "delivery_time_of_day": "09:00"}"#)
                let asked = Asked()
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                let result = try ExpansionStore.expandNext(
                    on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 1000, asked: asked),
                    leased: &leased)
                #expect(result == .expanded(notificationID: notificationID, created: 30))
                // The worker's room is not even asked: no slot is held for rows due later.
                #expect(asked.apps.withLock { $0 }.isEmpty)
                #expect(leased.count == 0)
                #expect(
                    try seed.connection.query(
                        "SELECT count(*) AS n FROM deliveries WHERE leased_by IS NULL AND attempt = 0 AND local_due_at IS NOT NULL"
                    )[0].decode(Int.self, "n") == 30)
            }
        }
    }

    /// Rows leased to a worker that never sends them (it died after the insert committed) fall due at the lease's
    /// end: the insert set the app's claim turn there, and a claim then takes them as it takes any expired lease.
    @Test func rowsLeasedToAWorkerThatNeverSendsAreClaimedOnceTheLeaseEnds() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try Self.seedBroadcast(url, count: 25)
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                _ = try ExpansionStore.expandNext(
                    on: seed.connection, suspects: &suspects,
                    lease: Self.lease(quota: 1000, seconds: 1), leased: &leased)
                #expect(leased.count == 25)
                // Every row leased: the app's turn is the lease's end, not now.
                let turn = try seed.connection.query(
                    """
                    SELECT t.turn_at > now() AS later, t.turn_at = (SELECT min(run_at) FROM deliveries) AS at_lease_end
                    FROM app_claim_turns t WHERE app_id = $1
                    """, [seed.appID])[0]
                #expect(try turn.decode(Bool.self, "later"))
                #expect(try turn.decode(Bool.self, "at_lease_end"))
                // Claimed by another worker once the lease has ended (a hang guard, not a timing assertion).
                var claimed: [ClaimedDelivery] = []
                let deadline = ContinuousClock.now + .seconds(60)
                while claimed.count < 25 && ContinuousClock.now < deadline {
                    claimed += try ClaimStore.claim(
                        on: seed.connection, limit: 200, lease: .seconds(120), workerID: "rescuer")
                    if claimed.count < 25 { Thread.sleep(forTimeInterval: 0.1) }
                }
                #expect(Set(claimed.map(\.id)) == Set(leased.ids))
                #expect(claimed.allSatisfy { $0.fence == 2 && $0.attempt == 2 })
            }
        }
    }

    /// A small notifications' pass leases the rows of the notifications its room covers, each notification all or
    /// none, and its insert returns them in the claim's row shape at the version the pass leaves: a local-time
    /// notification, a send-limited app's and one the room does not cover are inserted due for a claim.
    @Test func aSmallPassLeasesWhatItsRoomCoversAndReturnsTheRowsAsAClaimWould() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
                let devices = try (0..<6).map { _ in try seed.subscription() }
                func listing(_ ids: ArraySlice<UUID>) -> String {
                    #"{"include_subscription_ids": ["# + ids.map { "\"\($0.uuidString.lowercased())\"" }.joined(separator: ",") + "]}"
                }
                let two = try seed.notification(target: listing(devices[0..<2]))
                let one = try seed.notification(target: listing(devices[2..<3]))
                let uncovered = try seed.notification(target: listing(devices[3..<5]))
                let localTime = try seed.notification(
                    message: #"{"contents": {"en": "hi"}, "delivery_time_of_day": "09:00"}"#, target: listing(devices[5..<6]))
                let limited = try Seed(url)
                try limited.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
                _ = try seed.connection.query("UPDATE apps SET max_sends_per_second = 1000 WHERE id = $1", [limited.appID])
                let limitedNotification = try limited.notification(target: listing([try limited.subscription()][...]))
                let asked = Asked()
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                // Room for 3 of the app's 5 listed devices that may be leased (the local-time one is not asked for).
                let result = try SmallNotificationStore.expandSmallNotifications(
                    on: seed.connection, suspects: &suspects, lease: Self.lease(quota: 3, asked: asked), leased: &leased)
                #expect(result.expanded == 5 && result.created == 7 && result.leased == 3)
                #expect(asked.apps.withLock { $0 }.sorted { $0.uuidString < $1.uuidString }
                    == [seed.appID, limited.appID].sorted { $0.uuidString < $1.uuidString })
                let deliveries = try ClaimStore.leasedRows(leased, on: seed.connection)
                #expect(Set(deliveries.map(\.subscriptionID)) == Set(devices[0..<3]))
                #expect(deliveries.allSatisfy { $0.fence == 1 && $0.attempt == 1 && $0.channelProvider == "apns" })
                #expect(deliveries.first?.databaseClock != nil)
                for delivery in deliveries {
                    let version = try seed.connection.query(
                        "SELECT xmin::text AS version FROM notifications WHERE id = $1", [delivery.notificationID]
                    )[0].decode(String.self, "version")
                    #expect(delivery.messageVersion == version)
                }
                let states = try seed.connection.query(
                    """
                    SELECT notification_id, count(*) FILTER (WHERE leased_by = $1 AND attempt = 1 AND fence = 1 AND run_at > now()) AS leased,
                           count(*) FILTER (WHERE leased_by IS NULL AND attempt = 0 AND fence = 0) AS due
                    FROM deliveries GROUP BY notification_id
                    """, [Self.workerID]
                ).reduce(into: [UUID: String]()) {
                    $0[try $1.decode(UUID.self, "notification_id")] =
                        "\(try $1.decode(Int.self, "leased"))/\(try $1.decode(Int.self, "due"))"
                }
                #expect(states == [two: "2/0", one: "1/0", uncovered: "0/2", localTime: "0/1", limitedNotification: "0/1"])
                // What was not leased is the claim's (the local-time row when its hour comes).
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 100, lease: .seconds(60), workerID: "claimer")
                #expect(Set(claimed.map(\.notificationID)).subtracting([localTime]) == [uncovered, limitedNotification])
            }
        }
    }

    /// A small pass sizes an external-id notification by the devices it counted; a device registered between that
    /// count and the insert is leased too, so the pass can lease more rows than its room held
    /// (``Admission/admitReserved(_:app:kept:textBytes:pendingCompletions:)`` counts every one of them in). Every
    /// leased row is returned for sending: none is left leased to a worker that does not know of it.
    @Test func aDeviceRegisteredDuringTheSmallPassIsLeasedAndReturnedBeyondTheRoom() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
                let user = try seed.user("u1")
                try seed.subscription(user: user)
                _ = try seed.notification(target: #"{"include_external_ids": ["u1"]}"#)
                // The registration commits on a session of its own while the pass holds its room, after its count.
                let (app, held) = (seed.appID, Held())
                let lease = ExpansionStore.InsertLease(workerID: Self.workerID, lease: .seconds(120)) { _, upTo in
                    let registrations = try? PostgresConnection(connectionString: url, applicationName: "pushizo-test-seed")
                    for _ in 0..<2 {
                        _ = try? registrations?.query(
                            """
                            INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language)
                            VALUES ($1, $2, 'ios', $3, 'production', 'en')
                            """, [app, user, Seed.token()])
                    }
                    held.slots.withLock { $0 += upTo }
                    return upTo
                }
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                let result = try SmallNotificationStore.expandSmallNotifications(
                    on: seed.connection, suspects: &suspects, lease: lease, leased: &leased)
                #expect(held.slots.withLock { $0 } == 1)
                #expect(result.created == 3 && result.leased == 3)
                #expect(try ClaimStore.leasedRows(leased, on: seed.connection).count == 3)
            }
        }
    }
}
