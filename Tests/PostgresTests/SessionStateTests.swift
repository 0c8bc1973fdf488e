import Foundation
import SocketTestSupport
import Testing
@testable import Postgres

/// The session-level states of a real server: a database turned read-only and back, a database's tiny
/// `statement_timeout`, and a server with no connection slot left.
@Suite("Session states")
struct SessionStateTests {
    /// A session that may write even while the database is read-only by default.
    private static func admin(_ url: String) throws -> PostgresConnection {
        let connection = try PostgresConnection(
            connectionString: url + " target_session_attrs=any", applicationName: "pushizo-test-admin")
        try connection.execute("SET default_transaction_read_only = off")
        return connection
    }

    private static func databaseName(_ url: String) throws -> String {
        let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
        defer { connection.close() }
        return try connection.query("SELECT current_database() AS name")[0].decode(String.self, "name")
    }

    /// The database turns read-only (as a demoted primary is) and the pool's sessions are cut: writes fail while
    /// it stays so, and succeed again once it is writable, without anyone cutting the sessions again. The pool
    /// never keeps a read-only session: a write answered with 25006 drops it, and a new one is refused at connect.
    @Test func aPoolRecoversFromAReadOnlyDatabaseByItself() async throws {
        try await TestDatabase.withFreshDatabase { url in
            let name = try await onThread { try Self.databaseName(url) }
            let applicationName = "pushizo-test-ro-\(UUID().uuidString.prefix(8))"
            let client = PostgresClient(connectionString: url, maximumConnections: 2, applicationName: applicationName)
            _ = try await client.query("CREATE TABLE t (n int)")
            _ = try await client.query("INSERT INTO t VALUES (1)")
            try await onThread {
                let admin = try Self.admin(url)
                defer { admin.close() }
                try admin.execute("ALTER DATABASE \(name) SET default_transaction_read_only = on")
                _ = try admin.query(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1",
                    [applicationName])
            }
            // Read-only now: every write fails, none as a row's fault.
            for _ in 0..<3 {
                let error = await #expect(throws: PostgresError.self) { try await client.query("INSERT INTO t VALUES (2)") }
                #expect(error?.isSessionLevel == true, "\(String(describing: error))")
            }
            // A session let in anyway (target_session_attrs=any) answers 25006, a reason to drop it.
            let direct = try await onThread { () -> PostgresError? in
                let connection = try PostgresConnection(connectionString: url + " target_session_attrs=any")
                defer { connection.close() }
                do { _ = try connection.query("INSERT INTO t VALUES (3)") } catch let error as PostgresError { return error }
                return nil
            }
            #expect(direct?.sqlState == "25006")
            #expect(direct?.isConnectionProblem == true)

            try await onThread {
                let admin = try Self.admin(url)
                defer { admin.close() }
                try admin.execute("ALTER DATABASE \(name) RESET default_transaction_read_only")
            }
            var written = false
            let deadline = ContinuousClock.now + .seconds(90)
            while !written && ContinuousClock.now < deadline {
                do {
                    _ = try await client.query("INSERT INTO t VALUES (4)")
                    written = true
                } catch {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(written, "the pool never wrote again after the database became writable")
            await client.shutdown()
        }
    }

    /// A database's `statement_timeout` of 1 ms (seen only by sessions started after it was set) does not reach
    /// the worker's sessions: they set their own timeouts at connect.
    @Test func sessionsSetTheirOwnTimeouts() async throws {
        try await TestDatabase.withFreshDatabase { url in
            let name = try await onThread { try Self.databaseName(url) }
            try await onThread {
                let admin = try Self.admin(url)
                defer { admin.close() }
                try admin.execute(
                    "ALTER DATABASE \(name) SET statement_timeout = '1ms'; ALTER DATABASE \(name) SET lock_timeout = '1ms'; "
                        + "ALTER DATABASE \(name) SET idle_in_transaction_session_timeout = '1ms'")
            }
            let client = PostgresClient(connectionString: url, maximumConnections: 1)
            // A connect may still fail on the database's 1 ms before the session's own timeouts are set: retried.
            var settings: [String: String] = [:]
            for _ in 0..<50 where settings.isEmpty {
                settings = (try? await client.withConnection { connection in
                    let rows = try connection.query(
                        """
                        SELECT name, setting FROM pg_settings
                        WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout')
                        """)
                    var settings: [String: String] = [:]
                    for row in rows { settings[try row.decode(String.self, "name")] = try row.decode(String.self, "setting") }
                    _ = try connection.query("SELECT pg_sleep(0.01)")
                    return settings
                }) ?? [:]
            }
            #expect(settings == ["statement_timeout": "300000", "lock_timeout": "60000", "idle_in_transaction_session_timeout": "300000"])
            await client.shutdown()
        }
    }

    /// A role at its connection limit: the refusal carries SQLSTATE 53300, and once the pool has met it, a round of
    /// eight calls needing eight new connections makes at most a few attempts (one at a time, each further one
    /// after a doubled delay of at least a second), not eight; the others are turned away naming the refusal.
    @Test func aPoolAtTheConnectionLimitProbesOneAttemptAtATime() async throws {
        try await TestDatabase.withFreshDatabase { url in
            let role = "pushizo_limited_\(UUID().uuidString.prefix(8).lowercased())"
            try await onThread {
                let admin = try Self.admin(url)
                defer { admin.close() }
                try admin.execute("CREATE ROLE \(role) LOGIN CONNECTION LIMIT 1")
            }
            defer {
                _ = try? onSocketThreadSync {
                    let admin = try Self.admin(url)
                    defer { admin.close() }
                    _ = try admin.query("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE usename = $1", [role])
                    try admin.execute("DROP ROLE IF EXISTS \(role)")
                }
            }
            let limited = url + " user=\(role)"
            // Holds the role's only slot.
            let holder = PostgresClient(connectionString: limited, maximumConnections: 1)
            _ = try await holder.query("SELECT 1")
            let client = PostgresClient(connectionString: limited, maximumConnections: 8)
            let first = await #expect(throws: PostgresError.self) { try await client.query("SELECT 1") }
            #expect(first?.sqlState == "53300", "\(String(describing: first))")
            #expect(first?.code == .connectionFailed)

            let errors = await withTaskGroup(of: PostgresError?.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        do { _ = try await client.query("SELECT 1") } catch let error as PostgresError { return error } catch {}
                        return nil
                    }
                }
                var errors: [PostgresError] = []
                for await error in group { if let error { errors.append(error) } }
                return errors
            }
            #expect(errors.count == 8)
            let attempts = errors.filter { $0.message.hasPrefix("connection to server") }
            let turnedAway = errors.filter { !$0.message.hasPrefix("connection to server") }
            #expect(attempts.count <= 3, "\(attempts.count) attempts for 8 calls")
            #expect(turnedAway.allSatisfy { $0.code == .connectionFailed && $0.message.contains("too many connections") })
            await client.shutdown()
            await holder.shutdown()
        }
    }
}
