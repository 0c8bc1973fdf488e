import Foundation
import SocketTestSupport
import Postgres
import Testing
@testable import Worker

/// The group roles migration 0027 ships (pushizo_worker, pushizo_producer, pushizo_reader) through real logins in
/// them, and the optional row-level security per app for producers (docs/operations.md, "Roles"). Each role does
/// what it should and is refused the rest (SQLSTATE 42501); `run`, `status` and `migrate` work as those roles.
@Suite("database roles")
struct DatabaseRolesTests {
    static let appA = UUID(uuidString: "00000000-0000-4000-8000-0000000000aa")!
    static let appB = UUID(uuidString: "00000000-0000-4000-8000-0000000000bb")!

    /// Creates a login role (trust authentication on the throwaway cluster) in `group`, runs `body` with its name,
    /// drops it afterwards.
    static func withLogin<T: Sendable>(
        _ url: String, in group: String, _ body: @Sendable (String) async throws -> T
    ) async throws -> T {
        let role = "login_" + UUID().uuidString.prefix(8).lowercased()
        try await asOwner(url) { try $0.execute("CREATE ROLE \(role) LOGIN IN ROLE \(group)") }
        defer {
            _ = try? onSocketThreadSync {
                let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
                defer { connection.close() }
                try connection.execute("DROP OWNED BY \(role); DROP ROLE \(role)")
            }
        }
        return try await body(role)
    }

    static func connect(_ url: String, as role: String) throws -> PostgresConnection {
        try PostgresConnection(connectionString: url + " user=\(role)", applicationName: "pushizo-test-\(role)")
    }

    /// Runs `body` on a connection as the schema owner (the test cluster's superuser), on a thread of its own.
    static func asOwner<T: Sendable>(_ url: String, _ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await onThread {
            let owner = try PostgresConnection(connectionString: url, applicationName: "pushizo-test")
            defer { owner.close() }
            return try body(owner)
        }
    }

    /// Expects `sql` to be refused for lack of a right or by a row-level security policy (both 42501).
    static func expectRefused(
        _ connection: PostgresConnection, _ sql: String, _ parameters: [any PostgresEncodable] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        do {
            _ = try connection.query(sql, parameters)
            Issue.record("not refused: \(sql)", sourceLocation: sourceLocation)
        } catch let error as PostgresError {
            #expect(error.sqlState == "42501", "\(sql): \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(sql): \(error)", sourceLocation: sourceLocation)
        }
    }

    /// Two apps, each with a channel, a user, a subscription, a notification and an event, written as the owner.
    static func seedTwoApps(_ connection: PostgresConnection) throws {
        for (app, digit) in [(appA, "a"), (appB, "b")] {
            _ = try connection.query("INSERT INTO apps (id, name) VALUES ($1, $2)", [app, "app " + digit])
            _ = try connection.query(
                "INSERT INTO app_channels (app_id, provider, settings) VALUES ($1, 'apns', '{\"private_key\": \"secret\"}')",
                [app])
            let user = try connection.query(
                "INSERT INTO users (app_id, external_id) VALUES ($1, $2) RETURNING id", [app, "user-" + digit]
            )[0].decode(UUID.self, "id")
            _ = try connection.query(
                "INSERT INTO subscriptions (app_id, user_id, platform, token) VALUES ($1, $2, 'ios', $3)",
                [app, user, Seed.token()])
            let notification = try connection.query(
                "INSERT INTO notifications (app_id, message, target, send_after) VALUES ($1, '{}', '{\"all\": true}', 'infinity') RETURNING id",
                [app]
            )[0].decode(UUID.self, "id")
            _ = try connection.query(
                "INSERT INTO delivery_events (app_id, notification_id, event) VALUES ($1, $2, 'opened')", [app, notification])
        }
    }

    @Test func theMigrationsShipThreeGroupRolesWithoutLogin() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let roles = try await Self.asOwner(url) { owner in
                try owner.query(
                    """
                    SELECT rolname, rolcanlogin OR rolsuper OR rolcreaterole OR rolbypassrls AS privileged FROM pg_roles
                    WHERE rolname IN ('pushizo_worker', 'pushizo_producer', 'pushizo_reader') ORDER BY rolname
                    """
                ).map { (try $0.decode(String.self, "rolname"), try $0.decode(Bool.self, "privileged")) }
            }
            #expect(roles.map(\.0) == ["pushizo_producer", "pushizo_reader", "pushizo_worker"])
            #expect(roles.allSatisfy { !$0.1 }, "\(roles)")
        }
    }

    @Test func aProducerWritesTheContractTablesAndNothingOfTheWorkers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withLogin(url, in: "pushizo_producer") { producer in
                try await onThread {
                    let c = try Self.connect(url, as: producer)
                    defer { c.close() }
                    let app = UUID()
                    _ = try c.query("INSERT INTO apps (id, name, frequency_caps) VALUES ($1, 'mine', '[]')", [app])
                    _ = try c.query("UPDATE apps SET quiet_hours_start = '22:00', quiet_hours_end = '07:00' WHERE id = $1", [app])
                    _ = try c.query(
                        "INSERT INTO app_channels (app_id, provider, settings) VALUES ($1, 'webpush', '{}')", [app])
                    let user = try c.query(
                        "INSERT INTO users (app_id, external_id, tags) VALUES ($1, 'u1', '{\"level\": 3}') RETURNING id", [app]
                    )[0].decode(UUID.self, "id")
                    let subscription = try c.query(
                        "INSERT INTO subscriptions (app_id, user_id, platform, token) VALUES ($1, $2, 'ios', $3) RETURNING id",
                        [app, user, Seed.token()]
                    )[0].decode(UUID.self, "id")
                    let notification = try c.query(
                        "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{\"contents\": {\"en\": \"hi\"}}', '{\"all\": true}') RETURNING id",
                        [app]
                    )[0].decode(UUID.self, "id")
                    _ = try c.query("UPDATE notifications SET status = 'canceled' WHERE id = $1", [notification])
                    _ = try c.query(
                        "INSERT INTO delivery_events (app_id, notification_id, subscription_id, event) VALUES ($1, $2, $3, 'opened')",
                        [app, notification, subscription])
                    #expect(try c.query("SELECT count(*)::int AS n FROM delivery_events WHERE app_id = $1", [app])[0].decode(Int.self, "n") == 1)
                    #expect(try c.query("SELECT sent FROM notification_counts WHERE notification_id = $1", [notification])[0]
                        .decode(Int64.self, "sent") == 0)

                    // The worker's columns, tables and functions, the operator's setting, the schema.
                    Self.expectRefused(c, "UPDATE apps SET claim_weight = 100 WHERE id = $1", [app])
                    Self.expectRefused(c, "UPDATE notifications SET targeted_count = 5 WHERE id = $1", [notification])
                    Self.expectRefused(c, "UPDATE notifications SET status_reason = 'x' WHERE id = $1", [notification])
                    Self.expectRefused(c, "SELECT count(*) FROM deliveries")
                    Self.expectRefused(
                        c, "INSERT INTO deliveries (notification_id, subscription_id, app_id) VALUES ($1, $2, $3)",
                        [notification, subscription, app])
                    Self.expectRefused(c, "SELECT count(*) FROM provider_tokens")
                    Self.expectRefused(c, "SELECT count(*) FROM app_claim_turns")
                    Self.expectRefused(c, "DELETE FROM delivery_events WHERE app_id = $1", [app])
                    Self.expectRefused(c, "INSERT INTO app_producers (role_name, app_id) VALUES (current_user, $1)", [app])
                    Self.expectRefused(c, "SELECT pushizo_set_producer_row_security(true)")
                    Self.expectRefused(c, "SELECT pushizo_drop_event_partition('delivery_events_default', 0)")
                    Self.expectRefused(c, "CREATE TABLE mine (id int)")

                    // Deleting rows the worker queued deliveries for: the triggers' cascades run as the owner.
                    _ = try c.query("DELETE FROM subscriptions WHERE id = $1", [subscription])
                    _ = try c.query("DELETE FROM notifications WHERE id = $1", [notification])
                    _ = try c.query("DELETE FROM apps WHERE id = $1", [app])
                }
            }
        }
    }

    @Test func theReaderReadsEverythingButSecretsAndWritesNothing() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.asOwner(url, Self.seedTwoApps)
            try await Self.withLogin(url, in: "pushizo_reader") { reader in
                try await onThread {
                    let c = try Self.connect(url, as: reader)
                    defer { c.close() }
                    for sql in [
                        "SELECT id, name, default_timezone, frequency_caps, claim_weight, max_sends_per_second FROM apps",
                        "SELECT app_id, provider, endpoint, paused_until, paused_reason FROM app_channels",
                        "SELECT id, app_id, platform, language, timezone, status, kind FROM subscriptions",
                        "SELECT * FROM users", "SELECT * FROM notifications", "SELECT * FROM deliveries",
                        "SELECT * FROM delivery_events", "SELECT * FROM notification_counts", "SELECT * FROM app_claim_turns",
                        "SELECT * FROM queue_depth_samples", "SELECT * FROM expansion_slices", "SELECT * FROM app_producers",
                    ] {
                        #expect(throws: Never.self, "\(sql)") { _ = try c.query(sql) }
                    }
                    #expect(try c.query("SELECT count(*)::int AS n FROM notifications")[0].decode(Int.self, "n") == 2)
                    for secret in [
                        "SELECT signing_key FROM apps", "SELECT * FROM apps", "SELECT settings FROM app_channels",
                        "SELECT token FROM subscriptions", "SELECT web_auth FROM subscriptions",
                        "SELECT web_p256dh FROM subscriptions", "SELECT * FROM provider_tokens",
                    ] {
                        Self.expectRefused(c, secret)
                    }
                    Self.expectRefused(c, "UPDATE notifications SET status = 'canceled'")
                    Self.expectRefused(c, "INSERT INTO delivery_events (app_id, event) VALUES ($1, 'opened')", [Self.appA])
                    Self.expectRefused(c, "DELETE FROM deliveries")
                    Self.expectRefused(c, "UPDATE apps SET claim_weight = 2")
                }
            }
        }
    }

    /// `status` needs nothing the reader lacks, with producers' row-level security off and on.
    @Test func statusRunsAsTheReader() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.asOwner(url, Self.seedTwoApps)
            try await Self.withLogin(url, in: "pushizo_reader") { reader in
                let (status, stdout, stderr) = try await StatusCommandTests.status(databaseURL: url + " user=\(reader)")
                #expect(status == 0, "\(stdout)\n\(stderr)")
                try await Self.asOwner(url) { _ = try $0.query("SELECT pushizo_set_producer_row_security(true)") }
                let (secured, securedOut, securedErr) = try await StatusCommandTests.status(
                    ["--json"], databaseURL: url + " user=\(reader)")
                #expect(secured == 0, "\(securedOut)\n\(securedErr)")
            }
        }
    }

    /// The worker's role: the queue and the maintenance, not the producers' writes; `migrate` as the worker finds
    /// the schema up to date.
    @Test func theWorkerRoleKeepsToTheQueue() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.asOwner(url, Self.seedTwoApps)
            try await Self.withLogin(url, in: "pushizo_worker") { worker in
                try await onThread {
                    let c = try Self.connect(url, as: worker)
                    defer { c.close() }
                    #expect(try c.query("SELECT count(*)::int AS n FROM provider_tokens")[0].decode(Int.self, "n") == 0)
                    _ = try c.query("UPDATE notifications SET status_reason = NULL WHERE app_id = $1", [Self.appA])
                    _ = try c.query("SELECT pushizo_create_event_partition(current_date + 40)")
                    Self.expectRefused(
                        c, "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{}', '{\"all\": true}')", [Self.appA])
                    Self.expectRefused(c, "INSERT INTO users (app_id, external_id) VALUES ($1, 'x')", [Self.appA])
                    Self.expectRefused(c, "DELETE FROM apps")
                    Self.expectRefused(c, "UPDATE apps SET claim_weight = 2")
                    Self.expectRefused(c, "INSERT INTO app_producers (role_name, app_id) VALUES (current_user, $1)", [Self.appA])
                    Self.expectRefused(c, "SELECT pushizo_apply_roles()")
                    Self.expectRefused(c, "CREATE TABLE mine (id int)")
                }
                let process = Process()
                process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                process.arguments = ["migrate"]
                process.environment = [
                    "PUSHIZO_DATABASE_URL": url + " user=\(worker)",
                    "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
                ]
                let pipe = Pipe()
                process.standardOutput = pipe
                process.standardError = pipe
                try process.run()
                let output = try await onThread { String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0, "\(output)")
                #expect(output.contains("schema is up to date"), "\(output)")
            }
        }
    }

    /// With row-level security on, a producer mapped to app A reaches none of app B's rows in any producer table:
    /// it reads none, and its inserts, updates and deletes of them are refused or touch nothing.
    @Test func aProducerOfOneAppCannotReachAnothersRowsWithRowSecurityOn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withLogin(url, in: "pushizo_producer") { producer in
                try await Self.withLogin(url, in: "pushizo_producer") { unmapped in
                    try await Self.asOwner(url) { owner in
                        try Self.seedTwoApps(owner)
                        _ = try owner.query("INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, Self.appA])
                        _ = try owner.query("SELECT pushizo_set_producer_row_security(true)")

                        let c = try Self.connect(url, as: producer)
                        defer { c.close() }
                        let tables = [("apps", "id"), ("app_channels", "app_id"), ("users", "app_id"), ("subscriptions", "app_id"),
                                      ("notifications", "app_id"), ("delivery_events", "app_id")]
                        for (table, column) in tables {
                            let seen = try c.query("SELECT DISTINCT \(column) AS app FROM \(table)").map { try $0.decode(UUID.self, "app") }
                            #expect(seen == [Self.appA], "\(table)")
                        }
                        // A column each table lets producers update (events are append-only for them).
                        for (table, column, updatable) in [
                            ("apps", "id", "name"), ("app_channels", "app_id", "endpoint"), ("users", "app_id", "tags"),
                            ("subscriptions", "app_id", "language"), ("notifications", "app_id", "status"),
                        ] {
                            let updated = try c.query("UPDATE \(table) SET \(updatable) = \(updatable) WHERE \(column) = $1", [Self.appB])
                            #expect(updated.affectedRows == 0, "\(table)")
                            let deleted = try c.query("DELETE FROM \(table) WHERE \(column) = $1", [Self.appB])
                            #expect(deleted.affectedRows == 0, "\(table)")
                        }
                        #expect(try c.query("SELECT app_id FROM app_producers").map { try $0.decode(UUID.self, "app_id") } == [Self.appA])

                        // Writes into app B, or moving A's rows to B.
                        Self.expectRefused(c, "INSERT INTO apps (id) VALUES ($1)", [UUID()])
                        Self.expectRefused(c, "INSERT INTO app_channels (app_id, provider, settings) VALUES ($1, 'fcm', '{}')", [Self.appB])
                        Self.expectRefused(c, "INSERT INTO users (app_id, external_id) VALUES ($1, 'intruder')", [Self.appB])
                        Self.expectRefused(
                            c, "INSERT INTO subscriptions (app_id, platform, token) VALUES ($1, 'ios', $2)", [Self.appB, Seed.token()])
                        Self.expectRefused(
                            c, "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{}', '{\"all\": true}')", [Self.appB])
                        Self.expectRefused(c, "INSERT INTO delivery_events (app_id, event) VALUES ($1, 'opened')", [Self.appB])
                        Self.expectRefused(c, "UPDATE users SET app_id = $1 WHERE app_id = $2", [Self.appB, Self.appA])
                        Self.expectRefused(c, "UPDATE subscriptions SET app_id = $1 WHERE app_id = $2", [Self.appB, Self.appA])
                        // The counts view reads notifications with its owner's rights: closed to producers.
                        Self.expectRefused(c, "SELECT * FROM notification_counts")
                        // Its own app still works.
                        _ = try c.query(
                            "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{}', '{\"all\": true}')", [Self.appA])
                        _ = try c.query("UPDATE apps SET default_language = 'tr' WHERE id = $1", [Self.appA])

                        // B's rows are all still there.
                        for (table, column) in tables {
                            let n = try owner.query("SELECT count(*)::int AS n FROM \(table) WHERE \(column) = $1", [Self.appB])[0]
                            #expect(try n.decode(Int.self, "n") == 1, "\(table)")
                        }

                        let stranger = try Self.connect(url, as: unmapped)
                        defer { stranger.close() }
                        for (table, _) in tables {
                            #expect(try stranger.query("SELECT count(*)::int AS n FROM \(table)")[0].decode(Int.self, "n") == 0, "\(table)")
                        }

                        // Off again: the producer reaches every app (one trust domain).
                        _ = try owner.query("SELECT pushizo_set_producer_row_security(false)")
                        #expect(try c.query("SELECT count(*)::int AS n FROM apps")[0].decode(Int.self, "n") == 2)
                        #expect(throws: Never.self) { _ = try c.query("SELECT * FROM notification_counts") }
                    }
                }
            }
        }
    }

    /// With row-level security on (and off), a producer login writes the app's settings, channel, subscriptions
    /// and two notifications, and the real `pushizo-worker run`, logged in as a member of pushizo_worker, expands,
    /// claims, sends and completes every delivery: frequency caps and the app's send limit reserved, a token APNs
    /// calls `Unregistered` marked invalid, no statement refused (nothing in its log says 42501 or permission
    /// denied); `check` as the same login passes.
    @Test(arguments: [true, false])
    func theWorkerClaimsAndCompletesWithRowSecurity(on rowSecurity: Bool) async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await Self.withLogin(url, in: "pushizo_producer") { producer in
                    try await Self.withLogin(url, in: "pushizo_worker") { worker in
                        let subscribers = 12
                        let unregistered = Seed.token(prefix: "0410")
                        try await Self.asOwner(url) { owner in
                            _ = try owner.query("INSERT INTO apps (id) VALUES ($1)", [Self.appA])
                            _ = try owner.query("INSERT INTO apps (id) VALUES ($1)", [Self.appB])
                            _ = try owner.query("INSERT INTO app_producers (role_name, app_id) VALUES ($1, $2)", [producer, Self.appA])
                            _ = try owner.query("SELECT pushizo_set_producer_row_security($1)", [rowSecurity])

                            let c = try Self.connect(url, as: producer)
                            defer { c.close() }
                            _ = try c.query(
                                """
                                UPDATE apps SET frequency_caps = '[{"max": 1, "per_seconds": 3600}]', max_sends_per_second = 500
                                WHERE id = $1
                                """, [Self.appA])
                            _ = try c.query(
                                "INSERT INTO app_channels (app_id, provider, settings, endpoint) VALUES ($1, 'apns', $2::jsonb, $3)",
                                [Self.appA, emulator.channelSettings, emulator.endpoint])
                            for token in (0..<subscribers).map({ Seed.token(prefix: String(format: "a%03d", $0)) }) + [unregistered] {
                                _ = try c.query(
                                    "INSERT INTO subscriptions (app_id, platform, token, apns_environment, language) VALUES ($1, 'ios', $2, 'production', 'en')",
                                    [Self.appA, token])
                            }
                            for _ in 0..<2 {
                                _ = try c.query(
                                    "INSERT INTO notifications (app_id, message, target) VALUES ($1, '{\"contents\": {\"en\": \"hi\"}}', '{\"all\": true}')",
                                    [Self.appA])
                            }
                        }
                        let process = emulator.workerProcess(
                            databaseURL: url + " user=\(worker)", extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "true"])
                        let log = Pipe()
                        process.standardError = log
                        process.standardOutput = log
                        try process.run()
                        let hangGuard = Task {
                            try await Task.sleep(for: .seconds(90))
                            process.terminate()
                        }
                        let output = try await onThread { String(decoding: log.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
                        try await onThread { process.waitUntilExit() }
                        hangGuard.cancel()
                        #expect(process.terminationStatus == 0, "\(output)")
                        #expect(!output.contains("42501") && !output.lowercased().contains("permission denied"), "\(output)")
                        let (checked, checkOutput) = try await EgressEndToEndTests.runCheck(
                            databaseURL: url + " user=\(worker)",
                            extra: ["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true", "PUSHIZO_CA_FILE": emulator.caFile])
                        #expect(checked == 0, "\(checkOutput)")

                        let (sent, capped, queued, invalid) = try await Self.asOwner(url) { owner in
                            let events = try owner.query(
                                """
                                SELECT count(*) FILTER (WHERE e.event = 'sent')::int AS sent,
                                       count(*) FILTER (WHERE e.reason = 'frequency_capped' AND s.token <> $1)::int AS capped
                                FROM delivery_events e JOIN subscriptions s ON s.id = e.subscription_id
                                """, [unregistered])[0]
                            return (try events.decode(Int.self, "sent"), try events.decode(Int.self, "capped"),
                                    try owner.query("SELECT count(*)::int AS n FROM deliveries")[0].decode(Int.self, "n"),
                                    try owner.query("SELECT status FROM subscriptions WHERE token = $1", [unregistered])[0]
                                        .decode(String.self, "status"))
                        }
                        // One of the two notifications per subscription: the cap of one an hour skips the other.
                        #expect(sent == subscribers)
                        #expect(capped == subscribers)
                        #expect(queued == 0)
                        #expect(invalid == "invalid")
                    }
                }
            }
        }
    }

    /// The worker's maintenance as a pushizo_worker login, with producers' row-level security on: event
    /// partitions created and dropped through the owner-rights functions, expired rows deleted, grown tables'
    /// statistics checked; no step refused.
    @Test func theMaintenanceRunsAsTheWorkerWithRowSecurityOn() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (old, today) = try await onThread {
                let seed = try Seed(url)
                defer { seed.connection.close() }
                let (_, old) = try DataLifecycleTests.partitionFortyDaysOld(seed)
                let today = try DataLifecycleTests.dayPartition(seed.connection, offset: 0)
                try seed.connection.execute("DROP TABLE \(today)")
                _ = try seed.connection.query("SELECT pushizo_set_producer_row_security(true)")
                return (old, today)
            }
            try await Self.withLogin(url, in: "pushizo_worker") { worker in
                let report = try await onThread {
                    let c = try Self.connect(url, as: worker)
                    defer { c.close() }
                    _ = try PlannerStatistics.refresh(on: c)
                    return try DataLifecycle.maintain(on: c, settings: DataLifecycleTests.days30, waitForLock: false)
                }
                let done = try #require(report)
                #expect(done.problems.isEmpty, "\(done.problems)")
                #expect(done.droppedPartitions == [old])
                #expect(done.createdPartitions.contains(today))
            }
        }
    }

    /// A schema owner without CREATEROLE (the usual operator's) applies every migration, and gives the shipped
    /// roles their rights on its own objects.
    @Test func aPlainOwnerAppliesEveryMigration() async throws {
        let base = try TestDatabase.baseConnectionString()
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let owner = "owner_" + suffix, database = "o_" + suffix
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            try admin.execute("CREATE ROLE \(owner) LOGIN NOCREATEROLE NOSUPERUSER")
            try admin.execute("CREATE DATABASE \(database) OWNER \(owner)")
        }
        defer {
            _ = try? onSocketThreadSync {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
                try admin.execute("DROP ROLE IF EXISTS \(owner)")
            }
        }
        let url = base + " dbname=\(database)"
        try await onThread {
            let connection = try Self.connect(url, as: owner)
            defer { connection.close() }
            // The group roles are the cluster's: another test's database, migrated at the same moment by a role that
            // may create them, can make them while this migration runs, after the step that grants them their
            // rights. Only roles that existed before the migration must have them.
            let roles = try connection.query(
                "SELECT count(*)::int AS n FROM pg_roles WHERE rolname IN ('pushizo_worker', 'pushizo_producer', 'pushizo_reader')"
            )[0].decode(Int.self, "n")
            let migrator = try PostgresMigrator(directory: TestDatabase.migrationsDirectory)
            let report = try migrator.migrate(on: connection)
            #expect(report.applied == migrator.migrations.map(\.fileName))
            if roles == 3 {
                let rights = try connection.query(
                    """
                    SELECT has_table_privilege('pushizo_worker', 'deliveries', 'UPDATE') AS worker,
                           has_column_privilege('pushizo_producer', 'notifications', 'message', 'INSERT') AS producer,
                           has_column_privilege('pushizo_reader', 'apps', 'signing_key', 'SELECT') AS reader_secret
                    """)[0]
                #expect(try rights.decode(Bool.self, "worker"))
                #expect(try rights.decode(Bool.self, "producer"))
                #expect(try !rights.decode(Bool.self, "reader_secret"))
            }
        }
    }
}
