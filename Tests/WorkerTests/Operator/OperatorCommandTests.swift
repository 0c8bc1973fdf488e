import Foundation
import Postgres
import Testing

@testable import Worker

/// `pushizo-worker pause`, `resume`, `cancel` and `retry` (docs/operations.md, "Operator commands"): the real
/// executable against a migrated PostgreSQL, with a worker and the emulator where sending matters. Each command
/// runs twice (the second run changes nothing and says so), and each run leaves an `operator_actions` row.
@Suite("Operator commands", .serialized)
struct OperatorCommandTests {
    /// Runs `pushizo-worker <arguments> --json`; returns exit status, the JSON object printed and stderr.
    static func command(_ arguments: [String], databaseURL: String) async throws -> (status: Int32, json: [String: Any], errors: String) {
        let (status, stdout, stderr) = try await runExecutable(
            arguments + ["--json"], environment: ["PUSHIZO_DATABASE_URL": databaseURL])
        let json = (try? JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any]) ?? [:]
        return (status, json, stderr)
    }

    static func query(_ url: String, _ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> [[String: String]] {
        nonisolated(unsafe) let parameters = parameters
        return try await onThread {
            let connection = try PostgresConnection(connectionString: url)
            defer { connection.close() }
            return try connection.query(sql, parameters).map { row in
                var values: [String: String] = [:]
                for name in row.columnNames { values[name] = row[name] }
                return values
            }
        }
    }

    /// Inserts a notification of `app` as a producer would.
    static func notification(_ url: String, app: UUID, target: String) throws -> UUID {
        try PostgresConnection(connectionString: url).query(
            "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{\"contents\": {\"en\": \"hi\"}}', $2::jsonb) RETURNING id",
            [app, target])[0].decode(UUID.self, "id")
    }

    /// Runs a worker (not exiting when drained) while `body` runs, then stops it and waits for it.
    static func withWorker(_ emulator: EmulatorHarness, _ url: String, _ body: () async throws -> Void) async throws {
        let runtime = try WorkerRuntime(
            configuration: try emulator.workerConfiguration(databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
            logger: quietLogger)
        let run = Task { await runtime.run() }
        do {
            try await body()
        } catch {
            runtime.requestStop()
            await run.value
            throw error
        }
        runtime.requestStop()
        await run.value
    }

    /// An app with an APNs channel (empty settings), as a producer would have made it; its id.
    static func app(_ url: String) async throws -> UUID {
        try await onThread {
            let seed = try Seed(url)
            try seed.app(channelSettings: "{}")
            return seed.appID
        }
    }

    static func audit(_ url: String) async throws -> [[String: String]] {
        try await query(url, "SELECT action, scope, app_id::text, provider, notification_id::text, reason, rows_affected, role_name::text = session_user::text AS by_me FROM operator_actions ORDER BY id")
    }

    /// A schema without migration 0028 (the owner's `fleet_settings`, `operator_actions`): every command exits 78
    /// naming the pending migrations and `pushizo-worker migrate`, as `status` and `run` do, before any statement.
    @Test(arguments: [
        ["pause", "--fleet"], ["resume", "--fleet"], ["cancel", "--notification", UUID().uuidString],
        ["retry", "--notification", UUID().uuidString],
    ])
    func aSchemaWithoutTheOperatorsMigrationIsRefusedNamingIt(arguments: [String]) async throws {
        // Every file from 0028 on left out, however many come after it.
        let fromOperatorActions = try FileManager.default.contentsOfDirectory(atPath: TestDatabase.migrationsDirectory.path)
            .filter { (SchemaWindow.version(ofFileName: $0) ?? 0) >= 28 }.count
        try await SchemaCheckEndToEndTests.withDatabaseMissing(fromOperatorActions) { url, skipped in
            let (status, _, errors) = try await Self.command(arguments, databaseURL: url)
            #expect(status == 78, "\(errors)")
            #expect(skipped.contains("0028_operator_actions.sql"), "\(skipped)")
            for file in skipped { #expect(errors.contains(file), "\(file) missing from: \(errors)") }
            #expect(errors.contains("pushizo-worker migrate"), "\(errors)")
            #expect(!errors.contains("42P01"), "\(errors)")
        }
    }

    /// `--json` carries every documented key, `null` where it does not apply, and a pause until resumed is `null` in
    /// the operator command's `detail.until` as in `status --json`'s `fleet_pause.until`: one representation.
    @Test func aFleetPausesJSONCarriesEveryKeyAndTheSameIndefiniteEndAsStatus() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            for _ in 0..<2 {
                let paused = try await Self.command(["pause", "--fleet"], databaseURL: url)
                #expect(paused.status == 0, "\(paused.errors)")
                for key in ["app_id", "provider", "notification_id"] {
                    #expect(paused.json[key] is NSNull, "\(key): \(paused.json)")
                }
                for key in ["action", "scope", "rows_affected", "already_so", "summary", "detail", "audit"] {
                    #expect(paused.json[key] != nil, "\(key): \(paused.json)")
                }
                #expect((paused.json["detail"] as? [String: Any])?["until"] is NSNull, "\(paused.json)")
            }
            let (_, text, _) = try await StatusCommandTests.status(["--json"], databaseURL: url)
            let status = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            let fleet = try #require(status["fleet_pause"] as? [String: Any], "\(text)")
            #expect(fleet["until"] is NSNull, "\(text)")
            let resumed = try await Self.command(["resume", "--fleet"], databaseURL: url)
            #expect((resumed.json["detail"] as? [String: Any])?["was_until"] is NSNull, "\(resumed.json)")
            #expect(resumed.json["notification_id"] is NSNull, "\(resumed.json)")
        }
    }

    /// As docs/operations.md says to run them: `--env-file /etc/pushizo-worker/migrate.env`, a file holding only
    /// `PUSHIZO_MIGRATE_DATABASE_URL`, is all a command needs (no `PUSHIZO_DATABASE_URL`), and it connects with it.
    @Test func theMigrationsUnitsEnvironmentFileIsEnough() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let path = "/tmp/pushizo-migrate-\(UUID().uuidString.prefix(8)).env"
            try "PUSHIZO_MIGRATE_DATABASE_URL='\(url)'\n"
                .write(toFile: path, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: path) }
            let (status, stdout, stderr) = try await runExecutable(
                ["pause", "--fleet", "--json", "--env-file", path], environment: [:])
            #expect(status == 0, "\(stderr)")
            let json = (try? JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any]) ?? [:]
            #expect(json["scope"] as? String == "fleet", "\(stdout)")
            #expect(try await Self.audit(url).count == 1)
        }
    }

    @Test func pauseAndResumeAnAppTwiceEachWithAuditRows() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let app = try await Self.app(url)
            let first = try await Self.command(["pause", "--app", app.uuidString, "--reason", "maintenance"], databaseURL: url)
            #expect(first.status == 0, "\(first.errors)")
            #expect(first.json["already_so"] as? Bool == false)
            #expect(first.json["rows_affected"] as? Int == 1)
            #expect((first.json["detail"] as? [String: Any])?["until"] is NSNull)
            let second = try await Self.command(["pause", "--app", app.uuidString], databaseURL: url)
            #expect(second.status == 0)
            #expect(second.json["already_so"] as? Bool == true)
            #expect(second.json["rows_affected"] as? Int == 0)
            let paused = try await Self.query(url, "SELECT paused_until::text, paused_reason FROM apps")
            #expect(paused.first?["paused_until"] == "infinity")
            #expect(paused.first?["paused_reason"] == "operator")

            let resumed = try await Self.command(["resume", "--app", app.uuidString], databaseURL: url)
            #expect(resumed.status == 0)
            #expect(resumed.json["already_so"] as? Bool == false)
            let again = try await Self.command(["resume", "--app", app.uuidString], databaseURL: url)
            #expect(again.json["already_so"] as? Bool == true)
            let cleared = try await Self.query(url, "SELECT paused_until IS NULL AS cleared FROM apps")
            #expect(cleared.first?["cleared"] == "t")

            let rows = try await Self.audit(url)
            #expect(rows.map { $0["action"] ?? "" } == ["pause", "pause", "resume", "resume"])
            #expect(rows.map { $0["rows_affected"] ?? "" } == ["1", "0", "1", "0"])
            #expect(rows.allSatisfy { $0["scope"] == "app" && $0["app_id"] == app.uuidString.lowercased() && $0["by_me"] == "t" })
            #expect(rows.first?["reason"] == "maintenance")

            // The reader may read the record (when the cluster has the group role).
            let readable = try await Self.query(
                url,
                "SELECT to_regrole('pushizo_reader') IS NULL OR has_table_privilege('pushizo_reader', 'operator_actions', 'SELECT') AS ok")
            #expect(readable.first?["ok"] == "t")

            // Unknown targets and bad flags are refused without a change or a record.
            let unknown = try await Self.command(["pause", "--app", UUID().uuidString], databaseURL: url)
            #expect(unknown.status == 1)
            #expect(unknown.errors.contains("no app"))
            let usage = try await Self.command(["pause", "--provider", "apns"], databaseURL: url)
            #expect(usage.status == 2)
            // Usage errors exit 2 on every form: an unknown flag, an --until passed or no time at all, the
            // operator's text given twice; each message on lines of its own, no escaped line feeds.
            for arguments in [
                ["pause", "--app", app.uuidString, "--bogus"],
                ["pause", "--app", app.uuidString, "--until", "-5m"],
                ["pause", "--app", app.uuidString, "--until", "2001-01-01 00:00:00+00"],
                ["pause", "--app", app.uuidString, "--until", "soon"],
                ["pause", "--app", app.uuidString, "--reason", "r1", "--note", "n1"],
            ] {
                let refused = try await Self.command(arguments, databaseURL: url)
                #expect(refused.status == 2, "\(arguments): \(refused.errors)")
                #expect(!refused.errors.contains("\\u{A}"), "\(refused.errors)")
            }
            #expect(try await Self.audit(url).count == 4)
        }
    }

    @Test func resumeLiftsOnlyAnOperatorsChannelPause() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let app = try await onThread {
                let seed = try Seed(url)
                try seed.app(channelSettings: "{}")
                _ = try seed.connection.query(
                    "UPDATE app_channels SET paused_until = now() + interval '5 minutes', paused_reason = 'InvalidProviderToken'")
                return seed.appID
            }
            let provider = try await Self.command(["resume", "--app", app.uuidString, "--provider", "apns"], databaseURL: url)
            #expect(provider.status == 0)
            #expect(provider.json["already_so"] as? Bool == true)
            #expect((provider.json["summary"] as? String)?.contains("not by an operator") == true)
            let still = try await Self.query(url, "SELECT paused_reason FROM app_channels")
            #expect(still.first?["paused_reason"] == "InvalidProviderToken")

            let paused = try await Self.command(
                ["pause", "--app", app.uuidString, "--provider", "apns", "--until", "2h"], databaseURL: url)
            #expect(paused.status == 0, "\(paused.errors)")
            #expect(paused.json["already_so"] as? Bool == false)
            #expect((paused.json["detail"] as? [String: Any])?["replaced"] != nil)
            // The worker's own pause (a provider refusing the credentials) shorter than the operator's keeps it
            // the operator's.
            try await onThread {
                let until = Date().addingTimeInterval(300)
                _ = try PostgresConnection(connectionString: url).query(
                    CompletionStore.channelPauseSQL, [app, "apns", until, "InvalidProviderToken"])
            }
            let kept = try await Self.query(url, "SELECT paused_reason FROM app_channels")
            #expect(kept.first?["paused_reason"] == "operator")
            let resumed = try await Self.command(["resume", "--app", app.uuidString, "--provider", "apns"], databaseURL: url)
            #expect(resumed.json["already_so"] as? Bool == false)
            let lifted = try await Self.query(url, "SELECT paused_until IS NULL AS lifted FROM app_channels")
            #expect(lifted.first?["lifted"] == "t")
        }
    }

    /// A fleet pause stops a running worker's claims and leasing at insert while the send it has in flight
    /// completes; resume lets the rest go.
    @Test func aFleetPauseStopsClaimsButNotTheSendInFlight() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with(latency: 3) { emulator in
                let (app, first, second) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    return (seed.appID, try seed.subscription(), try seed.subscription())
                }
                try await Self.withWorker(emulator, url) {

                    let inFlight = try await onThread {
                        try Self.notification(url, app: app, target: #"{"include_subscription_ids": ["\#(first)"]}"#)
                    }
                    try await waitUntil("the first delivery is leased (its send under way)") {
                        try await Self.query(url, "SELECT 1 FROM deliveries WHERE notification_id = $1 AND leased_by IS NOT NULL", [inFlight]).count == 1
                    }
                    let pause = try await Self.command(["pause", "--fleet", "--reason", "upgrade"], databaseURL: url)
                    #expect(pause.status == 0, "\(pause.errors)")
                    #expect(pause.json["already_so"] as? Bool == false)
                    let twice = try await Self.command(["pause", "--fleet"], databaseURL: url)
                    #expect(twice.json["already_so"] as? Bool == true)

                    let waiting = try await onThread {
                        try Self.notification(url, app: app, target: #"{"include_subscription_ids": ["\#(second)"]}"#)
                    }
                    try await waitUntil("the send in flight completes and the second notification is expanded") {
                        let sent = try await Self.query(url, "SELECT 1 FROM delivery_events WHERE notification_id = $1 AND event = 'sent'", [inFlight])
                        let queued = try await Self.query(url, "SELECT 1 FROM deliveries WHERE notification_id = $1", [waiting])
                        return sent.count == 1 && queued.count == 1
                    }
                    // More claim polls (every 50 ms) pass; whatever the load, none may take the waiting delivery.
                    try await Task.sleep(for: .seconds(1))
                    let held = try await Self.query(
                        url, "SELECT attempt, leased_by FROM deliveries WHERE notification_id = $1", [waiting])
                    #expect(held.first?["attempt"] == "0")
                    #expect(held.first?["leased_by"] == nil)
                    #expect(emulator.apns.acceptedCount == 1)
                    let events = try await Self.query(url, "SELECT event FROM delivery_events WHERE notification_id = $1", [waiting])
                    #expect(events.isEmpty)

                    let resume = try await Self.command(["resume", "--fleet"], databaseURL: url)
                    #expect(resume.json["already_so"] as? Bool == false)
                    try await waitUntil("the waiting delivery is sent after the resume") {
                        try await Self.query(url, "SELECT 1 FROM delivery_events WHERE notification_id = $1 AND event = 'sent'", [waiting]).count == 1
                    }
                    #expect(emulator.apns.acceptedCount == 2)
                    let actions = try await Self.audit(url).map { "\($0["action"] ?? "")/\($0["scope"] ?? "")/\($0["rows_affected"] ?? "")" }
                    #expect(actions == ["pause/fleet/1", "pause/fleet/0", "resume/fleet/1"])
                }
            }
        }
    }

    /// A channel paused by an operator: its deliveries are put back until the pause ends (no attempt spent, not
    /// failed), and resume makes them due at once.
    @Test func aChannelPauseHoldsItsDeliveriesUntilResumed() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (app, subscription) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    return (seed.appID, try seed.subscription())
                }
                let pause = try await Self.command(["pause", "--app", app.uuidString, "--provider", "apns"], databaseURL: url)
                #expect(pause.status == 0, "\(pause.errors)")
                try await Self.withWorker(emulator, url) {
                    let notification = try await onThread {
                        try Self.notification(url, app: app, target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
                    }
                    try await waitUntil("the delivery waits for the channel") {
                        try await Self.query(
                            url, "SELECT 1 FROM deliveries WHERE notification_id = $1 AND last_error = 'channel_paused' AND run_at = 'infinity' AND leased_by IS NULL",
                            [notification]).count == 1
                    }
                    #expect(emulator.apns.acceptedCount == 0)
                    let resume = try await Self.command(["resume", "--app", app.uuidString, "--provider", "apns"], databaseURL: url)
                    #expect((resume.json["detail"] as? [String: Any])?["requeued"] as? Int == 1)
                    try await waitUntil("the delivery is sent after the resume") {
                        try await Self.query(url, "SELECT 1 FROM delivery_events WHERE notification_id = $1 AND event = 'sent'", [notification]).count == 1
                    }
                    let events = try await Self.query(
                        url, "SELECT event || '/' || coalesce(reason, '') AS e FROM delivery_events WHERE notification_id = $1 ORDER BY id", [notification])
                    #expect(events.map { $0["e"] ?? "" } == ["retrying/channel_paused", "sent/"])
                }
            }
        }
    }

    /// cancel: the rest of a notification (held by an app pause) is skipped / canceled by the fleet's sweep.
    @Test func cancelSkipsTheRestTwiceSafely() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (app, subscriptions) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    return (seed.appID, try (0..<5).map { _ in try seed.subscription() })
                }
                _ = try await Self.command(["pause", "--app", app.uuidString], databaseURL: url)
                try await Self.withWorker(emulator, url) {
                    let ids = subscriptions.map { "\"\($0)\"" }.joined(separator: ",")
                    let notification = try await onThread {
                        try Self.notification(url, app: app, target: #"{"include_subscription_ids": [\#(ids)]}"#)
                    }
                    try await waitUntil("the notification is expanded, its deliveries waiting for the app") {
                        try await Self.query(url, "SELECT 1 FROM deliveries WHERE notification_id = $1 AND attempt = 0", [notification]).count == 5
                    }
                    let cancel = try await Self.command(["cancel", "--notification", notification.uuidString, "--reason", "wrong text"], databaseURL: url)
                    #expect(cancel.status == 0, "\(cancel.errors)")
                    #expect(cancel.json["already_so"] as? Bool == false)
                    #expect((cancel.json["detail"] as? [String: Any])?["pending"] as? Int == 5)
                    try await waitUntil("the sweep skips them") {
                        try await Self.query(url, "SELECT 1 FROM delivery_events WHERE notification_id = $1 AND event = 'skipped' AND reason = 'canceled'", [notification]).count == 5
                    }
                    let again = try await Self.command(["cancel", "--notification", notification.uuidString], databaseURL: url)
                    #expect(again.json["already_so"] as? Bool == true)
                    #expect((again.json["detail"] as? [String: Any])?["pending"] as? Int == 0)
                    #expect(emulator.apns.acceptedCount == 0)
                    let rows = try await Self.audit(url)
                    #expect(rows.map { $0["action"] ?? "" } == ["pause", "cancel", "cancel"])
                    #expect(rows[1]["reason"] == "wrong text")
                    #expect(rows[1]["notification_id"] == notification.uuidString.lowercased())
                }
            }
        }
    }

    /// retry: only failures matching the reasons and time, to subscriptions still active, once each; then sent.
    @Test func retryRequeuesOnlyThePermittedFailuresAndTheyAreSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let (notification, requeued) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let fresh = try seed.subscription()
                    let old = try seed.subscription()
                    let invalid = try seed.subscription(status: "invalid")
                    let filtered = try seed.subscription()
                    let sentLater = try seed.subscription()
                    let unsubscribed = try seed.subscription(status: "unsubscribed")
                    let all = [fresh, old, invalid, filtered, sentLater, unsubscribed].map { "\"\($0)\"" }.joined(separator: ",")
                    let notification = try seed.notification(target: #"{"include_subscription_ids": [\#(all)]}"#)
                    _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                    for (subscription, event, reason, minutesAgo) in [
                        (fresh, "failed", "max_attempts", 10), (old, "failed", "max_attempts", 120),
                        (invalid, "failed", "unregistered", 10), (filtered, "failed", "retries_exhausted", 10),
                        (sentLater, "failed", "max_attempts", 20), (sentLater, "sent", nil, 5),
                        (unsubscribed, "failed", "max_attempts", 10),
                    ] as [(UUID, String, String?, Int)] {
                        _ = try seed.connection.query(
                            """
                            INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event, reason, attempt)
                            VALUES (now() - make_interval(mins => $5), $1, $2, $3, $4, $6, 3)
                            """, [seed.appID, notification, subscription, event, minutesAgo, reason])
                    }
                    return (notification, fresh)
                }
                let arguments = [
                    // Reasons in any case, with or without underscores: the stored `max_attempts` and `unregistered`.
                    "retry", "--notification", notification.uuidString, "--reason", "MaxAttempts", "--reason", "Unregistered",
                    "--since", "1h", "--note", "provider outage over",
                ]
                // A reason no failure has: refused as usage, listing the reasons, before anything changes.
                let bogus = try await Self.command(
                    ["retry", "--notification", notification.uuidString, "--reason", "bogus"], databaseURL: url)
                #expect(bogus.status == 2, "\(bogus.errors)")
                #expect(bogus.errors.contains("max_attempts") && bogus.errors.contains("unavailable"), "\(bogus.errors)")
                // A --since not in the past (a negative duration, a time to come) would match nothing: usage, naming
                // the flag, before anything changes.
                for since in ["-1h", "4000-01-01 00:00:00+00"] {
                    let ahead = try await Self.command(
                        ["retry", "--notification", notification.uuidString, "--since", since], databaseURL: url)
                    #expect(ahead.status == 2, "\(since): \(ahead.errors)")
                    #expect(ahead.errors.contains("--since \(since) is not in the past"), "\(ahead.errors)")
                }
                let sinceArguments = arguments
                let first = try await Self.command(sinceArguments, databaseURL: url)
                #expect(first.status == 0, "\(first.errors)")
                #expect(first.json["rows_affected"] as? Int == 1)
                let reasons = (first.json["detail"] as? [String: Any])?["reasons"] as? [String: [String: Int]]
                #expect(reasons?["max_attempts"] == ["requeued": 1, "subscription_inactive": 1, "already_queued": 0])
                #expect(reasons?["unregistered"] == ["requeued": 0, "subscription_inactive": 1, "already_queued": 0])
                #expect(reasons?["retries_exhausted"] == nil)
                let queued = try await Self.query(url, "SELECT subscription_id::text, attempt FROM deliveries")
                #expect(queued.map { $0["subscription_id"] ?? "" } == [requeued.uuidString.lowercased()])
                #expect(queued.first?["attempt"] == "0")

                let second = try await Self.command(sinceArguments, databaseURL: url)
                #expect(second.json["rows_affected"] as? Int == 0)
                #expect(second.json["already_so"] as? Bool == true)
                #expect((second.json["detail"] as? [String: Any])?["already_queued"] as? Int == 1)
                #expect(try await Self.query(url, "SELECT 1 FROM deliveries").count == 1)

                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                let sent = try await Self.query(
                    url, "SELECT subscription_id::text FROM delivery_events WHERE event = 'sent' AND subscription_id = $1", [requeued])
                #expect(sent.count == 1)
                #expect(emulator.apns.acceptedCount == 1)

                let third = try await Self.command(sinceArguments, databaseURL: url)
                #expect(third.json["rows_affected"] as? Int == 0)
                let rows = try await Self.audit(url)
                #expect(rows.map { "\($0["action"] ?? "")/\($0["rows_affected"] ?? "")" } == ["retry/1", "retry/0", "retry/0"])
                #expect(rows.first?["reason"] == "provider outage over")
            }
        }
    }

    /// The note `status` shows beside an operator's pause is that of the `pause` that set it: a `pause` that found
    /// the target already so changes nothing, its note included, though it is recorded in `operator_actions`.
    @Test func aPauseThatChangedNothingKeepsTheNoteOfThePauseInForce() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let app = try await Self.app(url)
            func notes() async throws -> (app: String?, channel: String?, fleet: String?) {
                let (status, text, errors) = try await StatusCommandTests.status(["--json"], databaseURL: url)
                #expect(status == 0, "\(errors)")
                let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
                return (
                    (json["paused_apps"] as? [[String: Any]])?.first?["note"] as? String,
                    (json["paused_channels"] as? [[String: Any]])?.first?["note"] as? String,
                    (json["fleet_pause"] as? [String: Any])?["note"] as? String)
            }
            for target in [["--app", app.uuidString], ["--app", app.uuidString, "--provider", "apns"], ["--fleet"]] {
                let set = try await Self.command(["pause"] + target + ["--note", "new .p8 key"], databaseURL: url)
                #expect(set.status == 0 && set.json["already_so"] as? Bool == false, "\(set.errors)")
                let again = try await Self.command(["pause"] + target + ["--note", "checking"], databaseURL: url)
                #expect(again.status == 0 && again.json["already_so"] as? Bool == true, "\(again.errors)")
            }
            #expect(try await notes() == ("new .p8 key", "new .p8 key", "new .p8 key"))
            // A pause that changes the end replaces the pause in force: its note is shown.
            _ = try await Self.command(["pause", "--app", app.uuidString, "--until", "2h", "--note", "two hours"], databaseURL: url)
            #expect(try await notes().app == "two hours")
            let rows = try await Self.audit(url)
            #expect(rows.map { $0["reason"] ?? "" } == Array(repeating: ["new .p8 key", "checking"], count: 3).flatMap { $0 } + ["two hours"])
        }
    }

    /// `status --app ID`: every figure of one app only, with its operator pause and the fleet's.
    @Test func statusNarrowedToOneApp() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (one, other) = try await onThread {
                let first = try Seed(url)
                try first.app(channelSettings: "{}")
                let second = try Seed(url)
                try second.app(channelSettings: "{}")
                for (seed, count) in [(first, 2), (second, 3)] {
                    let ids = try (0..<count).map { _ in "\"\(try seed.subscription())\"" }.joined(separator: ",")
                    let notification = try seed.notification(target: #"{"include_subscription_ids": [\#(ids)]}"#)
                    _ = try seed.connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id)
                        SELECT $1, id, app_id FROM subscriptions WHERE app_id = $2
                        """, [notification, seed.appID])
                    _ = try seed.connection.query("UPDATE notifications SET status = 'expanded' WHERE id = $1", [notification])
                }
                return (first.appID, second.appID)
            }
            _ = try await Self.command(["pause", "--app", one.uuidString, "--note", "new .p8 key"], databaseURL: url)
            _ = try await Self.command(["pause", "--fleet", "--until", "1h"], databaseURL: url)
            let (status, narrowed, errors) = try await StatusCommandTests.status(["--app", one.uuidString, "--json"], databaseURL: url)
            #expect(status == 0, "\(errors)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(narrowed.utf8)) as? [String: Any])
            // UUIDs as PostgreSQL prints them, lower case.
            #expect(json["app_id"] as? String == one.uuidString.lowercased())
            let due = ((json["queue"] as? [String: Any])?["due"] as? [String: Any])?["value"] as? Int
            #expect(due == 2)
            let apps = try #require(json["paused_apps"] as? [[String: Any]])
            #expect(apps.map { $0["app_id"] as? String } == [one.uuidString.lowercased()])
            // The operator's note is shown with the pause; the fleet's pause had none.
            #expect(apps.first?["note"] as? String == "new .p8 key")
            #expect((json["fleet_pause"] as? [String: Any])?["note"] is NSNull)
            #expect(apps.first?["paused_until"] is NSNull)
            #expect((json["fleet_pause"] as? [String: Any])?["reason"] as? String == "operator")

            let (_, fleet, _) = try await StatusCommandTests.status(["--json"], databaseURL: url)
            let whole = try #require(try JSONSerialization.jsonObject(with: Data(fleet.utf8)) as? [String: Any])
            #expect(((whole["queue"] as? [String: Any])?["due"] as? [String: Any])?["value"] as? Int == 5)
            #expect(whole["app_id"] is NSNull)

            let (_, text, _) = try await StatusCommandTests.status(["--app", other.uuidString], databaseURL: url)
            #expect(text.contains("narrowed to app \(other.uuidString.lowercased())"))
            #expect(text.contains("FLEET PAUSED until"))
            #expect(!text.contains("paused apps:"))
            let (_, all, _) = try await StatusCommandTests.status([], databaseURL: url)
            #expect(all.contains("app \(one.uuidString.lowercased()) indefinitely: operator: new .p8 key"), "\(all)")
            let (bad, _, badErrors) = try await StatusCommandTests.status(["--app", "nope"], databaseURL: url)
            #expect(bad == 2)
            #expect(badErrors.contains("--app needs an app id") && !badErrors.contains("----app"), "\(badErrors)")
        }
    }
}
