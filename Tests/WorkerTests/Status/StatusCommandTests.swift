import Foundation
import SocketTestSupport
import Postgres
import Testing

@testable import Worker

/// `pushizo-worker status` against a real PostgreSQL: the executable itself, and the store with small limits
/// for the estimated paths.
@Suite("pushizo-worker status")
struct StatusCommandTests {
    /// Runs `pushizo-worker status <arguments>`; returns exit status, stdout and stderr.
    static func status(_ arguments: [String] = [], databaseURL: String?) async throws -> (Int32, String, String) {
        let (status, stdout, stderr) = try await runExecutable(
            ["status"] + arguments, environment: databaseURL.map { ["PUSHIZO_DATABASE_URL": $0] } ?? [:])
        return (status, stdout, stderr)
    }

    /// Lines of `text` with runs of blanks folded to one space, for comparing aligned tables.
    static func folded(_ text: String) -> [String] {
        text.split(separator: "\n").map {
            $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
        }
    }

    static let app = "00000000-0000-4000-8000-0000000000a1"
    static let hostileWorker = "w-2\u{1B}[31m"

    /// The seeded events: how long before the seed's `now()` and which. Right after seeding, the windows hold
    /// 1 min: sent 3; 5 min: sent 3, failed 1; 15 min: sent 3, failed 1, retrying 2 (one `sent` is older still,
    /// `skipped` is not shown); a test run late (a loaded machine) expects what its own delay leaves in them.
    static let events: [(secondsAgo: Double, event: String)] = [
        (1200, "sent"), (700, "retrying"), (690, "retrying"), (180, "failed"), (30, "sent"), (20, "sent"), (10, "sent"),
        (5, "skipped"),
    ]

    /// What the windows hold `delay` seconds after seeding, per window: (sent, failed, retrying).
    static func expectedEvents(delay: Double) -> [(sent: Int64, failed: Int64, retrying: Int64)] {
        FleetStatusStore.windows.map { minutes in
            let inside = events.filter { $0.secondsAgo + delay < Double(minutes * 60) }
            func count(_ event: String) -> Int64 { Int64(inside.filter { $0.event == event }.count) }
            return (count("sent"), count("failed"), count("retrying"))
        }
    }

    /// The text's event lines for a run `delay` seconds after seeding.
    static func expectedEventLines(delay: Double) -> [String] {
        let expected = expectedEvents(delay: delay)
        let minutes = FleetStatusStore.windows
        func line(_ name: String, _ value: ((sent: Int64, failed: Int64, retrying: Int64)) -> Int64) -> String {
            ([name] + zip(expected, minutes).map { FleetStatusRenderer.perMinute(.exact(value($0)), $1) })
                .joined(separator: " ")
        }
        return [line("sent", \.sent), line("failed", \.failed), line("retrying", \.retrying)]
    }

    /// A queue in known states (figures in the test), instants relative to the seed's `now()`: the oldest due
    /// delivery is 600 s old then, so a run's lag tells how long after seeding it ran.
    static func seed(_ connection: PostgresConnection) throws {
        try connection.execute(
            """
            INSERT INTO apps (id) VALUES ('\(app)');
            INSERT INTO subscriptions (id, app_id, platform, token) VALUES
                ('10000000-0000-4000-8000-000000000001', '\(app)', 'ios', 'a'),
                ('20000000-0000-4000-8000-000000000002', '\(app)', 'ios', 'b'),
                ('30000000-0000-4000-8000-000000000003', '\(app)', 'ios', 'c'),
                ('40000000-0000-4000-8000-000000000004', '\(app)', 'android', 'd'),
                ('50000000-0000-4000-8000-000000000005', '\(app)', 'android', 'e'),
                ('60000000-0000-4000-8000-000000000006', '\(app)', 'web', 'https://push.example/f'),
                ('f0000000-0000-4000-8000-000000000007', '\(app)', 'kaios', 'g');
            INSERT INTO notifications (id, app_id, message, target, status, targeted_count) VALUES
                ('a0000000-0000-4000-8000-000000000001', '\(app)', '{}', '{"all": true}', 'expanded', 7),
                ('a0000000-0000-4000-8000-000000000002', '\(app)', '{}', '{"all": true}', 'expanded', 2),
                ('a0000000-0000-4000-8000-000000000003', '\(app)', '{}', '{"all": true}', 'pending', NULL);
            INSERT INTO notifications (id, app_id, message, target, status, targeted_count, expansion_cursor,
                                       expansion_touched_at) VALUES
                ('a0000000-0000-4000-8000-000000000004', '\(app)', '{}', '{"all": true}', 'expanding', 40,
                 '70000000-0000-4000-8000-000000000000', now() - interval '3 seconds');
            -- due: apns 2, fcm 1, webpush 1 (an expired lease of w-dead); deferred: apns 1, other 1;
            -- leased: apns 2 (w-1, w-2), fcm 1 (w-1).
            INSERT INTO deliveries (notification_id, subscription_id, app_id, run_at, leased_by) VALUES
                ('a0000000-0000-4000-8000-000000000001', '10000000-0000-4000-8000-000000000001', '\(app)', now() - interval '10 minutes', NULL),
                ('a0000000-0000-4000-8000-000000000001', '20000000-0000-4000-8000-000000000002', '\(app)', now() - interval '1 minute', NULL),
                ('a0000000-0000-4000-8000-000000000001', '40000000-0000-4000-8000-000000000004', '\(app)', now() - interval '30 seconds', NULL),
                ('a0000000-0000-4000-8000-000000000001', '60000000-0000-4000-8000-000000000006', '\(app)', now() - interval '5 seconds', 'w-dead'),
                ('a0000000-0000-4000-8000-000000000001', '30000000-0000-4000-8000-000000000003', '\(app)', now() + interval '2 hours', NULL),
                ('a0000000-0000-4000-8000-000000000001', 'f0000000-0000-4000-8000-000000000007', '\(app)', now() + interval '2 hours', NULL),
                ('a0000000-0000-4000-8000-000000000002', '10000000-0000-4000-8000-000000000001', '\(app)', now() + interval '100 minutes', 'w-1'),
                ('a0000000-0000-4000-8000-000000000001', '50000000-0000-4000-8000-000000000005', '\(app)', now() + interval '50 minutes', 'w-1'),
                ('a0000000-0000-4000-8000-000000000002', '20000000-0000-4000-8000-000000000002', '\(app)', now() + interval '70 minutes', 'w-2' || chr(27) || '[31m');
            -- The deferred apns row waits for its subscriber's local time (delivery_time_of_day).
            UPDATE deliveries SET local_due_at = run_at WHERE subscription_id = '30000000-0000-4000-8000-000000000003';
            -- Events in the order workers write them (ids grow with at), ``events`` seconds before now().
            INSERT INTO delivery_events (at, app_id, notification_id, event)
            SELECT now() - offset_seconds * interval '1 second', '\(app)', 'a0000000-0000-4000-8000-000000000001', event
            FROM (VALUES \(events.map { "(\($0.secondsAgo), '\($0.event)')" }.joined(separator: ", "))) AS e(offset_seconds, event)
            ORDER BY offset_seconds DESC;
            INSERT INTO app_channels (app_id, provider, paused_until, paused_reason) VALUES
                ('\(app)', 'fcm', now() + interval '1 hour', 'credentials_refused: invalid_grant'),
                ('\(app)', 'apns', now() - interval '1 minute', 'expired pause');
            """)
    }

    /// Checks the queue figures of ``seed(_:)`` and returns the lag (at least the seed's 600 s).
    static func expectSeededQueueFigures(_ queue: FleetStatus.Queue) throws -> Double {
        #expect(queue.due == .exact(4) && queue.deferred == .exact(2) && queue.leased == .exact(3))
        #expect(queue.providers.map(\.provider) == ["apns", "fcm", "webpush", "huawei", "other"])
        #expect(queue.providers.map(\.due) == [.exact(2), .exact(1), .exact(1), .exact(0), .exact(0)])
        #expect(queue.providers.map(\.deferred) == [.exact(1), .exact(0), .exact(0), .exact(0), .exact(1)])
        #expect(queue.providers.map(\.leased) == [.exact(2), .exact(1), .exact(0), .exact(0), .exact(0)])
        #expect(queue.expiredLeases == 1)
        #expect(queue.scheduledByLocalTime == .exact(1))
        let lag = try #require(queue.lagSeconds)
        #expect(lag >= 600 && lag < 1_200)
        return lag
    }

    @Test func aSeededQueueGivesTheExactFiguresInTextAndJSON() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
            }
            let (status, text, errors) = try await Self.status(databaseURL: url)
            #expect(status == 0, "stderr: \(errors)")
            let lines = Self.folded(text)
            for expected in [
                "queue due deferred leased", "apns 2 1 2", "fcm 1 0 1", "webpush 1 0 0", "other 0 1 0", "total 4 2 3",
                "expired leases: 1 (due again: their workers stopped before completing them)",
                "scheduled: 1 of the deferred wait for their subscriber's local time (delivery_time_of_day)",
                "events per minute last 1 min last 5 min last 15 min", "expansion: 1 expanding, 1 pending",
                "paused channels: 1",
            ] {
                #expect(lines.contains(expected), "missing \"\(expected)\" in:\n\(text)")
            }
            // The lag line says how many whole seconds after seeding this ran; the event lines must be what that
            // delay leaves in the windows (unless an event sits within that second of a window's edge).
            let lagLine = try #require(lines.first { $0.hasPrefix("lag: ") }, "\(text)")
            let lagMatch = try #require(lagLine.firstMatch(of: #/^lag: (?:(\d+)h )?(\d+)m (\d+)s \(oldest due delivery due since /#), "\(lagLine)")
            let hours: Int = lagMatch.1.flatMap { Int($0) } ?? 0
            let minutes: Int = Int(lagMatch.2) ?? 0
            let seconds: Int = Int(lagMatch.3) ?? 0
            let textLag = Double(hours * 3_600 + minutes * 60 + seconds)
            #expect(textLag >= 600, "\(lagLine)")
            let earliest = Self.expectedEventLines(delay: textLag - 600)
            if earliest == Self.expectedEventLines(delay: textLag - 599.001) {
                for expected in earliest { #expect(lines.contains(expected), "missing \"\(expected)\" in:\n\(text)") }
            }
            #expect(lines.contains { $0.hasPrefix("w-1 2 ") && $0.hasSuffix(" 0") }, "\(text)")
            #expect(lines.contains { $0.hasPrefix("w-dead 0 - 1") }, "\(text)")
            // The escape from the database is shown, not sent to the terminal.
            #expect(lines.contains { $0.hasPrefix("w-2\\u{1B}[31m 1 ") }, "\(text)")
            #expect(!text.contains("\u{1B}"))
            // The cursor 0x70... lies 96/224 of the way from the first active id 0x10... to the last 0xf0...
            #expect(lines.contains {
                $0.hasPrefix("notification a0000000-0000-4000-8000-000000000004 (app \(Self.app)): 40 deliveries, ~43% of the audience, ~93 expected; last chunk ")
            }, "\(text)")
            #expect(lines.contains { $0.hasPrefix("app \(Self.app) fcm until ") && $0.hasSuffix(": credentials_refused: invalid_grant") }, "\(text)")
            #expect(!text.contains("expired pause"))
            // Every figure was counted: only the header's legend and the expansion estimate carry a "~".
            #expect(lines.filter { $0.contains("~") }.count == 2, "\(text)")

            let (jsonStatus, json, jsonErrors) = try await Self.status(["--json"], databaseURL: url)
            #expect(jsonStatus == 0, "stderr: \(jsonErrors)")
            let snapshot = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            let queue = snapshot.queue
            let lag = try Self.expectSeededQueueFigures(queue)
            let delay = lag - 600
            #expect(snapshot.leases.map(\.workerID) == ["w-1", Self.hostileWorker, "w-dead"])
            #expect(snapshot.leases.map(\.leased) == [2, 1, 0])
            #expect(snapshot.leases.map(\.expired) == [0, 0, 1])
            let w1Expiry = try #require(snapshot.leases[0].oldestLeaseExpiresAt)
            // JSON instants are whole seconds.
            #expect(abs(w1Expiry.timeIntervalSince(snapshot.takenAt) - (3_000 - delay)) < 2)
            #expect(snapshot.events.map(\.minutes) == [1, 5, 15])
            let expected = Self.expectedEvents(delay: delay)
            #expect(snapshot.events.map(\.sent) == expected.map { .exact($0.sent) })
            #expect(snapshot.events.map(\.failed) == expected.map { .exact($0.failed) })
            #expect(snapshot.events.map(\.retrying) == expected.map { .exact($0.retrying) })
            if delay < 5 {
                #expect(expected.map(\.sent) == [3, 3, 3] && expected.map(\.failed) == [0, 1, 1] && expected.map(\.retrying) == [0, 0, 2])
            }
            #expect(snapshot.expansion.pending == .exact(1) && snapshot.expansion.expanding == .exact(1))
            let expanding = try #require(snapshot.expansion.notifications.first)
            #expect(expanding.expanded == 40 && expanding.audienceEstimate == 93)
            #expect(abs((expanding.progress ?? 0) - 96.0 / 224.0) < 1e-9)
            #expect(snapshot.pausedChannels.count == 1)
            #expect(snapshot.pausedChannels.first?.provider == "fcm")
            #expect(snapshot.pausedChannels.first?.reason == "credentials_refused: invalid_grant")
            #expect(snapshot.notes.isEmpty)
        }
    }

    /// The queue's figures read the claim's per-app index: the same queue, all of it a limited app's whose
    /// turn waits for a permit, gives the same figures.
    @Test func aLimitedAppsQueueGivesTheSameFigures() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let snapshot = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
                _ = try connection.query("UPDATE apps SET max_sends_per_second = 5")
                _ = try connection.query("UPDATE app_claim_turns SET turn_at = now() + interval '1 hour'")
                return try FleetStatusStore.read(on: connection)
            }
            _ = try Self.expectSeededQueueFigures(snapshot.queue)
        }
    }

    @Test func anEmptyDatabaseGivesZeros() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (status, text, errors) = try await Self.status(databaseURL: url)
            #expect(status == 0, "stderr: \(errors)")
            let lines = Self.folded(text)
            for expected in [
                "apns 0 0 0", "fcm 0 0 0", "webpush 0 0 0", "huawei 0 0 0", "total 0 0 0", "lag: none (nothing is due)", "leases: none",
                "sent 0 0 0", "expansion: 0 expanding, 0 pending", "paused channels: none",
            ] {
                #expect(lines.contains(expected), "missing \"\(expected)\" in:\n\(text)")
            }
            let (_, json, _) = try await Self.status(["--json"], databaseURL: url)
            let snapshot = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            #expect(snapshot.queue.due == .exact(0) && snapshot.queue.lagSeconds == nil && snapshot.leases.isEmpty)
            #expect(snapshot.queue.providers.map(\.provider) == ["apns", "fcm", "webpush", "huawei"])
            #expect(snapshot.queue.scheduledByLocalTime == .exact(0))
            #expect(!text.contains("scheduled:"))
        }
    }

    /// Creates an empty database, applies the first `count` migrations, runs `body`, drops it.
    static func withPartlyMigratedDatabase(migrations count: Int, _ body: @Sendable (String) async throws -> Void)
        async throws
    {
        let base = try TestDatabase.baseConnectionString()
        let name = "s_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let url = base + " dbname=" + name
        try await onThread {
            let admin = try PostgresConnection(connectionString: base)
            defer { admin.close() }
            try admin.execute("CREATE DATABASE \(name)")
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            let files = try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
                .filter { $0.hasSuffix(".sql") }.sorted().prefix(count)
            for file in files {
                try connection.execute(
                    try String(contentsOf: TestDatabase.migrationsDirectory.appendingPathComponent(file), encoding: .utf8))
            }
        }
        defer {
            _ = try? onSocketThreadSync {
                let admin = try PostgresConnection(connectionString: base)
                defer { admin.close() }
                try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            }
        }
        try await body(url)
    }

    @Test func aDatabaseWithoutMigrationsNamesWhatIsMissing() async throws {
        try await Self.withPartlyMigratedDatabase(migrations: 0) { url in
            let (status, text, errors) = try await Self.status(databaseURL: url)
            #expect(status == 78)
            #expect(text.isEmpty)
            #expect(errors.contains("table deliveries (migration 0001_producer_contract.sql)"), "\(errors)")
            #expect(errors.contains("run `pushizo-worker migrate`"), "\(errors)")
            // A missing table is named once, not again for each of its columns.
            #expect(!errors.contains("column notifications."), "\(errors)")
        }
        try await Self.withPartlyMigratedDatabase(migrations: 2) { url in
            let (status, _, errors) = try await Self.status(databaseURL: url)
            #expect(status == 78)
            #expect(errors.contains("column notifications.expansion_cursor (migration 0003_chunked_expansion.sql)"), "\(errors)")
            #expect(errors.contains("table app_claim_turns (migration 0026_claim_turns.sql)"), "\(errors)")
            #expect(!errors.contains("table notifications"), "\(errors)")
        }
    }

    /// Without the lease index (migration 0009) the figures are still right, and the output says why it was slow.
    @Test func aMissingLeaseIndexIsNoted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try connection.execute("DROP INDEX deliveries_leased")
            }
            let (status, text, _) = try await Self.status(databaseURL: url)
            #expect(status == 0)
            #expect(text.contains("note: index deliveries_leased is missing (migration 0009_status_lease_index.sql)"), "\(text)")
        }
    }

    /// A server that cannot be reached fails this run (1); a URL libpq cannot parse is a bad setting (78).
    @Test(arguments: [
        ("postgresql://pushizo:s3cret-pw-1@127.0.0.1:1/pushizo", 1),
        ("host=127.0.0.1 port=1 user=pushizo password=s3cret-pw-1 connect_timeout=2", 1),
        ("postgresql://pushizo:s3cret-pw-1@[::1/pushizo", 78),
        ("host=127.0.0.1 password='s3cret-pw-1", 78),
    ] as [(String, Int32)])
    func aBadDatabaseURLFailsClearlyWithoutThePassword(url: String, exitStatus: Int32) async throws {
        let (status, text, errors) = try await Self.status(databaseURL: url)
        #expect(status == exitStatus)
        #expect(text.isEmpty)
        let prefix = exitStatus == 1 ? "pushizo-worker status: " : "pushizo-worker: configuration key PUSHIZO_DATABASE_URL"
        #expect(errors.hasPrefix(prefix), "\(errors)")
        #expect(errors.count > "pushizo-worker status: ".count + 10, "\(errors)")
        #expect(!errors.contains("s3cret-pw-1"), "\(errors)")
        // libpq's further lines are indented under the first; no Swift type name, no escaped line feed.
        #expect(errors.split(separator: "\n").dropFirst().allSatisfy { $0.hasPrefix("  ") }, "\(errors)")
        #expect(!errors.contains("PostgresError") && !errors.contains("\\u{A}"), "\(errors)")
    }

    @Test func noDatabaseURLIsAConfigurationError() async throws {
        let (status, _, errors) = try await Self.status(databaseURL: nil)
        #expect(status == 78)
        #expect(errors.contains("PUSHIZO_DATABASE_URL"), "\(errors)")
        // An unknown flag is a usage error.
        let (flagStatus, _, flagErrors) = try await Self.status(["--jsn"], databaseURL: "host=/nonexistent")
        #expect(flagStatus == 2)
        #expect(flagErrors.contains("--jsn"), "\(flagErrors)")
    }

    /// Past the limits the figures are marked estimated: with the sample covering the whole (analyzed) queue
    /// the estimates still come out right, so the arithmetic of the estimated paths is checked too.
    @Test func pastTheLimitsFiguresAreEstimatedAndSaySo() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let snapshot = try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                defer { connection.close() }
                try Self.seed(connection)
                try connection.execute(
                    """
                    INSERT INTO delivery_events (at, app_id, notification_id, event)
                    SELECT now(), '\(Self.app)', 'a0000000-0000-4000-8000-000000000001', 'sent' FROM generate_series(1, 40);
                    ANALYZE deliveries;
                    """)
                return try FleetStatusStore.read(
                    on: connection,
                    limits: .init(countLimit: 3, exactSplitLimit: 0, sampleRows: 1_000_000, eventSamples: 1_000_000))
            }
            let queue = snapshot.queue
            // due 4 > 3 counted: estimated from the planner's 9 rows x the sample's due share 4/9.
            #expect(queue.due == .estimate(4, countedAtLeast: 3))
            // deferred: at most 3 future rows counted, 3 of them leased: floor 0, estimate 9 x 2/9.
            #expect(queue.deferred == .estimate(2, countedAtLeast: 0))
            #expect(queue.leased == .exact(3))
            #expect(queue.providers.map(\.due) == [.estimate(2), .estimate(1), .estimate(1), .estimate(0), .estimate(0)])
            #expect(queue.providers.map(\.leased) == [.estimate(2), .estimate(1), .estimate(0), .estimate(0), .estimate(0)])
            #expect(snapshot.notes.contains { $0.contains("estimated from a sample") })
            // 43 events in the last 16 minutes > 3: sampled per window, every id looked up (samples >= span).
            #expect(snapshot.events.map(\.sent) == [.exact(43), .exact(43), .exact(43)])
        }
    }
}

extension StatusCommandTests {
    /// `status --app` of an id no app has is refused as the operator commands refuse it (exit 1, `no app <id>`),
    /// not answered with an idle app's zeros; an app with nothing queued still gets its zeros.
    @Test func anIDOfNoAppExits1() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let unknown = "00000000-0000-4000-8000-0000000000ff"
            for arguments in [["--app", unknown], ["--app", unknown, "--json"]] {
                let (status, text, errors) = try await Self.status(arguments, databaseURL: url)
                #expect(status == 1, "\(arguments): \(text)")
                #expect(errors == "pushizo-worker status: no app \(unknown)\n", "\(arguments)")
                #expect(text.isEmpty)
            }
            _ = try await OperatorCommandTests.query(url, "INSERT INTO apps (id) VALUES ($1::uuid) RETURNING id", [unknown])
            let (status, text, errors) = try await Self.status(["--app", unknown], databaseURL: url)
            #expect(status == 0, "\(errors)")
            #expect(Self.folded(text).contains("total 0 0 0"), "\(text)")
        }
    }

    @Test func helpListsTheCommand() async throws {
        let text = try await HelpTests.helpText()
        #expect(text.contains("status [--app ID] [--json]"))
    }
}
