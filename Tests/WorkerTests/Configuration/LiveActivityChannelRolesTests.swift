import Foundation
import SocketTestSupport
import Postgres
import Testing
@testable import Worker

/// Producers' rights on the Live Activity tables (migration 0036; docs/operations.md, "Roles";
/// docs/producer-contract.md, `live_activity_channels`): the columns a producer writes and, with producers' row-level
/// security on, only the rows of its own apps.
@Suite("Live Activity channel roles")
struct LiveActivityChannelRolesTests {
    typealias Roles = DatabaseRolesTests

    /// A channel row for each app, and a channel send for each app's notification, written as the owner.
    static func seedChannels(_ owner: PostgresConnection) throws {
        for (app, name) in [(Roles.appA, "match-a"), (Roles.appB, "match-b")] {
            _ = try owner.query("INSERT INTO live_activity_channels (app_id, name) VALUES ($1, $2)", [app, name])
            _ = try owner.query(
                """
                INSERT INTO live_activity_channel_sends (notification_id, app_id, channel_name)
                SELECT id, app_id, $2 FROM notifications WHERE app_id = $1
                """, [app, name])
        }
    }

    /// The worker's columns: what it records of APNs's answers and its reconciliation's bookkeeping.
    static let workerColumns: [(column: String, value: String)] = [
        ("state", "'active'"), ("apple_channel_id", "'dHJ1c3QgbWU='"), ("error_reason", "NULL"), ("error_detail", "NULL"),
        ("revision", "revision + 1"), ("reconciled_revision", "revision"), ("lease_until", "now()"),
        ("lease_token", "gen_random_uuid()"), ("attempts", "0"), ("run_at", "now()"),
    ]

    /// Without row-level security a producer still writes only its columns: the desired state and the storage
    /// policy, never the worker's record of APNs's answers or the reconciliation's lease.
    @Test func aProducerWritesTheDesiredStateAndNoneOfTheWorkersColumns() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Roles.withLogin(url, in: "pushizo_producer") { producer in
                try await Roles.asOwner(url) { owner in
                    try Roles.seedTwoApps(owner)
                    try Self.seedChannels(owner)
                    let c = try Roles.connect(url, as: producer)
                    defer { c.close() }
                    _ = try c.query(
                        """
                        INSERT INTO live_activity_channels (app_id, name, environment, message_storage_policy, desired_state)
                        VALUES ($1, 'mine', 'sandbox', 1, 'present')
                        """, [Roles.appA])
                    let updated = try c.query(
                        "UPDATE live_activity_channels SET desired_state = 'absent', message_storage_policy = 1 WHERE app_id = $1 AND name = 'mine'",
                        [Roles.appA])
                    #expect(updated.affectedRows == 1)
                    for (column, value) in Self.workerColumns {
                        Roles.expectRefused(
                            c, "UPDATE live_activity_channels SET \(column) = \(value) WHERE app_id = $1", [Roles.appA])
                    }
                    Roles.expectRefused(
                        c, "INSERT INTO live_activity_channels (app_id, name, state, apple_channel_id) VALUES ($1, 'forged', 'active', 'eA==')",
                        [Roles.appA])
                    Roles.expectRefused(
                        c, "INSERT INTO live_activity_channels (app_id, name, reconciled_revision) VALUES ($1, 'skipped', 5)", [Roles.appA])
                    // Sends are the worker's: a producer reads them only.
                    Roles.expectRefused(c, "DELETE FROM live_activity_channel_sends")
                    Roles.expectRefused(c, "UPDATE live_activity_channel_sends SET run_at = now()")
                    let untouched = try owner.query(
                        "SELECT count(*)::int AS n FROM live_activity_channels WHERE state = 'pending' AND apple_channel_id IS NULL")
                    #expect(try untouched[0].decode(Int.self, "n") == 3)
                }
            }
        }
    }

    /// With row-level security on, a producer of app A reads none of app B's channels or channel sends, and can
    /// neither insert a channel into B, move one of its own there, nor change or delete B's.
    @Test func aProducerOfOneAppCannotReachAnothersChannelsWithRowSecurityOn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Roles.withLogin(url, in: "pushizo_producer") { producer in
                try await Roles.asOwner(url) { owner in
                    try Roles.seedTwoApps(owner)
                    try Self.seedChannels(owner)
                    _ = try owner.query("INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, Roles.appA])
                    _ = try owner.query("SELECT pushizo_set_producer_row_security(true)")

                    let c = try Roles.connect(url, as: producer)
                    defer { c.close() }
                    for table in ["live_activity_channels", "live_activity_channel_sends"] {
                        let seen = try c.query("SELECT DISTINCT app_id FROM \(table)").map { try $0.decode(UUID.self, "app_id") }
                        #expect(seen == [Roles.appA], "\(table)")
                    }
                    let updated = try c.query(
                        "UPDATE live_activity_channels SET desired_state = 'absent' WHERE app_id = $1", [Roles.appB])
                    #expect(updated.affectedRows == 0)
                    let deleted = try c.query("DELETE FROM live_activity_channels WHERE app_id = $1", [Roles.appB])
                    #expect(deleted.affectedRows == 0)
                    Roles.expectRefused(
                        c, "INSERT INTO live_activity_channels (app_id, name) VALUES ($1, 'intruder')", [Roles.appB])
                    Roles.expectRefused(
                        c, "UPDATE live_activity_channels SET app_id = $1 WHERE app_id = $2", [Roles.appB, Roles.appA])
                    // Its own app still works.
                    _ = try c.query("INSERT INTO live_activity_channels (app_id, name) VALUES ($1, 'second')", [Roles.appA])
                    let own = try c.query(
                        "UPDATE live_activity_channels SET desired_state = 'absent' WHERE app_id = $1 AND name = 'match-a'", [Roles.appA])
                    #expect(own.affectedRows == 1)

                    let theirs = try owner.query(
                        "SELECT desired_state FROM live_activity_channels WHERE app_id = $1", [Roles.appB]
                    ).map { $0["desired_state"] }
                    #expect(theirs == ["present"])
                    let theirSends = try owner.query(
                        "SELECT count(*)::int AS n FROM live_activity_channel_sends WHERE app_id = $1", [Roles.appB])
                    #expect(try theirSends[0].decode(Int.self, "n") == 1)
                }
            }
        }
    }
}
