import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

extension CitusSuites {
    /// The worker's Live Activity channel statements and the FCM project quota charge on a distributed database
    /// (docs/scale-out.md, "Every table"): each send leased once, by statements that each lock one send's shard, and
    /// settled with its event; a channel change leased and recorded on the reference table; concurrent charges of
    /// one project within its bucket.
    @Suite struct CitusLiveActivityAndQuotaTests {
        typealias Distribute = CitusSuites.CitusDistributeTests

        @Test func channelSendsAreLeasedOnceEachAndSettledOnTheDistributedSchema() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                let app = UUID()
                let sends = (0..<4).map { _ in UUID() }
                try await Distribute.onCoordinator(database) { c in
                    _ = try c.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    _ = try c.query("INSERT INTO live_activity_channels (app_id, name) VALUES ($1, 'match')", [app])
                    for id in sends {
                        _ = try c.query(
                            """
                            INSERT INTO notifications (id, app_id, message, target, status, send_after)
                            VALUES ($1, $2, '{"contents": {"en": "Goal"}}', '{"live_activity_channel": "match"}', 'expanded', 'infinity')
                            """, [id, app])
                        _ = try c.query(
                            "INSERT INTO live_activity_channel_sends (notification_id, app_id, channel_name) VALUES ($1, $2, 'match')",
                            [id, app])
                    }
                }
                // One send held by another transaction (a worker settling it): the pick goes past it.
                let holder = try await onThread { try IdempotencyKeysTests.Held(database.coordinator, "pushizo-test-holder") }
                try await onThread {
                    try holder.connection.execute("BEGIN")
                    _ = try holder.connection.query(
                        "SELECT 1 FROM live_activity_channel_sends WHERE notification_id = $1 FOR UPDATE", [sends[0]])
                }
                let (leased, none) = try await Distribute.onCoordinator(database) { c in
                    var leased: [LiveActivityChannelStore.ChannelSend] = []
                    while let send = try LiveActivityChannelStore.leaseSend(workerID: "citus-test", lease: .seconds(300), on: c) {
                        leased.append(send)
                        if leased.count > sends.count { break }
                    }
                    return (leased, try LiveActivityChannelStore.leaseSend(workerID: "citus-test", lease: .seconds(300), on: c))
                }
                try await onThread {
                    try holder.connection.execute("ROLLBACK")
                    holder.connection.close()
                }
                #expect(none == nil)
                #expect(Set(leased.map(\.notificationID)) == Set(sends.dropFirst()), "\(leased.map(\.notificationID))")
                let first = try #require(leased.first)
                #expect(first.message?.contains("Goal") == true && first.notificationStatus == "expanded")
                #expect(first.channelState == "pending" && first.attempt == 1)

                let (settled, retried, events, left) = try await Distribute.onCoordinator(database) { c in
                    let settled = try LiveActivityChannelStore.settle(
                        first, event: .sent, reason: nil, detail: .object([:]), retryAt: nil, on: c)
                    let retried = try LiveActivityChannelStore.settle(
                        leased[1], event: .retrying, reason: nil, detail: .object([:]), retryAt: Date().addingTimeInterval(60), on: c)
                    let events = try c.query(
                        "SELECT event FROM delivery_events WHERE notification_id = ANY($1::uuid[]) ORDER BY event",
                        [[first.notificationID, leased[1].notificationID]]
                    ).map { $0["event"] ?? "" }
                    let left = try c.query("SELECT count(*)::int AS n FROM live_activity_channel_sends")[0].decode(Int.self, "n")
                    return (settled, retried, events, left)
                }
                #expect(settled && retried)
                #expect(events == ["retrying", "sent"])
                #expect(left == sends.count - 1)
            }
        }

        @Test func aChannelChangeIsLeasedAndRecordedOnTheReferenceTable() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                let app = UUID()
                let (change, recorded, state) = try await Distribute.onCoordinator(database) { c in
                    _ = try c.query("INSERT INTO apps (id) VALUES ($1)", [app])
                    _ = try c.query("INSERT INTO live_activity_channels (app_id, name) VALUES ($1, 'match')", [app])
                    let change = try #require(try LiveActivityChannelStore.leaseChange(lease: .seconds(300), on: c))
                    let recorded = try LiveActivityChannelStore.record(.active(appleChannelID: "dHN0LWNoYW5uZWw="), of: change, on: c)
                    let state = try c.query("SELECT state FROM live_activity_channels WHERE id = $1", [change.id])[0]["state"]
                    return (change, recorded, state)
                }
                #expect(change.appID == app && change.revision == 1)
                #expect(recorded && state == "active")
            }
        }

        @Test func concurrentFCMProjectChargesStayWithinTheBucket() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                try await FCMProjectQuotaStoreTests.raceCharges(url: database.coordinator)
            }
        }
    }
}
