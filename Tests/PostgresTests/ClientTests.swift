import Foundation
import Synchronization
import Testing
@testable import Postgres

/// Counts bodies running at once and remembers the most.
final class Gauge: Sendable {
    private let state = Mutex<(now: Int, peak: Int)>((0, 0))
    func enter() { state.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) } }
    func leave() { state.withLock { $0.now -= 1 } }
    var peak: Int { state.withLock { $0.peak } }
}

@Suite("PostgresClient and PostgresListener")
struct ClientTests {
    /// Session count of an application name, from pg_stat_activity.
    private static func sessions(_ url: String, applicationName: String) throws -> Int {
        let admin = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
        let row = try admin.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1", [applicationName]).first
        return try row?.decode(Int.self, "n") ?? 0
    }

    @Test func concurrentCallsShareAtMostMaximumConnections() async throws {
        let url = try TestDatabase.baseConnectionString()
        let name = "pushizo-test-pool-\(UUID().uuidString.prefix(8))"
        let client = PostgresClient(connectionString: url, maximumConnections: 3, applicationName: name)
        let gauge = Gauge()
        let pids = try await withThrowingTaskGroup(of: Int32.self) { group in
            for i in 0..<24 {
                group.addTask {
                    try await client.withConnection { connection in
                        gauge.enter()
                        defer { gauge.leave() }
                        let row = try #require(try connection.query(
                            "SELECT pg_backend_pid() AS pid, $1::int AS i, pg_sleep(0.02)", [i]).first)
                        #expect(try row.decode(Int.self, "i") == i)
                        return try row.decode(Int32.self, "pid")
                    }
                }
            }
            var pids: [Int32] = []
            for try await pid in group { pids.append(pid) }
            return pids
        }
        #expect(pids.count == 24)
        #expect(Set(pids).count <= 3)
        #expect(gauge.peak <= 3)
        #expect(try await onThread { try Self.sessions(url, applicationName: name) } <= 3)
        await client.shutdown()
        // A backend ends a moment after its client closes the connection: poll, do not sample once.
        #expect(try await onThread { try Self.sessionsGone(url, applicationName: name) })
        let late = await #expect(throws: PostgresError.self) { try await client.withConnection { _ in 1 } }
        #expect(late?.code == .shutdown)
    }

    @Test func reconnectsAfterBackendIsTerminated() async throws {
        let url = try TestDatabase.baseConnectionString()
        let client = PostgresClient(connectionString: url, maximumConnections: 1, applicationName: "pushizo-test-reconnect")
        let first = try await client.withConnection { $0.processID }
        try await onThread {
            let admin = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
            // The timeout form waits until the backend is gone (PostgreSQL 14+).
            let row = try admin.query("SELECT pg_terminate_backend($1, 10000) AS ok", [first]).first
            #expect(try row?.decode(Bool.self, "ok") == true)
        }
        // The call that finds the connection dead gets the error; the next one reconnects.
        let lost = await #expect(throws: PostgresError.self) {
            try await client.withConnection { try $0.query("SELECT 1 AS one").count }
        }
        #expect(lost?.isConnectionProblem == true)
        let second = try await client.withConnection { connection in
            (connection.processID, try connection.query("SELECT 1 AS one").first?.decode(Int.self, "one"))
        }
        #expect(second.0 != first)
        #expect(second.1 == 1)
        #expect(try await client.query("SELECT $1::text AS v", ["q"]).first?.decode(String.self, "v") == "q")
        #expect(try await client.preparedQuery("SELECT $1::int AS v", [5]).first?.decode(Int.self, "v") == 5)
        await client.shutdown()
    }

    /// A notification's sender is recognised as one of the client's sessions while that session is open.
    @Test func pooledSessionsAreKnownByProcessID() async throws {
        let url = try TestDatabase.baseConnectionString()
        let client = PostgresClient(connectionString: url, maximumConnections: 1, applicationName: "pushizo-test-sessions")
        let own = try await client.withConnection { $0.processID }
        #expect(own != 0)
        #expect(client.isPooledSession(processID: own))
        let other = try await onThread {
            let admin = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            return admin.processID
        }
        #expect(!client.isPooledSession(processID: other))
        client.forgetSessions()
        #expect(!client.isPooledSession(processID: own))
        // Known again once the connection is used.
        #expect(try await client.withConnection { $0.processID } == own)
        #expect(client.isPooledSession(processID: own))
        await client.shutdown()
        #expect(!client.isPooledSession(processID: own))
    }

    @Test func cancellingAQueuedCallRemovesIt() async throws {
        let url = try TestDatabase.baseConnectionString()
        let client = PostgresClient(connectionString: url, maximumConnections: 1)
        let gauge = Gauge()
        async let busy = client.withConnection { connection in
            gauge.enter()
            return try connection.query("SELECT pg_sleep(0.5)").count
        }
        while gauge.peak == 0 { try await Task.sleep(for: .milliseconds(5)) }
        // The only connection is busy, so this call waits in the queue until cancelled.
        let queued = Task { try await client.withConnection { _ in "ran" } }
        queued.cancel()
        await #expect(throws: CancellationError.self) { try await queued.value }
        #expect(try await busy == 1)
        #expect(try await client.withConnection { _ in "ran" } == "ran")
        await client.shutdown()
    }

    @Test func connectFailureIsReportedWithoutPassword() async throws {
        let client = PostgresClient(
            connectionString: "host=127.0.0.1 port=1 password=NotShown connect_timeout=2", maximumConnections: 2)
        for _ in 0..<2 {
            let error = await #expect(throws: PostgresError.self) { try await client.withConnection { _ in 0 } }
            #expect(error?.code == .connectionFailed)
            #expect(error?.message.contains("NotShown") == false)
        }
        await client.shutdown()
    }

    @Test func openTransactionIsRolledBackBeforeReuse() async throws {
        try await TestDatabase.withFreshDatabase { url in
            let client = PostgresClient(connectionString: url, maximumConnections: 1)
            try await client.withConnection { try $0.execute("CREATE TABLE t (id int)") }
            struct Abandon: Error {}
            await #expect(throws: Abandon.self) {
                try await client.withConnection { connection in
                    try connection.execute("BEGIN")
                    _ = try connection.query("INSERT INTO t VALUES ($1)", [1])
                    throw Abandon()
                }
            }
            let state = try await client.withConnection { connection in
                (connection.isInTransaction, try connection.query("SELECT count(*) AS n FROM t").first?.decode(Int.self, "n"))
            }
            #expect(state.0 == false)
            #expect(state.1 == 0)
            await client.shutdown()
        }
    }

    @Test func listenerDeliversNotificationsAndReconnects() async throws {
        let url = try TestDatabase.baseConnectionString()
        let channel = "pushizo Wake \(UUID().uuidString.prefix(8))"
        let applicationName = "pushizo-test-listen-\(UUID().uuidString.prefix(8))"
        let listener = PostgresListener(connectionString: url, channels: [channel, "other"], applicationName: applicationName)
        let collector = EventCollector(listener.events())
        try await collector.waitUntil("first .reconnected") { $0.contains(.reconnected) }

        let senderPID = try await onThread { () -> Int32 in
            let sender = try PostgresConnection(connectionString: url)
            _ = try sender.query("SELECT pg_notify($1, $2)", [channel, "first ✓"])
            return sender.processID
        }
        try await collector.waitUntil("the first notification") {
            $0.contains(.notification(PostgresNotification(channel: channel, payload: "first ✓", processID: senderPID)))
        }

        // Kill the listening session: the listener reconnects, says so, and listens again.
        try await onThread {
            let admin = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-admin")
            let killed = try admin.query(
                "SELECT pg_terminate_backend(pid, 10000) AS ok FROM pg_stat_activity WHERE application_name = $1",
                [applicationName])
            #expect(killed.count == 1)
        }
        try await collector.waitUntil("a second .reconnected") { $0.filter { $0 == .reconnected }.count >= 2 }
        let secondPID = try await onThread { () -> Int32 in
            let sender = try PostgresConnection(connectionString: url)
            _ = try sender.query("SELECT pg_notify($1, $2)", [channel, "after reconnect"])
            return sender.processID
        }
        try await collector.waitUntil("a notification after reconnecting") {
            $0.last == .notification(PostgresNotification(channel: channel, payload: "after reconnect", processID: secondPID))
        }

        listener.shutdown()
        await collector.finished()  // The stream ends, so this returns.
        #expect(try await onThread { try Self.sessionsGone(url, applicationName: applicationName) })
    }

    @Test func listenerShutdownWhileServerUnreachable() async throws {
        let listener = PostgresListener(connectionString: "host=127.0.0.1 port=1 connect_timeout=30", channels: ["x"])
        let collector = EventCollector(listener.events())
        // Let it fail at least once so it sits in backoff, then stop it: the stream must end.
        for _ in 0..<200 where listener.lastError == nil { try await Task.sleep(for: .milliseconds(10)) }
        #expect(listener.lastError?.code == .connectionFailed)
        listener.shutdown()
        await collector.finished()
        #expect(collector.snapshot.isEmpty)
    }

    /// Waits (bounded) for the listener's session to disappear after shutdown.
    private static func sessionsGone(_ url: String, applicationName: String) throws -> Bool {
        for _ in 0..<200 {
            if try sessions(url, applicationName: applicationName) == 0 { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }
}
