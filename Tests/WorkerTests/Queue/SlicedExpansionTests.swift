import Foundation
import Postgres
import Synchronization
import Testing
@testable import Worker

/// A broadcast cut into slices (docs/targets.md, "Slices"), expanded by several connections at once, against a
/// real PostgreSQL. Small chunk and slice sizes stand in for 5,000 and 50,000.
@Suite("Sliced expansion against PostgreSQL")
struct SlicedExpansionTests {
    /// The outcome of work started on a thread of its own.
    final class Started<T: Sendable>: Sendable {
        private let outcome = Mutex<Result<T, any Error>?>(nil)
        private let done = DispatchSemaphore(value: 0)

        /// Runs `body` on a new thread now.
        init(_ body: @escaping @Sendable () throws -> T) {
            Thread.detachNewThread { [self] in
                let result = Result { try body() }
                outcome.withLock { $0 = result }
                done.signal()
            }
        }

        /// Waits for the work and returns what it returned, or throws what it threw.
        func value() throws -> T {
            done.wait()
            return try outcome.withLock { $0! }.get()
        }
    }

    /// Expands with `pick` on `connection` until nothing is left, returning every result.
    static func drain(
        _ connection: PostgresConnection, pick: ExpansionPick, chunkSize: Int, slicing: ExpansionStore.Slicing
    ) throws -> [ExpansionStore.ExpansionResult] {
        var results: [ExpansionStore.ExpansionResult] = []
        while let result = try ExpansionStore.expandNext(
            on: connection, chunkSize: chunkSize, slicing: slicing, pick: pick)
        {
            results.append(result)
        }
        return results
    }

    /// Deliveries, distinct subscriptions among them, `targeted_count`, status and slices left of `id`.
    static func outcome(_ connection: PostgresConnection, _ id: UUID) throws -> (
        deliveries: Int, distinct: Int, targeted: Int?, status: String, slicesLeft: Int
    ) {
        let row = try connection.query(
            """
            SELECT (SELECT count(*) FROM deliveries WHERE notification_id = n.id) AS deliveries,
                   (SELECT count(DISTINCT subscription_id) FROM deliveries WHERE notification_id = n.id) AS distinct_ones,
                   n.targeted_count, n.status,
                   (SELECT count(*) FROM expansion_slices WHERE notification_id = n.id) AS left_over
            FROM notifications n WHERE n.id = $1
            """, [id])[0]
        return (
            try row.decode(Int.self, "deliveries"), try row.decode(Int.self, "distinct_ones"),
            try row.decodeIfPresent(Int.self, "targeted_count"), try row.decode(String.self, "status"),
            try row.decode(Int.self, "left_over")
        )
    }

    /// One app with `subscriptions` subscriptions and an `{"all": true}` notification (or `target`) whose first,
    /// ordinary chunk of `chunkSize` has run (creating `firstCreated`, by default all it looked at), cutting the
    /// rest into slices per `slicing`.
    static func cutBroadcast(
        _ url: String, subscriptions: Int, chunkSize: Int, slicing: ExpansionStore.Slicing, target: String = #"{"all": true}"#,
        firstCreated: Int? = nil, prepare: (Seed) throws -> Void = { _ in }
    ) throws -> (seed: Seed, id: UUID) {
        let seed = try Seed(url)
        try seed.app()
        try ExpansionTests.seedSubscriptions(seed, subscriptions)
        try prepare(seed)
        let id = try seed.notification(target: target)
        #expect(
            try ExpansionStore.expandNext(on: seed.connection, chunkSize: chunkSize, slicing: slicing, pick: .skippingSmall)
                == .expanding(notificationID: id, created: firstCreated ?? chunkSize))
        return (seed, id)
    }

    /// Expects `id` expanded with exactly `audience` deliveries, one per subscription, counted, no slice open.
    static func expectExactlyExpanded(_ connection: PostgresConnection, _ id: UUID, audience: Int) throws {
        let outcome = try outcome(connection, id)
        #expect(outcome.deliveries == audience)
        #expect(outcome.distinct == audience)
        #expect(outcome.targeted == audience)
        #expect(outcome.status == "expanded")
        #expect(outcome.slicesLeft == 0)
    }

    @Test func aBroadcastIsCutIntoSlicesThatTwoConnectionsExpandAtOnceExactly() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let id = try await onThread {
                // The first chunk is an ordinary one; it finds 950 more, so they are cut into slices of 100.
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 1_000, chunkSize: 50, slicing: .init(size: 100))
                let slices = try seed.connection.query(
                    "SELECT count(*) AS n, count(*) FILTER (WHERE slice_upto IS NULL) AS open_ended FROM expansion_slices")[0]
                #expect(slices["n"] == "10")
                #expect(slices["open_ended"] == "1")
                #expect(try seed.connection.query("SELECT expansion_sliced FROM notifications")[0]["expansion_sliced"] == "t")
                // The chunk step leaves a sliced notification to the slice pick.
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 50, slicing: .init(size: 100), pick: .skippingSmall)
                        == nil)
                return id
            }
            let results = try await withThrowingTaskGroup(of: [ExpansionStore.ExpansionResult].self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await onThread {
                            let connection = try PostgresConnection(connectionString: url)
                            defer { connection.close() }
                            return try Self.drain(connection, pick: .slice, chunkSize: 50, slicing: .init(size: 100))
                        }
                    }
                }
                var all: [[ExpansionStore.ExpansionResult]] = []
                for try await results in group { all.append(results) }
                return all
            }
            // Each connection expanded chunks; exactly one of them finished the notification.
            #expect(results.allSatisfy { !$0.isEmpty })
            let finished = results.joined().filter { if case .expanded = $0 { true } else { false } }
            #expect(finished.count == 1)
            let created = results.joined().reduce(0) { sum, result in
                switch result {
                case .expanding(_, let count), .expanded(_, let count): sum + count
                default: sum
                }
            }
            #expect(created == 950)
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.expectExactlyExpanded(connection, id, audience: 1_000)
            }
        }
    }

    /// A chunk holds its slice row, not the notification: while one slice is locked (a chunk in progress on
    /// another worker), another connection expands the other slices, and the notification finishes only with
    /// the locked slice done.
    @Test func aSliceInProgressDoesNotHoldUpTheOthers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 45, chunkSize: 10, slicing: .init(size: 10))
                // Slices of ids 11-20, 21-30, 31-40, 41-: another worker is inside slice 0's chunk, holding the
                // locks a chunk holds (its slice row, and the notification FOR KEY SHARE as the insert trigger does).
                let other = try PostgresConnection(connectionString: url)
                defer { other.close() }
                try other.execute("BEGIN")
                _ = try other.query("SELECT 1 FROM expansion_slices WHERE notification_id = $1 AND slice = 0 FOR UPDATE", [id])
                _ = try other.query("SELECT 1 FROM notifications WHERE id = $1 FOR KEY SHARE", [id])

                let results = try Self.drain(seed.connection, pick: .slice, chunkSize: 10, slicing: .init(size: 10))
                // Slices 1-3, each in one chunk (a bounded slice ends when its page reaches its bound).
                #expect(
                    results == [
                        .expanding(notificationID: id, created: 10), .expanding(notificationID: id, created: 10),
                        .expanding(notificationID: id, created: 5),
                    ])
                #expect(try Self.outcome(seed.connection, id).status == "expanding")
                #expect(try Self.outcome(seed.connection, id).slicesLeft == 1)
                try other.execute("ROLLBACK")

                #expect(
                    try Self.drain(seed.connection, pick: .slice, chunkSize: 10, slicing: .init(size: 10))
                        == [.expanded(notificationID: id, created: 10)])
                try Self.expectExactlyExpanded(seed.connection, id, audience: 45)
            }
        }
    }

    /// Two chunks closing the last two slices at once: the first to commit sees the other slice still open,
    /// so the second, which waits for it on the notification row, must see it closed and finish the
    /// notification.
    @Test func ofTwoChunksClosingTheLastSlicesTheSecondToCommitFinishesTheNotification() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let id = try await onThread {
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 25, chunkSize: 10, slicing: .init(size: 10))
                #expect(try seed.connection.query("SELECT count(*) AS n FROM expansion_slices")[0]["n"] == "2")
                return id
            }
            try await onThread {
                let first = try PostgresConnection(connectionString: url)
                defer { first.close() }
                // The first chunk closes slice 0 inside a transaction left open: it sees slice 1 open.
                try first.execute("BEGIN")
                #expect(
                    try ExpansionStore.expandNext(on: first, chunkSize: 10, slicing: .init(size: 10), pick: .slice)
                        == .expanding(notificationID: id, created: 10))
                let second = Started {
                    let connection = try PostgresConnection(connectionString: url)
                    defer { connection.close() }
                    return try ExpansionStore.expandNext(on: connection, chunkSize: 10, slicing: .init(size: 10), pick: .slice)
                }
                // Give the second chunk time to reach the notification row and wait there (it finishes the
                // notification whether or not it got that far before the commit).
                Thread.sleep(forTimeInterval: 0.3)
                try first.execute("COMMIT")
                #expect(try second.value() == .expanded(notificationID: id, created: 5))
                try Self.expectExactlyExpanded(first, id, audience: 25)
            }
        }
    }

    /// The serial picks (`.any`) finish a sliced notification too, one slice chunk at a time under the
    /// notification's lock; a crash inside a slice chunk loses nothing and duplicates nothing; a filter
    /// target creates only its matches while every slice is walked.
    @Test func serialPicksACrashInsideASliceAndAFilterTarget() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                // Every third subscription is an Android one: the filter's audience (3 of the first chunk's 10).
                let (seed, id) = try Self.cutBroadcast(
                    url, subscriptions: 120, chunkSize: 10, slicing: .init(size: 25),
                    target: #"{"filters": [{"field": "platform", "relation": "=", "value": "android"}]}"#,
                    firstCreated: 3, prepare: { seed in
                        _ = try seed.connection.query(
                            """
                            UPDATE subscriptions SET platform = 'android'
                            WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER (ORDER BY id) AS n
                                                         FROM subscriptions) x
                                         WHERE n % 3 = 0)
                            """)
                    })
                #expect(try seed.connection.query("SELECT count(*) AS n FROM expansion_slices")[0]["n"] == "5")
                struct SimulatedCrash: Error {}
                #expect(throws: SimulatedCrash.self) {
                    try seed.connection.transaction { connection in
                        _ = try ExpansionStore.expandNext(on: connection, chunkSize: 10, slicing: .init(size: 25), pick: .slice)
                        throw SimulatedCrash()
                    }
                }
                let results = try Self.drain(seed.connection, pick: .any, chunkSize: 10, slicing: .init(size: 25))
                #expect(results.last.map { if case .expanded = $0 { true } else { false } } == true)
                try Self.expectExactlyExpanded(seed.connection, id, audience: 40)
                let strays = try seed.connection.query(
                    """
                    SELECT count(*) AS n FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id
                    WHERE s.platform <> 'android'
                    """)[0]
                #expect(strays["n"] == "0")
            }
        }
    }

    /// A sliced notification canceled by its producer: the slice pick closes its slices without creating
    /// anything, and the cancellation sweep does the rest as for any broadcast; an expand-only worker is not
    /// drained before both are done.
    @Test func aCanceledSlicedNotificationsSlicesAreClosedUnexpanded() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 60, chunkSize: 10, slicing: .init(size: 10))
                _ = try seed.connection.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [id])
                #expect(try !ExpansionStore.isExpansionDrained(on: seed.connection))
                #expect(try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10, slicing: .init(size: 10), pick: .slice) == nil)
                let outcome = try Self.outcome(seed.connection, id)
                #expect(outcome.deliveries == 10)
                #expect(outcome.status == "canceled")
                #expect(outcome.slicesLeft == 0)
                // The sweep is still to come.
                #expect(try !ExpansionStore.isExpansionDrained(on: seed.connection))
                #expect(try ExpansionStore.sweepCanceled(on: seed.connection)?.skipped == 10)
                #expect(try ExpansionStore.isExpansionDrained(on: seed.connection))
            }
        }
    }

    /// An audience of fewer than a slice after the first chunk is not cut: the notification's own cursor
    /// serves, as before slices existed; and id lists are never cut, however long.
    @Test func smallAudiencesAndIDListsAreNotCut() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try ExpansionTests.seedSubscriptions(seed, 30)
                let all = try seed.notification(target: #"{"all": true}"#)
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10, slicing: .init(size: 25), pick: .skippingSmall)
                        == .expanding(notificationID: all, created: 10))
                #expect(try seed.connection.query("SELECT count(*) AS n FROM expansion_slices")[0]["n"] == "0")
                while case .expanding? = try ExpansionStore.expandNext(
                    on: seed.connection, chunkSize: 10, slicing: .init(size: 25), pick: .only(all))
                {}
                #expect(try Self.outcome(seed.connection, all).targeted == 30)

                let ids = try seed.connection.query("SELECT id FROM subscriptions ORDER BY id")
                    .map { try $0.decode(UUID.self, "id").uuidString.lowercased() }
                let listed = try seed.notification(
                    target: #"{"include_subscription_ids": ["# + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]}")
                _ = try seed.connection.query(
                    "UPDATE notifications SET expansion_touched_at = now() WHERE id = $1", [listed])
                while case .expanding? = try ExpansionStore.expandNext(
                    on: seed.connection, chunkSize: 5, slicing: .init(size: 5), pick: .only(listed))
                {}
                #expect(try seed.connection.query("SELECT count(*) AS n FROM expansion_slices")[0]["n"] == "0")
                #expect(try Self.outcome(seed.connection, listed).targeted == 30)
            }
        }
    }

    /// The slice pick runs on every turn of every expand task, so with no slice open it must read nothing of
    /// `notifications` however many are pending (a join planned from the notifications' side would walk them),
    /// and with slices open, only those and their notification (closed slices are deleted, never read).
    @Test func theSlicePickReadsOnlyOpenSlicesAndTheirNotifications() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let (seed, _) = try Self.cutBroadcast(url, subscriptions: 45, chunkSize: 10, slicing: .init(size: 10))
                _ = try seed.connection.query(
                    """
                    INSERT INTO notifications (app_id, message, target)
                    SELECT $1, '{"contents": {"en": "hi"}}', '{"all": true}' FROM generate_series(1, 2000)
                    """, [seed.appID])
                _ = try seed.connection.query("ANALYZE notifications")
                _ = try seed.connection.query("ANALYZE expansion_slices")
                let open = try ExplainedPlan(
                    analyzing: ExpansionStore.slicePickSQL, [ExpansionStore.schedulingMemberBytes], on: seed.connection)
                #expect(open.rowsRead(of: "notifications") <= 4, "\(open.text)")
                #expect(open.rowsRead(of: "expansion_slices") <= 4, "\(open.text)")
                _ = try seed.connection.query("DELETE FROM expansion_slices")
                let none = try ExplainedPlan(
                    analyzing: ExpansionStore.slicePickSQL, [ExpansionStore.schedulingMemberBytes], on: seed.connection)
                #expect(none.rowsRead(of: "notifications") == 0, "\(none.text)")
                #expect(none.rowsRead(of: "expansion_slices") == 0, "\(none.text)")
            }
        }
    }

    /// A cut makes at most `maximumSlices` slices; the last, open-ended one cuts again what lies after each of
    /// its pages, so a larger audience still ends up in slices (and each cut reads a bounded part of the index).
    @Test func theLastSliceCutsWhatLiesAfterItAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let slicing = ExpansionStore.Slicing(size: 10, maximumSlices: 3)
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 100, chunkSize: 5, slicing: slicing)
                // Ids 6-15, 16-25 and 26- (open-ended).
                #expect(try seed.connection.query("SELECT count(*) AS n FROM expansion_slices")[0]["n"] == "3")
                var mostSlicesSeen = 0
                while let result = try ExpansionStore.expandNext(
                    on: seed.connection, chunkSize: 5, slicing: slicing, pick: .slice)
                {
                    let slices = try seed.connection.query(
                        "SELECT coalesce(max(slice), -1) AS top, count(*) FILTER (WHERE slice_upto IS NULL) AS open_ended FROM expansion_slices")[0]
                    mostSlicesSeen = max(mostSlicesSeen, try slices.decode(Int.self, "top") + 1)
                    // Never more than one open-ended slice.
                    #expect(try slices.decode(Int.self, "open_ended") <= 1)
                    if case .expanded = result { break }
                }
                // Each open-ended slice's first page (5 ids) is cut after: 6-15, 16-25, then 26-30 + 31-40,
                // 41-50, then 51-55 + 56-65, 66-75, then 76-80 + 81-90, 91-100, and an empty last one: 9 slices.
                #expect(mostSlicesSeen == 9)
                try Self.expectExactlyExpanded(seed.connection, id, audience: 100)
            }
        }
    }

    /// A producer deleting a sliced notification while one of its slice chunks runs waits for the chunk and
    /// then deletes it all: the slice pick takes the notification `FOR KEY SHARE` with the slice, so the delete
    /// never holds the notification while waiting for the slice row its cascade deletes (before, the chunk's
    /// insert then waited for the delete and PostgreSQL broke the deadlock by failing one of them).
    @Test func deletingASlicedNotificationDuringAChunkWaitsForItWithoutADeadlock() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let slicing = ExpansionStore.Slicing(size: 10)
                let (seed, id) = try Self.cutBroadcast(url, subscriptions: 45, chunkSize: 10, slicing: slicing)
                // A chunk has begun: its pick holds a slice.
                try seed.connection.execute("BEGIN")
                #expect(try seed.connection.query(ExpansionStore.slicePickSQL, [ExpansionStore.schedulingMemberBytes]).count == 1)
                let deleted = Started {
                    let producer = try PostgresConnection(connectionString: url)
                    defer { producer.close() }
                    return try producer.query("DELETE FROM notifications WHERE id = $1", [id]).affectedRows
                }
                // Let the producer's delete reach its wait, then the chunk inserts and commits.
                Thread.sleep(forTimeInterval: 0.3)
                #expect(
                    try ExpansionStore.expandNext(on: seed.connection, chunkSize: 10, slicing: slicing, pick: .slice)
                        == .expanding(notificationID: id, created: 10))
                try seed.connection.execute("COMMIT")
                #expect(try deleted.value() == 1)
                let left = try seed.connection.query(
                    """
                    SELECT (SELECT count(*) FROM deliveries) AS deliveries, (SELECT count(*) FROM expansion_slices) AS slices
                    """)[0]
                #expect(left["deliveries"] == "0")
                #expect(left["slices"] == "0")
            }
        }
    }
}
