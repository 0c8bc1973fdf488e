import Foundation
import Postgres
import Testing
@testable import Worker

/// PostgreSQL's clock as a claim reads it (docs/clocks.md): the offset at half the round trip, the instant
/// carried forward by the monotonic clock, and the reading every claimed row carries.
@Suite("Reading PostgreSQL's clock with the claim")
struct DatabaseClockReadingTests {
    /// Clocks as values: the worker's wall clock 600 s ahead, a 2 s round trip.
    @Test func theOffsetIsTakenHalfWayThroughTheRoundTripAndTheInstantMovesByTheMonotonicClock() {
        let sentAt = ContinuousClock.now
        let workerWall = Date(timeIntervalSince1970: 1_800_000_600)
        let databaseNow = Date(timeIntervalSince1970: 1_800_000_001)
        let reading = DatabaseClockReading(
            databaseNow: databaseNow, sent: .init(monotonic: sentAt, wall: workerWall), receivedAt: sentAt + .seconds(2))
        #expect(reading.roundTripSeconds == 2)
        #expect(reading.offsetSeconds == -600)
        #expect(reading.now(at: sentAt + .seconds(2)) == databaseNow)
        #expect(reading.now(at: sentAt + .milliseconds(7_500)) == databaseNow.addingTimeInterval(5.5))
    }

    @Test func aDeliveryWithoutAReadingIsJudgedByTheWorkersClock() {
        let before = Date()
        let judged = HeldTextBytesTests.row(app: UUID(), tags: nil, token: "t", settings: "{}").judgedNow()
        #expect(judged >= before && judged <= Date())
    }

    /// Every row of a claim carries the statement's `now()`; the next-turn check reads it too.
    @Test func claimedRowsCarryTheClaimsNow() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                try seed.subscription()
                try seed.subscription()
                try seed.notification(target: #"{"all": true}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let before = try seed.connection.query("SELECT now() AS t")[0].decode(Date.self, "t")
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "clock-test")
                let after = try seed.connection.query("SELECT now() AS t")[0].decode(Date.self, "t")
                #expect(claimed.count == 2)
                let readings = Set(claimed.compactMap { $0.databaseClock?.databaseNow })
                #expect(readings.count == 1)
                if let claimedAt = readings.first {
                    #expect(claimedAt >= before && claimedAt <= after)
                    // The lease is the claim's now() plus the lease, on the same clock.
                    let runAt = try seed.connection.query("SELECT min(run_at) AS r FROM deliveries")[0].decode(Date.self, "r")
                    #expect(abs(runAt.timeIntervalSince(claimedAt) - 60) < 0.001)
                }
                let turn = try ClaimStore.nextTurn(on: seed.connection)
                #expect(turn.clock.databaseNow >= after)
            }
        }
    }
}
