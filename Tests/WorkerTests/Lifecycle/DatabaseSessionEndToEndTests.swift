import Foundation
import Postgres
import SocketTestSupport
import Testing

/// The real executable against the database's session-level states (docs/operations.md, "The database
/// connection"): a database turned read-only and back, a database's statement timeout set tiny and raised, a
/// role at its connection limit. The worker recovers by itself and sets none of the rows aside.
@Suite("Database session states end to end")
struct DatabaseSessionEndToEndTests {
    /// Seeds an app on the emulator with `devices` subscribers; returns the app id.
    static func seedApp(_ url: String, _ emulator: EmulatorHarness, devices: Int) async throws -> UUID {
        try await onThread {
            let seed = try SmallNotificationEndToEndTests.seedSubscriptions(url, emulator, count: devices)
            defer { seed.connection.close() }
            return seed.appID
        }
    }

    static func databaseName(_ url: String) async throws -> String {
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
            defer { connection.close() }
            return try connection.query("SELECT current_database() AS name")[0].decode(String.self, "name")
        }
    }

    /// Runs `sql` on a session of its own (started now, so it sees the database's settings as they are now).
    static func admin(_ url: String, _ sql: String, _ parameters: [any PostgresEncodable] = []) async throws {
        try await onThread {
            let connection = try PostgresConnection(
                connectionString: url + " target_session_attrs=any", applicationName: "pushizo-test-admin")
            defer { connection.close() }
            _ = try connection.query("SET default_transaction_read_only = off")
            _ = try connection.query(sql, parameters)
        }
    }

    static func count(_ database: PostgresClient, _ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> Int {
        try await database.query(sql, parameters)[0].decode(Int.self, "n")
    }

    /// Polls `condition` every 100 ms; records an issue after `limit` seconds (a hang guard, not a timing assertion).
    static func until(_ what: String, limit: Double = 120, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(limit)
        while ContinuousClock.now < deadline {
            if (try? await condition()) == true { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("timed out waiting until \(what)")
    }

    static let sentSQL = "SELECT count(*) AS n FROM delivery_events WHERE notification_id = $1 AND event = 'sent'"
    static let failedSQL = "SELECT count(*) AS n FROM delivery_events WHERE event = 'failed'"

    /// The database turns read-only (`default_transaction_read_only`, as a demoted primary is) and the worker's
    /// sessions are cut; a notification is queued meanwhile; then the database is writable again and nobody cuts
    /// anything: the worker sends every delivery by itself, and fails none.
    @Test func aWorkerRecoversByItselfWhenTheDatabaseIsWritableAgain() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let name = try await Self.databaseName(url)
                let app = try await Self.seedApp(url, emulator, devices: 50)
                // Opened before the database turns read-only: this session stays writable.
                let database = PostgresClient(connectionString: url, maximumConnections: 1, applicationName: "pushizo-test-reader")
                let worker = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_LOG_LEVEL": "warning"])
                defer {
                    if worker.process.isRunning { worker.process.terminate() }
                    worker.pipe.fileHandleForReading.readabilityHandler = nil
                }
                let first = try await TenantIsolationEndToEndTests.notify(database, app, target: #"{"all": true}"#)
                try await Self.until("the first notification is sent") { try await Self.count(database, Self.sentSQL, [first]) == 50 }

                try await Self.admin(url, "ALTER DATABASE \(name) SET default_transaction_read_only = on")
                try await Self.admin(
                    url, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'pushizo-worker%'",
                    [name])
                let second = try await TenantIsolationEndToEndTests.notify(database, app, target: #"{"all": true}"#)
                // The worker met the read-only database (refused at connect, or answered 25006) in several of its
                // loops' calls: long enough for a pool to have reconnected every thread it uses.
                try await Self.until("the worker reports the read-only database") {
                    worker.output.lines.filter { $0.contains("read-only") }.count >= 10
                }
                try await Self.admin(url, "ALTER DATABASE \(name) RESET default_transaction_read_only")
                try await Self.until("the second notification is sent") { try await Self.count(database, Self.sentSQL, [second]) == 50 }
                #expect(try await Self.count(database, Self.failedSQL) == 0)
                #expect(try await Self.count(database, "SELECT count(*) AS n FROM notifications WHERE status = 'failed'") == 0)
                worker.process.terminate()
                try await onThread { worker.process.waitUntilExit() }
                #expect(worker.process.terminationStatus == 0)
                await database.shutdown()
            }
        }
    }

    /// The database's `statement_timeout` is 5 ms when the worker starts (too short for a broadcast's chunk), and
    /// is raised to 1 s once the worker's sessions are open; the worker sets its own timeouts, so the broadcast is
    /// expanded and sent without a restart, and nothing is failed.
    @Test func aDatabasesStatementTimeoutNeitherStarvesNorSticksToTheWorker() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let name = try await Self.databaseName(url)
                let app = try await Self.seedApp(url, emulator, devices: 2_000)
                let database = PostgresClient(connectionString: url, maximumConnections: 1, applicationName: "pushizo-test-reader")
                try await Self.admin(url, "ALTER DATABASE \(name) SET statement_timeout = '5ms'")
                let worker = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator, environment: ["PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_LOG_LEVEL": "warning"])
                defer {
                    if worker.process.isRunning { worker.process.terminate() }
                    worker.pipe.fileHandleForReading.readabilityHandler = nil
                }
                let broadcast = try await TenantIsolationEndToEndTests.notify(database, app, target: #"{"all": true}"#)
                try await Self.until("the worker's sessions are open") {
                    try await Self.count(
                        database, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'pushizo-worker'",
                        [name]) >= 2
                }
                try await Self.admin(url, "ALTER DATABASE \(name) SET statement_timeout = '1s'")
                try await Self.until("the broadcast is sent") { try await Self.count(database, Self.sentSQL, [broadcast]) == 2_000 }
                #expect(try await Self.count(database, Self.failedSQL) == 0)
                worker.process.terminate()
                try await onThread { worker.process.waitUntilExit() }
                #expect(worker.process.terminationStatus == 0)
                await database.shutdown()
                try await Self.admin(url, "ALTER DATABASE \(name) RESET statement_timeout")
            }
        }
    }

    /// Runs `script` with bash, `arguments` (no spaces or quotes in them) as `$1...`, through `system(3)` (a
    /// `Process` started and awaited on the same plain thread was never seen to exit); returns its status.
    static func bash(_ script: String, _ arguments: [String]) throws -> Int32 {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-own-\(UUID().uuidString).sh").path
        try script.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        return system((["/bin/bash", file] + arguments).joined(separator: " "))
    }

    /// A PostgreSQL of its own (unix socket only, named by a free port number) at `maxConnections`, with no slot
    /// reserved for superusers, migrated, for as long as `body` runs; `body` gets its connection string.
    static func withOwnServer<T: Sendable>(maxConnections: Int, _ body: @Sendable (String) async throws -> T) async throws -> T {
        let port = try freePort()
        let dir = "/tmp/pushizo-own-\(port)"
        let script = """
            set -euo pipefail
            dir=$1; port=$2; max=$3
            bindir=$(pg_config --bindir 2>/dev/null || true)
            [ -x "$bindir/initdb" ] || bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
            as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
            rm -rf "$dir"; mkdir -p "$dir"
            if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
            as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
            as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 120 -o "-k $dir -p $port -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=$max -c superuser_reserved_connections=0" start >/dev/null
            as_pg "$bindir/psql" -h "$dir" -p "$port" -U postgres -d postgres -qc "CREATE DATABASE pushizo" >/dev/null
            """
        let stop = """
            dir=$1
            bindir=$(pg_config --bindir 2>/dev/null || true)
            [ -x "$bindir/initdb" ] || bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
            if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
            else "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1; fi
            rm -rf "$dir"
            """
        defer { _ = try? onSocketThreadSync { try Self.bash(stop, [dir]) } }
        let status = try await onThread { try Self.bash(script, [dir, "\(port)", "\(maxConnections)"]) }
        try #require(status == 0, "could not start a PostgreSQL of its own")
        let url = "host=\(dir) port=\(port) user=postgres dbname=pushizo"
        try await onThread {
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-migrate")
            defer { connection.close() }
            _ = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: connection)
        }
        return try await body(url)
    }

    /// A worker whose pool (8 connections, plus `LISTEN`) is larger than the server's `max_connections` (5, one
    /// held by the test) leaves: it works with the connections it got, and once it has them no call of its loops
    /// fails for want of a slot, because a call that finds no connection goes to a thread that has one instead of
    /// retrying a connect (its paced attempts are spaced by a backoff of 1 s doubling to 60 s).
    @Test func aWorkerAtTheConnectionLimitWorksWithWhatItGotAndStopsAsking() async throws {
        try await Self.withOwnServer(maxConnections: 5) { url in
            try await EmulatorHarness.with { emulator in
                let app = try await Self.seedApp(url, emulator, devices: 300)
                let database = PostgresClient(connectionString: url, maximumConnections: 1, applicationName: "pushizo-test-reader")
                _ = try await database.query("SELECT 1")
                let worker = try SmallNotificationEndToEndTests.startWorker(
                    url, emulator,
                    environment: [
                        "PUSHIZO_EXIT_WHEN_DRAINED": "false", "PUSHIZO_LOG_LEVEL": "warning", "PUSHIZO_DATABASE_CONNECTIONS": "8",
                    ])
                defer {
                    if worker.process.isRunning { worker.process.terminate() }
                    worker.pipe.fileHandleForReading.readabilityHandler = nil
                }
                let first = try await TenantIsolationEndToEndTests.notify(database, app, target: #"{"all": true}"#)
                try await Self.until("the first broadcast is sent") { try await Self.count(database, Self.sentSQL, [first]) == 300 }
                let mark = worker.output.lines.count
                for _ in 0..<3 {
                    let next = try await TenantIsolationEndToEndTests.notify(database, app, target: #"{"all": true}"#)
                    try await Self.until("the next broadcast is sent") { try await Self.count(database, Self.sentSQL, [next]) == 300 }
                }
                worker.process.terminate()
                try await onThread { worker.process.waitUntilExit() }
                #expect(worker.process.terminationStatus == 0)
                // Planner statistics are analyzed on a connection of their own, opened for the purpose: refused, it
                // logs once a minute and tries again after a pause; that is its own budget line, not the pool's. So
                // is the heartbeat's connection (a refused beat or stop mark is logged and tried again).
                let refusedCalls = worker.output.lines.dropFirst(mark).filter {
                    $0.contains("too many clients") && !$0.contains("planner statistics") && !$0.contains("worker_heartbeats")
                        && !$0.contains("heartbeat failed")
                }
                #expect(refusedCalls.isEmpty, "\(refusedCalls.prefix(3))")
                #expect(try await Self.count(database, Self.failedSQL) == 0)
                await database.shutdown()
            }
        }
    }
}
