import Foundation
import Postgres
import Testing
@testable import Worker

/// The fleet's one queue sample (`queue_depth_samples`): measured by one worker per turn, read by the others,
/// spaced out by how long measuring took.
@Suite("Queue sample shared by the fleet", .serialized)
struct SharedQueueDepthTests {
    static func share(_ connection: PostgresConnection, interval: Duration = .seconds(60), worker: String) throws
        -> SharedQueueDepth?
    {
        try QueueDepthStore.sharedQueueDepth(on: connection, interval: interval, dutyCycle: 0.05, sampler: worker)
    }

    /// One iOS subscription with one due delivery.
    static func seedOneDueDelivery(_ seed: Seed) throws {
        try seed.app(channelSettings: "{}")
        let subscription = try seed.subscription()
        try seed.notification(target: #"{"include_external_ids": ["nobody"]}"#)
        _ = try seed.connection.query(
            """
            INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at)
            SELECT id, $1, app_id, now() - interval '30 seconds' FROM notifications
            """, [subscription])
    }

    @Test func theFirstWorkerMeasuresAndTheNextReadsItsSample() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try Self.seedOneDueDelivery(seed)
                let other = try PostgresConnection(connectionString: url)
                let first = try #require(try Self.share(seed.connection, worker: "w1"))
                #expect(first.measuredHere)
                #expect(first.sample.depth["apns"]?.due == 1)
                // More work arrives; within the interval a second worker reads the stored sample.
                _ = try seed.connection.query("UPDATE deliveries SET run_at = now() + interval '1 hour'")
                let second = try #require(try Self.share(other, worker: "w2"))
                #expect(!second.measuredHere)
                #expect(second.sample == first.sample)
                #expect(second.sampledAt == first.sampledAt)
                let by = try seed.connection.query("SELECT sampled_by FROM queue_depth_samples")[0]["sampled_by"]
                #expect(by == "w1")
                // Once due again, it is measured afresh.
                _ = try seed.connection.query("UPDATE queue_depth_samples SET sampled_at = sampled_at - interval '2 minutes'")
                let third = try #require(try Self.share(other, worker: "w2"))
                #expect(third.measuredHere)
                #expect(third.sample.depth["apns"] == .init(due: 0, deferred: 1, leased: 0, oldestDueAge: 0))
            }
        }
    }

    @Test func aWorkerFindingTheTurnTakenReadsTheLastSampleWithoutWaiting() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try Self.seedOneDueDelivery(seed)
                let holder = try PostgresConnection(connectionString: url)
                // Another worker is measuring the very first sample: nothing to show yet, and no wait.
                try holder.execute("BEGIN")
                _ = try holder.query("SELECT 1 FROM queue_depth_samples FOR UPDATE")
                #expect(try Self.share(seed.connection, interval: .zero, worker: "w1") == nil)
                try holder.execute("ROLLBACK")
                let measured = try #require(try Self.share(seed.connection, interval: .zero, worker: "w1"))
                #expect(measured.measuredHere)
                // The turn is taken again: the last sample comes back as it was.
                try holder.execute("BEGIN")
                _ = try holder.query("SELECT 1 FROM queue_depth_samples FOR UPDATE")
                let read = try #require(try Self.share(seed.connection, interval: .zero, worker: "w1"))
                #expect(!read.measuredHere)
                #expect(read.sample == measured.sample)
                try holder.execute("ROLLBACK")
            }
        }
    }

    @Test func aSlowSampleSpacesOutTheNextTurn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try Self.seedOneDueDelivery(seed)
                _ = try #require(try Self.share(seed.connection, interval: .zero, worker: "w1"))
                // Measuring took 100 s 10 minutes ago: at a 5 % duty cycle the next turn is 2,000 s after it.
                _ = try seed.connection.query(
                    "UPDATE queue_depth_samples SET took_seconds = 100, sampled_at = now() - interval '10 minutes'")
                #expect(try Self.share(seed.connection, interval: .seconds(1), worker: "w1")?.measuredHere == false)
                _ = try seed.connection.query("UPDATE queue_depth_samples SET sampled_at = now() - interval '34 minutes'")
                #expect(try Self.share(seed.connection, interval: .seconds(1), worker: "w1")?.measuredHere == true)
            }
        }
    }

    /// A pass cancelled by its statement timeout (here: waiting behind a lock on `deliveries`, which the
    /// timeout counts as well) is thrown as `query_canceled` and recorded: the next turn is spaced from it as
    /// from a sample that took as long, and the last sample stays as it was.
    @Test func aTimedOutPassIsRecordedAndSpacesOutTheNextTurn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try Self.seedOneDueDelivery(seed)
                let first = try #require(try Self.share(seed.connection, interval: .zero, worker: "w1"))
                _ = try seed.connection.query("UPDATE queue_depth_samples SET sampled_at = now() - interval '1 hour'")
                let holder = try PostgresConnection(connectionString: url)
                try holder.execute("BEGIN")
                try holder.execute("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE")
                #expect {
                    try QueueDepthStore.sharedQueueDepth(
                        on: seed.connection, interval: .seconds(1), dutyCycle: 0.05, sampler: "w2", timeoutMilliseconds: 200)
                } throws: { error in
                    (error as? PostgresError)?.sqlState == "57014"
                }
                try holder.execute("ROLLBACK")
                let row = try seed.connection.query(
                    """
                    SELECT timed_out_at IS NOT NULL AND timed_out_at > sampled_at AS recorded, took_seconds >= 0.2 AS took,
                           sampled_by FROM queue_depth_samples
                    """)[0]
                #expect(try row.decode(Bool.self, "recorded") && row.decode(Bool.self, "took"))
                #expect(row["sampled_by"] == "w1")
                // Not due again at once (the pass ran 0.2 s or more: 4 s or more at a 5 % duty cycle): the last
                // sample is shown, unchanged.
                let next = try #require(try Self.share(seed.connection, interval: .seconds(1), worker: "w2"))
                #expect(!next.measuredHere)
                #expect(next.sample == first.sample)
                // Once the spacing has passed since the timeout, it is measured again.
                _ = try seed.connection.query("UPDATE queue_depth_samples SET timed_out_at = now() - interval '1 hour'")
                #expect(try Self.share(seed.connection, interval: .seconds(1), worker: "w2")?.measuredHere == true)
            }
        }
    }

    @Test func aSampleThatIsNotAWorkersIsRefusedWithAClearError() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                _ = try seed.connection.query(
                    #"UPDATE queue_depth_samples SET sampled_at = now(), sample = '{"depth": 5}'"#)
                #expect {
                    try Self.share(seed.connection, worker: "w1")
                } throws: { error in
                    "\(error)".contains("queue_depth_samples holds a sample this worker cannot read")
                }
            }
        }
    }
}
