import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// Pages of a broadcast leased whole at expansion (`delivery_pages`; docs/performance.md, "Pages leased at
/// expansion") against a real PostgreSQL: one page row and no `deliveries` row per chunk, completions written only
/// under the page's fence, the page deleted with its last completion, waiting deliveries turned into rows, and a
/// page whose lease ran out rescued by another worker, which sends again only what was not settled.
@Suite("Delivery pages against PostgreSQL")
struct DeliveryPagesTests {
    static let workerID = "paging-worker"

    /// Terms that lease whole pages of up to `quota` deliveries.
    static func lease(quota: Int, seconds: Int64 = 120) -> ExpansionStore.InsertLease {
        ExpansionStore.InsertLease(workerID: workerID, lease: .seconds(seconds)) { _, upTo in min(quota, upTo) }
    }

    /// One chunk of the seeded broadcast leased as a page of up to `quota`: its deliveries as read for sending.
    static func leasePage(_ seed: Seed, quota: Int) throws -> [ClaimedDelivery] {
        var suspects = ExpansionSuspects()
        var leased = LeasedRows.none
        _ = try ExpansionStore.expandNext(
            on: seed.connection, suspects: &suspects, lease: lease(quota: quota), leased: &leased)
        return try ClaimStore.leasedRows(leased, on: seed.connection)
    }

    static func completion(
        _ delivery: ClaimedDelivery, _ event: DeliveryEvent = .sent, fence: Int64? = nil, nextRunAt: Date? = nil
    ) -> DeliveryCompletion {
        var completion = DeliveryCompletion(
            source: delivery.source, fence: fence ?? delivery.fence, event: event,
            reason: event == .retrying ? .serviceUnavailable : nil, detailJSON: "{}", nextRunAt: nextRunAt)
        completion.claimedAs = DeliveryCompletion.Claim(delivery)
        return completion
    }

    static func count(_ connection: PostgresConnection, _ sql: String) throws -> Int {
        try connection.query(sql)[0].decode(Int.self, "n")
    }

    @Test func aChunkLeasesOnePageAndNoQueueRows() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try LeasedAtInsertTests.seedBroadcast(url, count: 50)
                let deliveries = try Self.leasePage(seed, quota: 20)
                #expect(deliveries.count == 20)
                let page = try seed.connection.query(
                    "SELECT id, fence, leased_by, after_id, up_to, lease_until > now() AS live FROM delivery_pages")
                #expect(page.count == 1)
                let pageID = try page[0].decode(Int64.self, "id")
                #expect(try page[0].decodeIfPresent(UUID.self, "after_id") == nil)
                #expect(try page[0].decode(String.self, "leased_by") == Self.workerID)
                #expect(try page[0].decode(Bool.self, "live"))
                #expect(deliveries.allSatisfy { $0.source == .page(pageID) && $0.fence == 1 && $0.attempt == 1 })
                #expect(deliveries.allSatisfy { $0.notificationID == notificationID && $0.channelProvider == "apns" })
                #expect(Set(deliveries.map(\.apnsID)).count == 20)
                #expect(try page[0].decode(UUID.self, "up_to") == deliveries.map(\.subscriptionID).max())
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM deliveries") == 0)
                // The next page starts after it.
                let next = try Self.leasePage(seed, quota: 20)
                #expect(next.count == 20 && Set(next.map(\.subscriptionID)).isDisjoint(with: deliveries.map(\.subscriptionID)))
                let after = try seed.connection.query(
                    "SELECT after_id FROM delivery_pages ORDER BY id DESC LIMIT 1")[0].decodeIfPresent(UUID.self, "after_id")
                #expect(after == deliveries.map(\.subscriptionID).max())
            }
        }
    }

    /// A page's rows carry what leased rows of the same subscriptions carry, though the page takes each
    /// subscription's columns from its own read and the app's and channels' columns once for the statement: per
    /// platform's channel, a user's tags, Web Push keys, an oversized column named, the app's quiet hours and caps.
    @Test func aPagesRowsCarryWhatLeasedRowsOfTheSameSubscriptionsCarry() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: #"{"team_id": "T", "key_id": "K", "bundle_id": "b"}"#, endpoint: nil)
                _ = try seed.connection.query(
                    """
                    INSERT INTO app_channels (app_id, provider, settings, endpoint)
                    VALUES ($1, 'fcm', '{"project_id": "p"}', 'https://fcm.example/v1');
                    """, [seed.appID])
                _ = try seed.connection.query(
                    """
                    UPDATE apps SET quiet_hours_start = '22:00', quiet_hours_end = '07:00', default_timezone = 'Europe/Istanbul',
                                    frequency_caps = '[{"max": 3, "per_seconds": 86400}]'
                    WHERE id = $1
                    """, [seed.appID])
                let user = try seed.user("u1")
                _ = try seed.connection.query(#"UPDATE users SET tags = '{"plan": "gold"}' WHERE id = $1"#, [user])
                try seed.subscription(user: user)
                try seed.subscription(platform: "android", language: "tr")
                try seed.subscription(language: String(repeating: "x", count: 300))
                let web = try seed.subscription(platform: "web", language: nil)
                _ = try seed.connection.query(
                    "UPDATE subscriptions SET web_p256dh = 'p256dh', web_auth = 'auth', timezone = 'UTC', country = 'TR' WHERE id = $1",
                    [web])
                let pageNotification = try seed.notification(target: #"{"all": true}"#)
                let rowsNotification = try seed.notification(target: #"{"all": true}"#)
                let paged = try Self.leasePage(seed, quota: 10)
                var suspects = ExpansionSuspects()
                var leased = LeasedRows.none
                _ = try ExpansionStore.expandNext(
                    on: seed.connection, suspects: &suspects, lease: LeasedAtInsertTests.lease(quota: 10), leased: &leased)
                let rows = try ClaimStore.leasedRows(leased, on: seed.connection)
                #expect(paged.count == 4 && rows.count == 4)
                #expect(paged.allSatisfy { $0.notificationID == pageNotification && $0.source.pageID != nil })
                #expect(rows.allSatisfy { $0.notificationID == rowsNotification && $0.source.pageID == nil })
                let rowBySubscription = Dictionary(uniqueKeysWithValues: rows.map { ($0.subscriptionID, $0) })
                for page in paged {
                    let row = try #require(rowBySubscription[page.subscriptionID])
                    #expect(page.appID == row.appID && page.platform == row.platform && page.token == row.token)
                    #expect(page.apnsEnvironment == row.apnsEnvironment && page.language == row.language)
                    #expect(page.timezone == row.timezone && page.country == row.country)
                    #expect(page.subscriptionStatus == row.subscriptionStatus && page.tokenUpdatedAt == row.tokenUpdatedAt)
                    #expect(page.userID == row.userID && page.userTagsJSON == row.userTagsJSON)
                    #expect(page.webP256DH == row.webP256DH && page.webAuth == row.webAuth)
                    #expect(page.defaultLanguage == row.defaultLanguage && page.defaultTimezone == row.defaultTimezone)
                    #expect(page.quietHoursStart == row.quietHoursStart && page.quietHoursEnd == row.quietHoursEnd)
                    #expect(page.signingKey == row.signingKey && page.frequencyCapsJSON == row.frequencyCapsJSON)
                    #expect(page.channelProvider == row.channelProvider && page.channelSettingsJSON == row.channelSettingsJSON)
                    #expect(page.channelEndpoint == row.channelEndpoint && page.channelPausedUntil == row.channelPausedUntil)
                    #expect(page.campaignID == row.campaignID && page.uncountedRetries == row.uncountedRetries)
                    #expect(page.oversizedColumns == row.oversizedColumns)
                }
                #expect(paged.compactMap(\.channelProvider).sorted() == ["apns", "apns", "fcm"])
                #expect(paged.filter { $0.oversizedColumns == ["subscriptions.language"] }.count == 1)
                #expect(paged.contains { $0.userTagsJSON?.contains("gold") == true })
                let start = try seed.connection.query(
                    "SELECT created_at FROM notifications WHERE id = $1", [pageNotification])[0].decode(Date.self, "created_at")
                #expect(paged.allSatisfy { $0.notificationStart == start && $0.notificationStatus == rows[0].notificationStatus })
            }
        }
    }

    @Test func completionsWriteUnderThePageFenceWaitingOnesBecomeRowsAndTheLastDeletesThePage() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 10)
                let deliveries = try Self.leasePage(seed, quota: 10)
                #expect(deliveries.count == 10)
                #expect(try FleetStatusStore.readLeases(on: seed.connection).map(\.leased) == [10])
                let first = deliveries[..<5].map { Self.completion($0) }
                #expect(try CompletionStore.complete(on: seed.connection, first) == 5)
                // `status` counts in flight what the page handed out and has no outcome yet.
                let leases = try FleetStatusStore.readLeases(on: seed.connection)
                #expect(leases.map(\.workerID) == [Self.workerID] && leases.map(\.leased) == [5])
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == 5)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 1)
                // One retries: a deliveries row, with the delivery's apns-id, due then; the rest finish the page.
                let retry = Self.completion(deliveries[5], .retrying, nextRunAt: Date().addingTimeInterval(3600))
                let rest = [retry] + deliveries[6...].map { Self.completion($0) }
                let page = try #require(deliveries[0].source.pageID)
                #expect(try CompletionStore.complete(on: seed.connection, rest, finishedPages: [page]) == 5)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 0)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == 9)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'retrying'") == 1)
                let row = try seed.connection.query(
                    "SELECT subscription_id, apns_id, attempt, leased_by, run_at > now() + interval '50 minutes' AS later FROM deliveries")
                #expect(row.count == 1)
                #expect(try row[0].decode(UUID.self, "subscription_id") == deliveries[5].subscriptionID)
                #expect(try row[0].decode(UUID.self, "apns_id") == deliveries[5].apnsID)
                #expect(try row[0].decodeIfPresent(String.self, "leased_by") == nil)
                #expect(try row[0].decode(Bool.self, "later"))
            }
        }
    }

    @Test func aRescuedPageSendsAgainOnlyWhatWasNotSettledAndALateCompletionWritesNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 30)
                let deliveries = try Self.leasePage(seed, quota: 20)
                // The first worker settles 5 (sent) and 1 (a retry), then stops answering.
                let settled = deliveries[..<5].map { Self.completion($0) }
                    + [Self.completion(deliveries[5], .retrying, nextRunAt: Date().addingTimeInterval(3600))]
                #expect(try CompletionStore.complete(on: seed.connection, settled) == 6)
                // A subscription created after the page, inside its range, is not the page's.
                _ = try seed.connection.query(
                    """
                    INSERT INTO subscriptions (id, app_id, platform, token, apns_environment, created_at)
                    VALUES ($1, $2, 'ios', 'late-token-0123456789abcdef', 'production', now() + interval '1 second')
                    """, [deliveries[7].subscriptionID.successor, seed.appID])
                // No rescue while the lease lives.
                #expect(try DeliveryPageStore.rescue(on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 200).page == nil)
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                let (rows, page) = try DeliveryPageStore.rescue(on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 200)
                #expect(page?.deliveries == 14)
                let rescued = try ClaimStore.leasedRows(rows, on: seed.connection)
                #expect(Set(rescued.map(\.subscriptionID)) == Set(deliveries[6...].map(\.subscriptionID)))
                #expect(rescued.allSatisfy { $0.fence == 2 && $0.attempt == 2 && $0.rescuedFrom == Self.workerID })
                #expect(rescued.allSatisfy { $0.source == deliveries[0].source })
                let lease = try seed.connection.query("SELECT leased_by, fence, rescued_from FROM delivery_pages")[0]
                #expect(try lease.decode(String.self, "leased_by") == "rescuer")
                #expect(try lease.decode(String.self, "rescued_from") == Self.workerID)

                // The first worker's late completions write nothing, even as the page's last.
                let late = deliveries[6...].map { Self.completion($0) }
                let pageID = try #require(deliveries[0].source.pageID)
                #expect(try CompletionStore.complete(on: seed.connection, late, finishedPages: [pageID]) == 0)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 1)
                // The rescuer's settle them: one terminal event per device, and the page is gone.
                #expect(
                    try CompletionStore.complete(
                        on: seed.connection, rescued.map { Self.completion($0) }, finishedPages: [pageID]) == 14)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 0)
                #expect(
                    try Self.count(
                        seed.connection,
                        """
                        SELECT count(*) AS n FROM (
                            SELECT subscription_id FROM delivery_events WHERE event = 'sent'
                            GROUP BY subscription_id HAVING count(*) = 1) x
                        """) == 19)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == 19)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM deliveries") == 1)
            }
        }
    }

    @Test func theQueueSampleCountsAPagesDeliveriesWithoutAnOutcomeAsLeasedThenDue() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 10)
                let deliveries = try Self.leasePage(seed, quota: 10)
                let settled = deliveries[..<2].map { Self.completion($0) }
                    + [Self.completion(deliveries[2], .retrying, nextRunAt: Date().addingTimeInterval(3600))]
                #expect(try CompletionStore.complete(on: seed.connection, settled) == 3)
                // As `status` counts them: 7 in flight under the page's lease, the retry a deferred row.
                var depth = try #require(try QueueDepthStore.measureQueueDepth(on: seed.connection).depth["apns"])
                #expect(depth.leased == 7 && depth.due == 0 && depth.deferred == 1)
                #expect(try FleetStatusStore.readLeases(on: seed.connection).map(\.leased) == [7])
                // Once the lease runs out they are due: the next rescue takes them.
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '10 seconds'")
                depth = try #require(try QueueDepthStore.measureQueueDepth(on: seed.connection).depth["apns"])
                #expect(depth.leased == 0 && depth.due == 7 && depth.oldestDueAge >= 10)
            }
        }
    }

    @Test func aRescueTakesNoMoreThanItsLimitAndLeavesTheRestOfThePageDueForTheNextRescue() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 20)
                let deliveries = try Self.leasePage(seed, quota: 20)
                #expect(deliveries.count == 20)
                let settled = deliveries.sorted { $0.subscriptionID.uuidString < $1.subscriptionID.uuidString }
                #expect(try CompletionStore.complete(on: seed.connection, settled[..<3].map { Self.completion($0) }) == 3)
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                var taken: [[ClaimedDelivery]] = []
                while true {
                    let (rows, page) = try DeliveryPageStore.rescue(
                        on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 8)
                    guard page != nil else { break }
                    taken.append(try ClaimStore.leasedRows(rows, on: seed.connection))
                    // The pages' deliveries still add up to the page's, and `status` counts the 17 left in flight.
                    #expect(try Self.count(seed.connection, "SELECT sum(deliveries)::int AS n FROM delivery_pages") == 20)
                    #expect(try FleetStatusStore.readLeases(on: seed.connection).reduce(Int64(0)) { $0 + Int64($1.leased) + Int64($1.expired) } == 17)
                }
                #expect(taken.map(\.count) == [8, 8, 1])
                let all = taken.flatMap { $0 }
                #expect(Set(all.map(\.subscriptionID)) == Set(settled[3...].map(\.subscriptionID)) && all.count == 17)
                #expect(all.allSatisfy { $0.rescuedFrom == Self.workerID && $0.fence == 2 && $0.attempt == 2 })
                // Each part settles under its own page; the last completion of each deletes it.
                for part in taken {
                    let page = try #require(part[0].source.pageID)
                    #expect(part.allSatisfy { $0.source == .page(page) })
                    #expect(
                        try CompletionStore.complete(
                            on: seed.connection, part.map { Self.completion($0) }, finishedPages: [page]) == part.count)
                }
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 0)
                #expect(try Self.count(seed.connection, "SELECT count(DISTINCT subscription_id) AS n FROM delivery_events WHERE event = 'sent'") == 20)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == 20)
            }
        }
    }

    @Test func aPageWhoseNotificationIsDeletedInFlightStillWritesEachOutcomeAsDeliveryDeleted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try LeasedAtInsertTests.seedBroadcast(url, count: 6)
                let deliveries = try Self.leasePage(seed, quota: 6)
                #expect(deliveries.count == 6)
                let pageID = try #require(deliveries[0].source.pageID)
                // One is settled before the delete; the page goes with its notification.
                #expect(try CompletionStore.complete(on: seed.connection, [Self.completion(deliveries[0])]) == 1)
                _ = try seed.connection.query("DELETE FROM notifications WHERE id = $1", [notificationID])
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 0)
                // The pushes in flight answer: each gets its event, as a claimed row's would, marked deleted; the one
                // already settled gets no second event, and a retry writes its event and no row.
                let rest = deliveries[..<5].map { Self.completion($0) }
                    + [Self.completion(deliveries[5], .retrying, nextRunAt: Date().addingTimeInterval(60))]
                #expect(try CompletionStore.complete(on: seed.connection, rest, finishedPages: [pageID]) == 5)
                #expect(
                    try Self.count(
                        seed.connection,
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent' AND detail ? 'delivery_deleted'") == 4)
                #expect(
                    try Self.count(
                        seed.connection,
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'retrying' AND detail ? 'delivery_deleted'") == 1)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'") == 5)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM deliveries") == 0)
            }
        }
    }

    @Test func aDeletedSubscriptionOfARescuedPageGetsItsInFlightOutcomeAsDeliveryDeletedAndNoResend() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 4)
                let deliveries = try Self.leasePage(seed, quota: 4)
                let pageID = try #require(deliveries[0].source.pageID)
                // Deleted while its push is in flight; the page's lease runs out and another worker rescues it.
                _ = try seed.connection.query("DELETE FROM subscriptions WHERE id = $1", [deliveries[0].subscriptionID])
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                let (rows, page) = try DeliveryPageStore.rescue(on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 200)
                // What the deliveries trigger does to a deleted subscription's queued row: nothing is sent again.
                #expect(page?.deliveries == 3)
                let rescued = try ClaimStore.leasedRows(rows, on: seed.connection)
                #expect(!rescued.map(\.subscriptionID).contains(deliveries[0].subscriptionID))
                // The first worker's late answers: only the deleted subscription's is written, as a row's would be.
                #expect(
                    try CompletionStore.complete(
                        on: seed.connection, deliveries.map { Self.completion($0) }, finishedPages: [pageID]) == 1)
                let event = try seed.connection.query(
                    "SELECT subscription_id, (detail ->> 'delivery_deleted')::bool AS deleted FROM delivery_events")
                #expect(event.count == 1)
                #expect(try event[0].decode(UUID.self, "subscription_id") == deliveries[0].subscriptionID)
                #expect(try event[0].decode(Bool.self, "deleted"))
            }
        }
    }

    @Test func aPageDeliveryThatCannotBeReadFailsAloneUnderThePageFence() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try LeasedAtInsertTests.seedBroadcast(url, count: 3)
                let deliveries = try Self.leasePage(seed, quota: 3)
                let pageID = try #require(deliveries[0].source.pageID)
                let unreadable = PostgresError(code: .decodingFailed, message: "a column's text")
                // Under a fence the page no longer holds: nothing.
                try DeliveryPageStore.setAside(
                    on: seed.connection, page: pageID, fence: 2, subscriptionID: deliveries[0].subscriptionID,
                    error: unreadable)
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_events") == 0)
                try DeliveryPageStore.setAside(
                    on: seed.connection, page: pageID, fence: 1, subscriptionID: deliveries[0].subscriptionID,
                    error: unreadable)
                let event = try seed.connection.query("SELECT subscription_id, event, reason, detail::text AS detail FROM delivery_events")
                #expect(event.count == 1)
                #expect(try event[0].decode(UUID.self, "subscription_id") == deliveries[0].subscriptionID)
                #expect(try event[0].decode(String.self, "event") == "failed")
                #expect(try event[0].decode(String.self, "reason") == "unreadable_row")
                #expect(try !event[0].decode(String.self, "detail").contains("a column's text"))
                // A rescue leaves it out, and sends the other two again.
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                let (_, page) = try DeliveryPageStore.rescue(on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 200)
                #expect(page?.deliveries == 2)
            }
        }
    }

    @Test func aRescuedPageOfACanceledNotificationIsReadAsCanceled() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, notificationID) = try LeasedAtInsertTests.seedBroadcast(url, count: 10)
                let deliveries = try Self.leasePage(seed, quota: 10)
                #expect(deliveries.count == 10)
                _ = try OperatorCancel.cancel(notification: notificationID, note: nil, on: seed.connection)
                // The sweep leaves the page to its worker (in flight) and the notification is not drained.
                while try ExpansionStore.sweepCanceled(on: seed.connection) != nil {}
                #expect(try Self.count(seed.connection, "SELECT count(*) AS n FROM delivery_pages") == 1)
                #expect(try !QueueDepthStore.isDrained(on: seed.connection))
                _ = try seed.connection.query("UPDATE delivery_pages SET lease_until = now() - interval '1 second'")
                let (rows, _) = try DeliveryPageStore.rescue(on: seed.connection, workerID: "rescuer", lease: .seconds(120), limit: 200)
                let rescued = try ClaimStore.leasedRows(rows, on: seed.connection)
                #expect(rescued.count == 10)
                // What the send pipeline skips as `canceled`.
                #expect(rescued.allSatisfy { $0.notificationStatus == "canceled" })
            }
        }
    }
}

extension UUID {
    /// The next UUID in PostgreSQL's order (the last byte plus one, carried).
    fileprivate var successor: UUID {
        var bytes = withUnsafeBytes(of: uuid) { Array($0) }
        var index = 15
        while index >= 0 {
            bytes[index] &+= 1
            if bytes[index] != 0 { break }
            index -= 1
        }
        return bytes.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
    }
}
