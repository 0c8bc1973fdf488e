import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

extension CitusSuites {
    /// The worker against a database of the cluster (docs/scale-out.md, "The hot statements"): the queue's form read
    /// from the catalog at start-up.
    @Suite struct CitusWorkerTests {
        typealias Distribute = CitusSuites.CitusDistributeTests

        /// Migrated only, the queue is a single node's even with the citus extension present; distributed, it is
        /// one lane per shard of `deliveries`, exactly the representatives the distribute step wrote into
        /// `pushizo_lane()`, each naming a shard of its own.
        @Test func theTopologyIsReadFromTheCatalogOneLanePerShard() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                #expect(try await Distribute.onCoordinator(database) { try QueueTopology.read(on: $0) } == .singleNode)
                _ = try await Distribute.distribute(database)
                let (topology, drawn, shards) = try await Distribute.onCoordinator(database) { connection in
                    let topology = try QueueTopology.read(on: connection)
                    let body = try connection.query("SELECT prosrc FROM pg_proc WHERE proname = 'pushizo_lane'")[0]
                        .decode(String.self, "prosrc")
                    let drawn = try #require(body.firstRange(of: #/\{[0-9,]+\}/#).map { body[$0] })
                        .dropFirst().dropLast().split(separator: ",").compactMap { Int32($0) }
                    let shards = try connection.query(
                        """
                        SELECT count(DISTINCT get_shard_id_for_distribution_column('deliveries', lane)) AS shards,
                               (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'deliveries'::regclass) AS total
                        FROM unnest($1::integer[]) AS lane
                        """, [topology.laneValues ?? []])[0]
                    return (
                        topology, drawn,
                        (distinct: try shards.decode(Int.self, "shards"), total: try shards.decode(Int.self, "total"))
                    )
                }
                let lanes = try #require(topology.laneValues)
                #expect(lanes == drawn.sorted())
                #expect(lanes.count == shards.total && shards.distinct == shards.total)
            }
        }

        /// `run` against a distributed database reads the form at start-up and, while the expansion
        /// statements are a single node's only, refuses it with exit 78 naming the distribution before it claims
        /// anything (without the check it would start and its expansion would fail on every pass).
        @Test func runRefusesADistributedQueueAtStartUp() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                let outcome = try await DatabaseStartEndToEndTests.run(["run"], databaseURL: database.coordinator)
                #expect(outcome.status == 78, "\(outcome.stderr)")
                #expect(outcome.stderr.contains("PUSHIZO_DATABASE_URL"), "\(outcome.stderr)")
                #expect(outcome.stderr.contains("distributed by Citus (32 lanes)"), "\(outcome.stderr)")
            }
        }
        /// A distributed queue claimed lane by lane and completed lane by lane, through the stores the claim loop and
        /// the completer run: the round's probe names exactly the lanes holding due turns; every delivery is claimed
        /// once, in its subscription's lane, with its notification's version and its user's tags read by id (they are
        /// on other shards); a completion deletes the sent rows and appends their events in their lanes with the
        /// notification's count deltas (no trigger on Citus), and a rescheduled row's lane gets its turn no later
        /// than the row's next run. The single-node claim fails on the same queue.
        @Test func claimsLaneByLaneAndCompletesWithCountDeltas() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                try await Distribute.onCoordinator(database) { connection in
                    let app = UUID()
                    _ = try connection.query("INSERT INTO apps (id, default_language) VALUES ($1, 'en')", [app])
                    let user = try connection.query(
                        """
                        INSERT INTO users (app_id, external_id, tags) VALUES ($1, 'u1', '{"tier": "gold"}')
                        RETURNING id
                        """, [app])[0].decode(UUID.self, "id")
                    _ = try connection.query(
                        """
                        INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language)
                        SELECT $1, CASE WHEN g = 1 THEN $2::uuid END, 'ios', md5(g::text) || md5(g::text), 'production', 'en'
                        FROM generate_series(1, 300) g
                        """, [app, user])
                    let notification = try connection.query(
                        """
                        INSERT INTO notifications (app_id, message, target, campaign_id)
                        VALUES ($1, '{"contents": {"en": "hi"}}', '{"all": true}', 'spring') RETURNING id
                        """, [app])[0].decode(UUID.self, "id")
                    // The deliveries and turns an expansion would write (colocated by lane, pushed down shard by shard).
                    _ = try connection.query(
                        """
                        INSERT INTO deliveries (lane, notification_id, subscription_id, app_id)
                        SELECT lane, $1, id, app_id FROM subscriptions
                        """, [notification])
                    _ = try connection.query(
                        "INSERT INTO app_claim_turns (lane, app_id, turn_at) SELECT lane, app_id, now() FROM deliveries GROUP BY lane, app_id")
                    let lanes = try #require(QueueTopology.read(on: connection).laneValues)
                    let held = Set(try connection.query("SELECT DISTINCT lane FROM deliveries").map { try $0.decode(Int32.self, "lane") })
                    #expect(held.count > 16, "300 subscriptions in \(held.count) lanes")

                    // The lane's claim and completion are each one router task on the lane's shard.
                    let lane = try #require(held.first)
                    for (statement, parameters) in [
                        (ClaimStore.claimSQL(picking: .due, limit: 64, lane: true),
                         [600.0, "w1", [UUID](), [UUID](), [Int](), lane] as [any PostgresEncodable]),
                        (CompletionStore.completeLaneSQL, CompletionStore.completeParameters([]) + [lane]),
                    ] {
                        let plan = try connection.query("EXPLAIN (COSTS OFF) " + statement, parameters)
                            .compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
                        #expect(plan.hasPrefix("Custom Scan (Citus Adaptive)"), "\(plan)")
                        #expect(plan.contains("Task Count: 1"), "\(plan)")
                    }

                    // The single-node claim cannot run on it (a multi-shard FOR UPDATE).
                    #expect(throws: PostgresError.self) {
                        try ClaimStore.claim(on: connection, limit: 10, lease: .seconds(600), workerID: "single")
                    }

                    let first = try ClaimStore.laneTurns(on: connection, noRoom: [])
                    #expect(Set(first.due) == held)
                    let order = ClaimStore.laneOrder(
                        lanes: lanes, due: first.due,
                        start: ClaimStore.laneRotationStart(workerID: "w1", round: 0, lanes: lanes.count))
                    #expect(Set(order) == held && order.count == held.count)
                    var claimed: [ClaimedDelivery] = []
                    var rounds = 0
                    while rounds < 40 {
                        rounds += 1
                        let due = try ClaimStore.laneTurns(on: connection, noRoom: []).due
                        if due.isEmpty { break }
                        claimed += try ClaimStore.claimLanes(
                            on: connection,
                            lanes: ClaimStore.laneOrder(
                                lanes: lanes, due: due,
                                start: ClaimStore.laneRotationStart(workerID: "w1", round: rounds, lanes: lanes.count)),
                            limit: 64, lease: .seconds(600), workerID: "w1", room: .unbounded)
                    }
                    #expect(claimed.count == 300)
                    #expect(Set(claimed.compactMap(\.source.rowID)).count == 300)
                    let laneOf = Dictionary(uniqueKeysWithValues: try connection.query("SELECT id, lane FROM subscriptions").map {
                        (try $0.decode(UUID.self, "id"), try $0.decode(Int32.self, "lane"))
                    })
                    #expect(claimed.allSatisfy { laneOf[$0.subscriptionID] == $0.lane })
                    #expect(claimed.allSatisfy { !$0.messageVersion.isEmpty && $0.campaignID == "spring" && $0.notificationStatus != "" })
                    #expect(claimed.filter { $0.userID == user }.map(\.userTagsJSON) == [#"{"tier": "gold"}"#])
                    #expect(try connection.query("SELECT count(*) AS n FROM deliveries WHERE leased_by = 'w1'")[0]["n"] == "300")

                    // Leases renewed lane by lane.
                    let sample = Array(claimed.prefix(5))
                    for delivery in sample {
                        let renewed = try ClaimStore.renewLeases(
                            on: connection, deliveryIDs: [try #require(delivery.source.rowID)], fences: [delivery.fence],
                            lease: .seconds(900), lane: delivery.lane)
                        #expect(renewed.count == 1)
                    }

                    // Ten rescheduled an hour ahead, five failed `unregistered` (their subscriptions invalidated in
                    // their lanes), the rest sent.
                    let later = Date().addingTimeInterval(3600)
                    let completions = claimed.enumerated().map { index, delivery in
                        var completion = DeliveryCompletion(
                            source: delivery.source, fence: delivery.fence, event: index < 10 ? .retrying : .sent,
                            reason: index < 10 ? .serviceUnavailable : nil, detailJSON: "{}",
                            nextRunAt: index < 10 ? later : nil)
                        completion.claimedAs = DeliveryCompletion.Claim(
                            appID: delivery.appID, notificationID: delivery.notificationID,
                            subscriptionID: delivery.subscriptionID, attempt: delivery.attempt)
                        completion.lane = delivery.lane
                        if (10..<15).contains(index) {
                            completion.event = .failed
                            completion.reason = .unregistered
                            completion.invalidation = SubscriptionInvalidation(
                                subscriptionID: delivery.subscriptionID, reason: .unregistered,
                                tokenUpdatedAt: delivery.tokenUpdatedAt)
                        }
                        return completion
                    }
                    #expect(try CompletionStore.complete(on: connection, completions, lanes: true) == 300)
                    let left = try connection.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n")
                    #expect(left == 10)
                    let events = try connection.query(
                        """
                        SELECT count(*) FILTER (WHERE e.event = 'sent') AS sent,
                               count(*) FILTER (WHERE e.lane <> s.lane) AS misplaced
                        FROM delivery_events e JOIN subscriptions s ON s.lane = e.lane AND s.id = e.subscription_id
                        """)[0]
                    #expect(try events.decode(Int.self, "sent") == 285 && events.decode(Int.self, "misplaced") == 0)
                    let invalid = try connection.query(
                        "SELECT count(*) AS n FROM subscriptions WHERE status = 'invalid' AND invalid_reason = 'unregistered'")
                    #expect(try invalid[0].decode(Int.self, "n") == 5)
                    let counted = try connection.query(
                        "SELECT sum(sent)::integer AS sent FROM notification_event_counts WHERE notification_id = $1",
                        [notification])[0]
                    #expect(try counted.decodeIfPresent(Int.self, "sent") == 285)
                    let rescheduledLanes = Set(claimed.prefix(10).map(\.lane))
                    let turns = try connection.query(
                        """
                        SELECT count(*) AS n FROM app_claim_turns
                        WHERE lane = ANY($1::integer[]) AND app_id = $2 AND turn_at <= $3
                        """, [Array(rescheduledLanes), app, later])[0].decode(Int.self, "n")
                    #expect(turns == rescheduledLanes.count)
                    // Nothing due now: no lane to claim in.
                    #expect(try ClaimStore.laneTurns(on: connection, noRoom: []).due.isEmpty)
                    // An operator makes the rescheduled rows due without moving their turns: the repair, lane by
                    // lane, brings exactly those lanes' turns forward, and nothing else.
                    _ = try connection.query("UPDATE deliveries SET run_at = now() - interval '1 second'")
                    #expect(try ClaimStore.laneTurns(on: connection, noRoom: []).due.isEmpty)
                    #expect(try ClaimStore.repairClaimTurns(on: connection, lanes: lanes) == rescheduledLanes.count)
                    #expect(Set(try ClaimStore.laneTurns(on: connection, noRoom: []).due) == rescheduledLanes)
                    #expect(try ClaimStore.repairClaimTurns(on: connection, lanes: lanes) == 0)
                }
            }
        }
        /// The worker's claim loop and completer on a distributed queue, sending through the emulator over real
        /// HTTP/2 and TLS (a worker with the `send` role only: the expansion is not built for Citus, so the
        /// deliveries a broadcast's and three one-device notifications' expansion would write are inserted as it
        /// would, with their lanes' turns): every delivery ends in exactly one `sent` event in its lane, through
        /// APNs and FCM, nothing is left queued, and each notification's count deltas add up to its deliveries.
        @Test func theClaimLoopAndCompleterDrainADistributedQueueThroughTheEmulator() async throws {
            try await CitusCluster.withDatabase { database in
                try await Distribute.migrate(database)
                _ = try await Distribute.distribute(database)
                try await EmulatorHarness.with { emulator in
                    let (notifications, total, android) = try await Distribute.onCoordinator(database) { connection in
                        let seed = try Seed(database.coordinator)
                        try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                        try seed.fcmChannel(settings: emulator.fcmChannelSettings, endpoint: emulator.endpoint)
                        _ = try connection.query(
                            """
                            INSERT INTO subscriptions (app_id, platform, token, apns_environment, language)
                            SELECT $1, CASE WHEN g % 4 = 0 THEN 'android' ELSE 'ios' END,
                                   CASE WHEN g % 4 = 0 THEN 'fcm-okay-' || g ELSE 'a0a0' || md5(g::text) || substr(md5(g::text), 1, 28) END,
                                   'production', 'en'
                            FROM generate_series(1, 1200) g
                            """, [seed.appID])
                        let broadcast = try seed.notification(target: #"{"all": true}"#)
                        _ = try connection.query(
                            """
                            INSERT INTO deliveries (lane, notification_id, subscription_id, app_id)
                            SELECT lane, $1, id, app_id FROM subscriptions
                            """, [broadcast])
                        var notifications = [broadcast: 1200]
                        var android = 300
                        for row in try connection.query("SELECT lane, id, platform FROM subscriptions ORDER BY id LIMIT 3") {
                            if try row.decode(String.self, "platform") == "android" { android += 1 }
                            let subscription = try row.decode(UUID.self, "id")
                            let single = try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                            _ = try connection.query(
                                """
                                INSERT INTO deliveries (lane, notification_id, subscription_id, app_id)
                                VALUES ($1, $2, $3, $4)
                                """, [try row.decode(Int32.self, "lane"), single, subscription, seed.appID])
                            notifications[single] = 1
                        }
                        for (notification, targeted) in notifications {
                            _ = try connection.query(
                                "UPDATE notifications SET status = 'expanded', targeted_count = $2 WHERE id = $1",
                                [notification, targeted])
                        }
                        _ = try connection.query(
                            "INSERT INTO app_claim_turns (lane, app_id, turn_at) SELECT lane, app_id, now() FROM deliveries GROUP BY lane, app_id")
                        return (notifications, 1203, android)
                    }
                    let runtime = try WorkerRuntime(
                        configuration: try emulator.workerConfiguration(
                            databaseURL: database.coordinator,
                            extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_ROLES": "send", "PUSHIZO_CLAIM_BATCH": "100"]),
                        logger: quietLogger)
                    let coordinator = PostgresClient(connectionString: database.coordinator, maximumConnections: 1)
                    try await runUntil(runtime, limit: 240, "every delivery has its event") {
                        let events = try await coordinator.query("SELECT count(*) AS n FROM delivery_events")[0].decode(Int.self, "n")
                        let queued = try await coordinator.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n")
                        return events >= total && queued == 0
                    }
                    let events = try await coordinator.query(
                        """
                        SELECT count(*) AS events, count(DISTINCT (e.notification_id, e.subscription_id)) AS pairs,
                               count(*) FILTER (WHERE e.event = 'sent') AS sent,
                               count(*) FILTER (WHERE s.lane IS DISTINCT FROM e.lane) AS misplaced
                        FROM delivery_events e LEFT JOIN subscriptions s ON s.lane = e.lane AND s.id = e.subscription_id
                        """)[0]
                    #expect(try events.decode(Int.self, "events") == total, "\(events)")
                    #expect(try events.decode(Int.self, "pairs") == total)
                    #expect(try events.decode(Int.self, "sent") == total)
                    #expect(try events.decode(Int.self, "misplaced") == 0)
                    #expect(try await coordinator.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                    for (notification, expected) in notifications {
                        let counted = try await coordinator.query(
                            "SELECT sum(sent)::integer AS sent FROM notification_event_counts WHERE notification_id = $1",
                            [notification])[0]
                        #expect(try counted.decodeIfPresent(Int.self, "sent") == expected)
                    }
                    #expect(emulator.apns.acceptedCount == total - android)
                    #expect(emulator.fcm.acceptedCount == android)
                    await coordinator.shutdown()
                }
            }
        }
    }
}
