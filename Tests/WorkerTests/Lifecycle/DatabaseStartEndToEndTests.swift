import Foundation
import Postgres
import SocketTestSupport
import Testing

/// The executable against a real PostgreSQL that refuses it: a refusal an operator must fix (a bad password, a role
/// that may not log in, no such database, no right to connect or to the worker's tables, a connection string libpq
/// cannot parse) ends `run`, `check`, `status` and `migrate` with exit 78 (EX_CONFIG) and libpq's message, the
/// password masked; a server that cannot be reached is waited for, with `STATUS=` lines saying so.
@Suite("database refusals at start")
struct DatabaseStartEndToEndTests {
    static let password = "Sup3rS3cret"

    /// Runs `pushizo-worker <arguments>` until it exits; its exit status and stderr. Hang guard: killed after
    /// 3 minutes (a worker that retries instead of exiting then fails the status expectation).
    static func run(_ arguments: [String], databaseURL: String) async throws -> (status: Int32, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = arguments
        process.environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "PATH": "/usr/bin:/bin",
            "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
        ]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = errors
        try process.run()
        let guardKill = Task {
            try await Task.sleep(for: .seconds(180))
            kill(process.processIdentifier, SIGKILL)
        }
        defer { guardKill.cancel() }
        let text = try await onThread { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        return (process.terminationStatus, text)
    }

    static func expectRefused(
        _ outcome: (status: Int32, stderr: String), saying words: [String], key: String = "PUSHIZO_DATABASE_URL",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(outcome.status == 78, "stderr: \(outcome.stderr)", sourceLocation: sourceLocation)
        #expect(outcome.stderr.contains(key), "stderr: \(outcome.stderr)", sourceLocation: sourceLocation)
        for word in words {
            #expect(outcome.stderr.contains(word), "\(word) missing from: \(outcome.stderr)", sourceLocation: sourceLocation)
        }
        #expect(!outcome.stderr.contains(password), "the password in: \(outcome.stderr)", sourceLocation: sourceLocation)
    }

    /// Runs `body` with a role created by the cluster's superuser (`attributes`, e.g. `NOLOGIN`), dropped afterwards.
    static func withRole<T: Sendable>(
        _ attributes: String, _ body: @Sendable (String) async throws -> T
    ) async throws -> T {
        let base = try TestDatabase.baseConnectionString()
        let role = "start_" + UUID().uuidString.prefix(8).lowercased()
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            try admin.execute("CREATE ROLE \(role) \(attributes) PASSWORD '\(password)'")
        }
        defer {
            _ = try? onSocketThreadSync {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("DROP OWNED BY \(role); DROP ROLE \(role)")
            }
        }
        return try await body(role)
    }

    /// A role that may not log in: SQLSTATE 28000, "role ... is not permitted to log in", for every command that
    /// connects.
    @Test(arguments: ["run", "check", "status", "migrate"])
    func aRoleThatMayNotLogInExits78(command: String) async throws {
        try await Self.withRole("NOLOGIN") { role in
            let url = try TestDatabase.baseConnectionString() + " user=\(role) password=\(Self.password)"
            Self.expectRefused(try await Self.run([command], databaseURL: url), saying: ["is not permitted to log in", "28000"])
        }
    }

    /// A database that does not exist: SQLSTATE 3D000.
    @Test(arguments: ["run", "check"])
    func anUnknownDatabaseExits78(command: String) async throws {
        let url = try TestDatabase.baseConnectionString() + " dbname=no_such_db_\(UUID().uuidString.prefix(8).lowercased())"
            + " password=\(Self.password)"
        Self.expectRefused(try await Self.run([command], databaseURL: url), saying: ["does not exist", "3D000"])
    }

    /// A wrong password (SQLSTATE 28P01). The test cluster trusts every local connection, so the role gets a
    /// `pg_hba.conf` line of its own asking for its password, first in the file, for as long as the test runs.
    @Test func aWrongPasswordExits78() async throws {
        try await Self.withRole("LOGIN") { role in
            let base = try TestDatabase.baseConnectionString()
            let hbaFile = try await onThread {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                return try admin.query("SHOW hba_file")[0]["hba_file"] ?? ""
            }
            let original = try String(contentsOfFile: hbaFile, encoding: .utf8)
            func reload(_ text: String) async throws {
                try text.write(toFile: hbaFile, atomically: false, encoding: .utf8)
                try await onThread {
                    let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                    defer { admin.close() }
                    _ = try admin.query("SELECT pg_reload_conf()")
                }
            }
            try await reload("local all \(role) scram-sha-256\nhost all \(role) all scram-sha-256\n" + original)
            do {
                // pg_reload_conf() only signals the postmaster: wait until the new line is in force (hang guard).
                let url = base + " user=\(role) password=Wr0ng\(Self.password)"
                for _ in 0..<200 {
                    let refused = try await onThread { () -> Bool in
                        do { try PostgresConnection(connectionString: url).close(); return false } catch { return true }
                    }
                    if refused { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                for command in ["run", "status"] {
                    let outcome = try await Self.run([command], databaseURL: url)
                    Self.expectRefused(outcome, saying: ["password authentication failed", "28P01"])
                    #expect(!outcome.stderr.contains("Wr0ng"), "\(outcome.stderr)")
                }
            } catch {
                try? await reload(original)
                throw error
            }
            try await reload(original)
        }
    }

    /// A connection string libpq cannot parse: its own message, with only the password masked, before anything
    /// connects.
    @Test(arguments: [
        ("run", "host=127.0.0.1 port=1 password=Sup3r S3cret"),
        ("check", "host=127.0.0.1 port=1 password=Sup3r S3cret"),
        ("status", "postgresql://pushizo:Sup3r%2#S3cret@127.0.0.1:1/db"),
        ("migrate", "postgresql://pushizo@127.0.0.1:1/db?password=Sup3r&S3cret&connect_timeout=1"),
    ])
    func anUnparsableConnectionStringExits78(command: String, url: String) async throws {
        let outcome = try await Self.run([command], databaseURL: url)
        #expect(outcome.status == 78, "\(outcome.stderr)")
        #expect(outcome.stderr.contains("PUSHIZO_DATABASE_URL") && outcome.stderr.contains("invalid connection string: "))
        #expect(outcome.stderr.contains("\"********\""), "\(outcome.stderr)")
        for secret in ["Sup3r", "S3cret"] { #expect(!outcome.stderr.contains(secret), "\(outcome.stderr)") }
    }

    /// A connection string libpq parses but whose value it refuses (`sslmode=bogus`): libpq's message naming the
    /// setting, exit 78 before anything connects, the same for every command; `run` does not wait on it.
    @Test(arguments: ["run", "check", "status", "migrate", "pause --fleet", "retry --notification 00000000-0000-0000-0000-000000000001"])
    func aRefusedOptionValueExits78(command: String) async throws {
        let url = "postgresql://pushizo:Sup3r@127.0.0.1:1/db?connect_timeout=1&sslmode=bogus"
        let outcome = try await Self.run(command.split(separator: " ").map(String.init), databaseURL: url)
        #expect(outcome.status == 78, "\(outcome.stderr)")
        #expect(outcome.stderr.contains("PUSHIZO_DATABASE_URL"), "\(outcome.stderr)")
        #expect(outcome.stderr.contains(#"invalid sslmode value: "bogus""#), "\(outcome.stderr)")
        #expect(!outcome.stderr.contains("Sup3r"), "\(outcome.stderr)")
    }

    /// No right to connect to the database (SQLSTATE 42501 at connect), and a role that connects but lacks the
    /// worker's table rights (not a member of pushizo_worker): 42501 before the first claim.
    @Test func aRoleWithoutTheWorkersRightsExits78() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withRole("LOGIN") { role in
                let asRole = url + " user=\(role) password=\(Self.password)"
                for command in ["run", "check"] {
                    Self.expectRefused(
                        try await Self.run([command], databaseURL: asRole),
                        saying: ["lacks rights the worker needs", "SELECT on deliveries", "pushizo_worker", "42501"])
                }
                let database = try #require(url.split(separator: " ").last { $0.hasPrefix("dbname=") }?.dropFirst(7))
                try await onThread {
                    let admin = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
                    defer { admin.close() }
                    try admin.execute("REVOKE CONNECT ON DATABASE \(database) FROM PUBLIC")
                }
                Self.expectRefused(
                    try await Self.run(["run"], databaseURL: asRole), saying: ["permission denied for database", "42501"])
            }
        }
    }

    /// An operator command run as a role without the schema owner's rights: exit 78 naming the key, libpq's
    /// message on the first line and the advice to run as the owner as the hint, on a line of its own.
    @Test func aRefusedOperatorCommandPrintsTheHintOnItsOwnLine() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withRole("LOGIN") { role in
                let outcome = try await Self.run(["pause", "--fleet"], databaseURL: url + " user=\(role) password=\(Self.password)")
                Self.expectRefused(outcome, saying: ["permission denied", "42501"])
                let lines = outcome.stderr.split(separator: "\n").map(String.init)
                #expect(lines.first?.contains("permission denied") == true, "\(outcome.stderr)")
                #expect(lines.first?.lowercased().contains("hint") == false, "\(outcome.stderr)")
                #expect(
                    lines.contains { $0.hasPrefix("  hint: ") && $0.contains("operator commands run as the schema owner") },
                    "\(outcome.stderr)")
            }
        }
    }

    /// Nothing listens: the worker keeps trying, tells systemd why on every attempt and logs it, and never claims
    /// readiness.
    @Test func anUnreachableServerIsWaitedFor() async throws {
        let socket = try SystemdNotifyTests.NotifySocket()
        let (worker, errors) = try SystemdNotifyTests.start(
            databaseURL: "host=127.0.0.1 port=1 dbname=pushizo connect_timeout=2 password=\(Self.password)",
            notifySocket: socket.path)
        defer { if worker.isRunning { kill(worker.processIdentifier, SIGKILL) } }
        let lines = try await SystemdNotifyTests.collect(socket) { lines in
            lines.filter { $0.hasPrefix("STATUS=waiting for PostgreSQL: ") }.count >= 3
        }
        let waiting = lines.filter { $0.hasPrefix("STATUS=waiting for PostgreSQL: ") }
        #expect(waiting.count >= 3, "\(lines)")
        #expect(waiting.allSatisfy { $0.contains("Connection refused") }, "\(waiting)")
        #expect(!lines.contains("READY=1"))
        #expect(!lines.joined().contains(Self.password))
        #expect(worker.isRunning)
        kill(worker.processIdentifier, SIGKILL)
        let stderr = try await onThread {
            worker.waitUntilExit()
            return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        #expect(stderr.contains("waiting for PostgreSQL; retrying"), "\(stderr)")
        #expect(!stderr.contains(Self.password))
    }

    /// SIGTERM while the worker waits for PostgreSQL at start: the wait ends, the worker never starts (no
    /// `worker running`), and it exits 0, a clean stop (nothing was claimed), not after the shutdown timeout with
    /// a status the units restart on. The shutdown timeout is set longer than the hang guard, so a stop that waits
    /// it out is killed and fails the status expectation.
    @Test func aStopWhileWaitingForTheServerEndsTheWaitCleanly() async throws {
        let socket = try SystemdNotifyTests.NotifySocket()
        let (worker, errors) = try SystemdNotifyTests.start(
            databaseURL: "host=127.0.0.1 port=1 dbname=pushizo connect_timeout=2", notifySocket: socket.path,
            extra: ["PUSHIZO_SHUTDOWN_TIMEOUT": "600"])
        let guardKill = Task {
            try await Task.sleep(for: .seconds(180))
            kill(worker.processIdentifier, SIGKILL)
        }
        defer { guardKill.cancel() }
        // Read stderr until the wait is logged, then stop the worker and read the rest until it exits.
        let waiting = try await onThread {
            var text = ""
            while !text.contains("waiting for PostgreSQL; retrying") {
                let chunk = errors.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return text
        }
        #expect(waiting.contains("waiting for PostgreSQL; retrying"), "\(waiting)")
        kill(worker.processIdentifier, SIGTERM)
        let stderr = try await onThread {
            let rest = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            worker.waitUntilExit()
            return waiting + rest
        }
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0, "\(worker.terminationStatus): \(stderr)")
        #expect(stderr.contains("stop requested"), "\(stderr)")
        #expect(!stderr.contains("worker running"), "\(stderr)")
        #expect(!socket.pending().contains("READY=1"))
    }
}
