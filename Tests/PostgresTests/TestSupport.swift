import Foundation
import SocketTestSupport
import Synchronization
import Testing
@testable import Postgres

/// Helpers for tests against a real PostgreSQL named by `PUSHIZO_TEST_DATABASE_URL`.
enum TestDatabase {
    static func baseConnectionString() throws -> String {
        guard let value = ProcessInfo.processInfo.environment["PUSHIZO_TEST_DATABASE_URL"], !value.isEmpty else {
            throw PostgresError(
                code: .connectionFailed,
                message: "PUSHIZO_TEST_DATABASE_URL is not set: run through `make test` (or start "
                    + "scripts/pg-throwaway.sh and export the connection string it prints)")
        }
        return value
    }

    /// `base` pointing at database `name` instead (works for key=value strings and URLs).
    static func connectionString(_ base: String, database name: String) -> String {
        if base.contains("://"), var components = URLComponents(string: base) {
            components.path = "/" + name
            return components.string ?? base
        }
        return base + " dbname=" + name
    }

    /// Creates a fresh database, runs `body` with its connection string, drops it afterwards.
    static func withFreshDatabase<T: Sendable>(_ body: @Sendable (String) async throws -> T) async throws -> T {
        let base = try baseConnectionString()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            try admin.execute("CREATE DATABASE \(name)")
        }
        do {
            let value = try await body(connectionString(base, database: String(name)))
            try await drop(base: base, name: String(name))
            return value
        } catch {
            try? await drop(base: base, name: String(name))
            throw error
        }
    }

    private static func drop(base: String, name: String) async throws {
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        }
    }
}

/// Runs blocking code on a fresh thread, so tests never block Swift's small cooperative pool (the PostgresTests
/// spelling of ``onSocketThread(_:)``).
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await onSocketThread(body)
}

/// Collects a listener's events in the background so tests can wait for a condition with a hang guard.
final class EventCollector: Sendable {
    private final class Box: Sendable {
        let events = Mutex<[PostgresListener.Event]>([])
    }
    private let box: Box
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<PostgresListener.Event>) {
        let box = Box()
        self.box = box
        task = Task {
            for await event in stream { box.events.withLock { $0.append(event) } }
        }
    }

    var snapshot: [PostgresListener.Event] { box.events.withLock { $0 } }

    /// Waits until `predicate` holds for the events so far; fails the test after `limit` seconds (a hang
    /// guard, not a timing assertion).
    func waitUntil(_ what: String, limit: Double = 20, _ predicate: ([PostgresListener.Event]) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(limit)
        while ContinuousClock.now < deadline {
            if predicate(snapshot) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("timed out waiting for \(what); events: \(snapshot)")
        throw CancellationError()
    }

    func finished() async { await task.value }
}
