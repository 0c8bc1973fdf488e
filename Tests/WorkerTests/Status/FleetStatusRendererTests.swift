import Foundation
import Postgres
import Testing

@testable import Worker

/// The renderer of `pushizo-worker status`, without a database.
@Suite("FleetStatus rendering")
struct FleetStatusRendererTests {
    static let now = Date(timeIntervalSince1970: 1_790_000_000)  // 2026-09-21 14:13:20 UTC
    static let app = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!
    static let notification = UUID(uuidString: "10000000-0000-4000-8000-000000000002")!

    static func sample(workerID: String = "host-a:17", reason: String? = "credentials_refused: InvalidProviderToken")
        -> FleetStatus
    {
        FleetStatus(
            takenAt: now,
            queue: FleetStatus.Queue(
                due: .estimate(1_234_567, countedAtLeast: 100_000), deferred: .exact(12), leased: .exact(3),
                providers: [
                    .init(provider: "apns", due: .estimate(1_000_000), deferred: .exact(10), leased: .exact(2)),
                    .init(provider: "fcm", due: .estimate(234_567), deferred: .exact(2), leased: .exact(1)),
                    .init(provider: "webpush", due: .estimate(0), deferred: .exact(0), leased: .exact(0)),
                ],
                oldestDueAt: now.addingTimeInterval(-3_725), lagSeconds: 3_725, expiredLeases: 4),
            leases: [
                .init(workerID: workerID, leased: 3, oldestLeaseExpiresAt: now.addingTimeInterval(95), expired: 0),
                .init(workerID: "host-b:9", leased: 0, oldestLeaseExpiresAt: nil, expired: 4),
            ],
            events: [
                .init(minutes: 1, sent: .exact(120), failed: .exact(3), retrying: .exact(0)),
                .init(minutes: 5, sent: .exact(601), failed: .exact(3), retrying: .exact(1)),
                .init(minutes: 15, sent: .estimate(1_800_000), failed: .estimate(45), retrying: .estimate(0)),
            ],
            expansion: FleetStatus.Expansion(
                pending: .exact(2), expanding: .exact(1),
                notifications: [
                    .init(
                        id: notification, appID: app, expanded: 250_000, progress: 0.25, audienceEstimate: 1_000_000,
                        lastChunkAt: now.addingTimeInterval(-2))
                ]),
            pausedChannels: [
                .init(appID: app, provider: "fcm", pausedUntil: now.addingTimeInterval(238), reason: reason)
            ],
            server: PostgresServerAddress(host: "db-b.internal", port: "5432"))
    }

    @Test func textShowsEveryFigureAndMarksEstimates() {
        let text = FleetStatusRenderer.text(Self.sample())
        let expected = """
            pushizo-worker status at 2026-09-21 14:13:20 UTC  (~ = estimated, see docs/status.md)
            database server: db-b.internal:5432

            queue             due  deferred  leased
              apns     ~1,000,000        10       2
              fcm        ~234,567         2       1
              webpush          ~0         0       0
              total    ~1,234,567        12       3
              counted: due over 100,000; the rest estimated
            lag: 1h 2m 5s (oldest due delivery due since 2026-09-21 13:11:15 UTC)
            expired leases: 4 (due again: their workers stopped before completing them)

            leases by worker  leased  oldest lease expires                 expired
              host-a:17            3  2026-09-21 14:14:55 UTC (in 1m 35s)        0
              host-b:9             0  -                                          4

            events per minute  last 1 min  last 5 min  last 15 min
              sent                    120       120.2     ~120,000
              failed                    3         0.6           ~3
              retrying                  0         0.2           ~0

            expansion: 1 expanding, 2 pending
              notification 10000000-0000-4000-8000-000000000002 (app 00000000-0000-4000-8000-000000000001): 250,000 deliveries, ~25% of the audience, ~1,000,000 expected; last chunk 2s ago

            paused channels: 1
              app 00000000-0000-4000-8000-000000000001 fcm until 2026-09-21 14:17:18 UTC (in 3m 58s): credentials_refused: InvalidProviderToken

            """
        #expect(text == expected, "\(text)")
    }

    @Test func jsonRoundTripsWithTheDocumentedKeysAndNulls() throws {
        var status = Self.sample()
        status.appNames = [.init(appID: Self.app, name: "Acme News")]
        let json = try FleetStatusRenderer.json(status)
        #expect(try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8)) == status)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["schema_version", "taken_at", "queue", "leases", "events", "expansion", "paused_channels", "notes", "throttled_apps", "server",
            "app_id", "fleet_pause", "paused_apps", "workers", "app_names", "fcm_projects_held", "live_activity_channels",
        ])
        #expect(object["live_activity_channels"] is NSNull)
        let window = try #require((object["events"] as? [[String: Any]])?.first)
        #expect(Set(window.keys) == ["minutes", "sent", "failed", "retrying", "live_activity_channel_sent", "live_activity_channel_failed"])
        #expect(object["app_names"] as? [[String: String]] == [["app_id": "00000000-0000-4000-8000-000000000001", "name": "Acme News"]])
        #expect(object["app_id"] is NSNull && object["fleet_pause"] is NSNull)
        #expect(object["server"] as? [String: String] == ["host": "db-b.internal", "port": "5432"])
        #expect(object["schema_version"] as? Int == 1)
        #expect(object["taken_at"] as? String == "2026-09-21T14:13:20Z")
        let queue = try #require(object["queue"] as? [String: Any])
        #expect(Set(queue.keys) == [
            "due", "held", "deferred", "leased", "providers", "oldest_due_at", "lag_seconds", "expired_leases", "scheduled_by_local_time",
        ])
        let due = try #require(queue["due"] as? [String: Any])
        #expect(due["value"] as? Int == 1_234_567 && due["estimated"] as? Bool == true && due["counted_at_least"] as? Int == 100_000)
        // Absent values are written as null, not left out.
        let deferred = try #require(queue["deferred"] as? [String: Any])
        #expect(deferred.keys.contains("counted_at_least") && deferred["counted_at_least"] is NSNull)
        let leases = try #require(object["leases"] as? [[String: Any]])
        #expect(Set(leases[1].keys) == ["worker_id", "leased", "oldest_lease_expires_at", "expired"])
        #expect(leases[1]["oldest_lease_expires_at"] is NSNull)
        let expansion = try #require(object["expansion"] as? [String: Any])
        let listed = try #require((expansion["notifications"] as? [[String: Any]])?.first)
        #expect(Set(listed.keys) == ["id", "app_id", "expanded", "progress", "audience_estimate", "last_chunk_at"])
        let paused = try #require((object["paused_channels"] as? [[String: Any]])?.first)
        #expect(Set(paused.keys) == ["app_id", "provider", "paused_until", "reason", "note"])
    }

    /// The pauses in the order docs/operations.md gives ("Pausing and resuming"): the fleet's pause first, then the
    /// paused apps, then the paused channels.
    @Test func textListsTheFleetPauseThenAppsThenChannels() {
        var status = Self.sample(reason: "operator")
        status.pausedApps = [.init(appID: Self.app, pausedUntil: .distantFuture, reason: "operator")]
        status.fleetPause = FleetStatus.Pause(until: .distantFuture, reason: "operator")
        let text = FleetStatusRenderer.text(status)
        let order = ["FLEET PAUSED", "paused apps: 1", "paused channels: 1"].map { text.range(of: $0)?.lowerBound }
        #expect(order.allSatisfy { $0 != nil } && order == order.sorted { $0! < $1! }, "\(text)")
    }

    /// UUIDs are printed as PostgreSQL prints them, in lower case, wherever they stand in the document (the
    /// narrowed app, expanding notifications, paused apps and channels); other text keeps its case.
    @Test func jsonWritesUUIDsInLowerCase() throws {
        let app = try #require(UUID(uuidString: "ABCDEF01-2345-4678-9ABC-DEF012345678"))
        let notification = try #require(UUID(uuidString: "FEDCBA98-7654-4321-8FED-CBA987654321"))
        var status = Self.sample(reason: "Reason KEEPS Its Case")
        status.app = app
        status.expansion.notifications[0].id = notification
        status.expansion.notifications[0].appID = app
        status.pausedChannels[0].appID = app
        status.pausedApps = [.init(appID: app, pausedUntil: Self.now.addingTimeInterval(60), reason: nil)]
        let json = try FleetStatusRenderer.json(status)
        for uuid in [app, notification] {
            #expect(!json.contains(uuid.uuidString), "\(json)")
            #expect(json.contains("\"\(uuid.uuidString.lowercased())\""), "\(json)")
        }
        #expect(json.contains("Reason KEEPS Its Case"))
        #expect(try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8)) == status)
    }

    /// Worker ids and reasons come from the database: they must not drive the terminal, in either format.
    static func worker(
        _ id: String, host: String, pid: Int32, state: FleetStatus.Worker.State, seenAgo: Double, stoppedAgo: Double? = nil
    ) -> FleetStatus.Worker {
        FleetStatus.Worker(
            workerID: UUID(uuidString: id)!, leasedBy: "\(host):\(pid)", host: host, pid: pid, version: "0.9.0",
            commit: "1a2b3c4d5e6f", roles: ["expand", "send"], state: state, startedAt: now.addingTimeInterval(-7_200),
            lastSeenAt: now.addingTimeInterval(-seenAgo), lastSeenSecondsAgo: seenAgo, heartbeatSeconds: 5,
            inFlight: state == .live ? 1_200 : 0, claimsPerMinute: state == .live ? 5_400.4 : 0,
            sendsPerMinute: state == .live ? 5_350.6 : 0,
            stoppingAt: stoppedAgo.map { now.addingTimeInterval(-$0 - 2) }, stoppedAt: stoppedAgo.map { now.addingTimeInterval(-$0) })
    }

    /// Live, stale and stopped workers: a count per state, a row each, what stale means; JSON with lower-case ids.
    @Test func workersAreListedByStateInTextAndJSON() throws {
        var status = Self.sample()
        status.workers = [
            Self.worker("AAAAAAAA-0000-4000-8000-000000000001", host: "host-a", pid: 17, state: .live, seenAgo: 2),
            Self.worker("BBBBBBBB-0000-4000-8000-000000000002", host: "host-b", pid: 9, state: .stale, seenAgo: 95),
            Self.worker("CCCCCCCC-0000-4000-8000-000000000003", host: "host-c", pid: 4, state: .stopped, seenAgo: 600, stoppedAgo: 600),
        ]
        let lines = StatusCommandTests.folded(FleetStatusRenderer.text(status))
        #expect(lines.contains("workers: 1 live, 1 stale, 1 stopped"))
        #expect(lines.contains("state host pid version started last seen in flight claims/min sends/min leased_by"))
        #expect(lines.contains("live host-a 17 0.9.0 (1a2b3c4d5e6f) 2026-09-21 12:13:20 UTC 2s ago 1,200 5,400 5,351 host-a:17"))
        #expect(lines.contains("stale host-b 9 0.9.0 (1a2b3c4d5e6f) 2026-09-21 12:13:20 UTC 1m 35s ago 0 0 0 host-b:9"))
        #expect(lines.contains("stopped host-c 4 0.9.0 (1a2b3c4d5e6f) 2026-09-21 12:13:20 UTC stopped 10m 0s ago 0 0 0 host-c:4"))
        #expect(lines.contains { $0.hasPrefix("stale: no heartbeat for 3 of its intervals") })
        let json = try FleetStatusRenderer.json(status)
        #expect(try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8)) == status)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let workers = try #require(object["workers"] as? [[String: Any]])
        #expect(workers.map { $0["worker_id"] as? String } == [
            "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002", "cccccccc-0000-4000-8000-000000000003",
        ])
        #expect(Set(workers[0].keys) == [
            "worker_id", "leased_by", "host", "pid", "version", "commit", "roles", "state", "started_at", "last_seen_at",
            "last_seen_seconds_ago", "heartbeat_seconds", "in_flight", "claims_per_minute", "sends_per_minute",
            "stopping_at", "stopped_at",
        ])
        #expect(workers.map { $0["state"] as? String } == ["live", "stale", "stopped"])
        #expect(workers[0]["stopped_at"] is NSNull)
        // No heartbeat yet, and none read (narrowed to an app).
        status.workers = []
        #expect(StatusCommandTests.folded(FleetStatusRenderer.text(status)).contains("workers: none has written a heartbeat"))
        status.workers = nil
        #expect(!StatusCommandTests.folded(FleetStatusRenderer.text(status)).contains { $0.hasPrefix("workers:") })
    }

    @Test func databaseTextIsSanitizedInTextAndEscapedInJSON() throws {
        let hostileID = "w\u{1B}[2J\u{9B}31m\u{202E}evil\nforged line"
        let hostileReason = "bad\u{07}\u{200B}reason https://user:pw@push.example/x"
        let status = Self.sample(workerID: hostileID, reason: hostileReason)
        let text = FleetStatusRenderer.text(status)
        for scalar in text.unicodeScalars where scalar != "\n" {
            #expect(!TerminalText.isUnsafe(scalar), "unsafe U+\(String(scalar.value, radix: 16)) in text")
        }
        #expect(text.contains("w\\u{1B}[2J\\u{9B}31m\\u{202E}evil\\u{A}forged line"))
        #expect(!text.contains("pw@"))
        let json = try FleetStatusRenderer.json(status)
        for scalar in json.unicodeScalars where scalar != "\n" {
            #expect(!TerminalText.isUnsafe(scalar), "unsafe U+\(String(scalar.value, radix: 16)) in JSON")
        }
        // JSON keeps the stored value: escaped, it decodes back to the very same text.
        let decoded = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
        #expect(decoded.leases[0].workerID == hostileID)
        #expect(decoded.pausedChannels[0].reason == hostileReason)
    }

    @Test func longDatabaseTextIsCut() {
        let text = FleetStatusRenderer.text(Self.sample(workerID: String(repeating: "x", count: 5_000)))
        #expect(text.contains(String(repeating: "x", count: FleetStatusRenderer.maximumTextWidth) + "..."))
        #expect(!text.contains(String(repeating: "x", count: FleetStatusRenderer.maximumTextWidth + 1)))
    }

    /// A fleet with nothing queued, sent, expanding or paused.
    static func empty() -> FleetStatus {
        FleetStatus(
            takenAt: now,
            queue: .init(
                due: .exact(0), deferred: .exact(0), leased: .exact(0),
                providers: FleetStatusStore.providers.map { .init(provider: $0, due: .exact(0), deferred: .exact(0), leased: .exact(0)) },
                oldestDueAt: nil, lagSeconds: nil, expiredLeases: 0),
            leases: [], events: FleetStatusStore.windows.map { .init(minutes: $0, sent: .exact(0), failed: .exact(0), retrying: .exact(0)) },
            expansion: .init(pending: .exact(0), expanding: .exact(0), notifications: []), pausedChannels: [])
    }

    @Test func anEmptyFleetSaysSo() {
        let text = FleetStatusRenderer.text(Self.empty())
        #expect(text.contains("lag: none (nothing is due)"))
        #expect(text.contains("leases: none"))
        #expect(text.contains("paused channels: none"))
        #expect(!text.split(separator: "\n").dropFirst().contains { $0.contains("~") })
    }

    @Test(arguments: [
        (0.0, "0s"), (59.9, "59s"), (60, "1m 0s"), (3_725, "1h 2m 5s"), (90_000, "1d 1h"), (-5, "0s"),
        // A queue over a tiny send limit: capped, never a trap converting to Int64.
        (1e300, "11574074d 1h"), (.infinity, "11574074d 1h"), (.nan, "0s"),
    ])
    func durations(seconds: Double, text: String) {
        #expect(FleetStatusRenderer.duration(seconds) == text)
    }

    @Test func sendLimits() {
        #expect(FleetStatusRenderer.rate(200) == "200")
        #expect(FleetStatusRenderer.rate(12_500) == "12,500")
        #expect(FleetStatusRenderer.rate(0.5) == "0.50")
        #expect(FleetStatusRenderer.rate(1.7e308) == "1.7e+308")
        #expect(FleetStatusRenderer.rate(.leastNonzeroMagnitude) == "4.94e-324")
        #expect(FleetStatusRenderer.rate(0) == "0")
    }

    @Test func groupedNumbers() {
        #expect(FleetStatusRenderer.grouped(0) == "0")
        #expect(FleetStatusRenderer.grouped(999) == "999")
        #expect(FleetStatusRenderer.grouped(1_000) == "1,000")
        #expect(FleetStatusRenderer.grouped(-1_234_567) == "-1,234,567")
    }

    /// The binary search over event ids finds the first id inside the window, across gaps in the ids.
    @Test func firstIDInsideTheWindow() {
        let ids: [Int64] = [3, 4, 7, 8, 9, 15, 16, 20]
        func search(insideFrom boundary: Int64) -> (result: Int64, probes: Int) {
            var probes = 0
            let result = FleetStatusStore.firstID(from: 3, through: 20) { id in
                probes += 1
                guard let found = ids.first(where: { $0 >= id }) else { return nil }
                return (found, found >= boundary)
            }
            return (result, probes)
        }
        for boundary in ids {
            let (result, probes) = search(insideFrom: boundary)
            // Every existing id from `result` on is inside, every one before it is not.
            #expect(ids.filter { $0 >= result } == ids.filter { $0 >= boundary }, "boundary \(boundary): \(result)")
            #expect(probes <= 6)
        }
        #expect(search(insideFrom: 21).result == 21)
    }

    @Test func expansionProgressFollowsTheCursorThroughTheIDRange() throws {
        let first = try #require(UUID(uuidString: "10000000-0000-4000-8000-000000000000"))
        let last = try #require(UUID(uuidString: "f0000000-0000-4000-8000-000000000000"))
        let cursor = try #require(UUID(uuidString: "50000000-0000-4000-8000-000000000000"))
        let progress = try #require(FleetStatusStore.expansionProgress(cursor: cursor, first: first, last: last))
        #expect(abs(progress - 64.0 / 224.0) < 1e-9)
        #expect(FleetStatusStore.expansionProgress(cursor: last, first: first, last: last) == 1)
        #expect(FleetStatusStore.expansionProgress(cursor: cursor, first: nil, last: last) == nil)
        #expect(FleetStatusStore.expansionProgress(cursor: first, first: first, last: first) == 1)
    }

    @Test func aSlicedBroadcastsProgressIsWhatItsOpenSlicesHaveLeft() throws {
        func id(_ head: String) throws -> UUID { try #require(UUID(uuidString: "\(head)000000-0000-4000-8000-000000000000")) }
        let first = try id("10")
        let last = try id("f0")
        // Open: 0x30-0x50 of a slice ending at 0x50, and 0xd0 to the end (the last slice, no bound): 0x40 of 0xe0.
        let left: [(after: UUID, upTo: UUID?)] = [(try id("30"), try id("50")), (try id("d0"), nil)]
        let progress = try #require(FleetStatusStore.slicedExpansionProgress(left: left, first: first, last: last))
        #expect(abs(progress - (1 - 64.0 / 224.0)) < 1e-9)
        #expect(FleetStatusStore.slicedExpansionProgress(left: [], first: first, last: last) == 1)
        #expect(FleetStatusStore.slicedExpansionProgress(left: left, first: nil, last: last) == nil)
    }
}
