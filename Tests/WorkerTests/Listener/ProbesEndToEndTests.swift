import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// `GET /healthz` and `GET /readyz` of a real `pushizo-worker run` over real HTTP, against a PostgreSQL of the
/// test's own (`scripts/pg-throwaway.sh`), which it migrates, stops and starts again.
@Suite("Health and readiness probes of pushizo-worker run")
struct ProbesEndToEndTests {
    /// Not ready while the worker waits for its PostgreSQL at start, ready once the start-up check passed and the
    /// loops reached the database, not ready while PostgreSQL is stopped, ready again once it is back; alive
    /// throughout; `HEAD` as `GET` without a body.
    @Test func readinessFollowsTheDatabaseAndLivenessHolds() async throws {
        let directory = "/tmp/pushizo-probes-\(UUID().uuidString.prefix(8))"
        let port = try #require(ReplicatedCluster.freePorts(1).first, "no free loopback port below 32768")
        defer {
            _ = try? ReplicatedCluster.script("pg-throwaway.sh", ["stop", directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
        // A migrated database of the test's own, stopped before the worker starts.
        let url = try await onThread {
            let url = try ReplicatedCluster.script("pg-throwaway.sh", ["start", directory, String(port)])
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-migrate")
            defer { connection.close() }
            _ = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: connection)
            try ReplicatedCluster.script("pg-throwaway.sh", ["stop", directory])
            return url
        }
        let listen = try freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["run", "--poll-interval", "0.2"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": url, "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(listen)", "PUSHIZO_LOG_LEVEL": "error",
            "PATH": "/usr/bin:/bin",
        ]
        // The waits for PostgreSQL and the claims it logs failing while PostgreSQL is stopped are expected.
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let base = "http://127.0.0.1:\(listen)"

        // Waiting for PostgreSQL at start: listening, alive, not ready.
        let waiting = try await Self.waitFor(base + "/readyz") { $0.status == 503 }
        #expect(waiting.body.hasPrefix("database: not reached yet"), "\(waiting.body)")
        #expect(waiting.body.contains("migrations: not checked yet"), "\(waiting.body)")
        #expect(waiting.cacheControl == "no-store" && waiting.contentType == "text/plain; charset=utf-8")
        let head = try await Self.fetch(base + "/readyz", method: "HEAD")
        #expect(head.status == 503 && head.body.isEmpty)
        let alive = try await Self.fetch(base + "/healthz")
        #expect(alive.status == 200 && alive.body == "ok\n" && alive.cacheControl == "no-store")

        _ = try await onThread { try ReplicatedCluster.script("pg-throwaway.sh", ["start", directory, String(port)]) }
        let ready = try await Self.waitFor(base + "/readyz") { $0.status == 200 }
        #expect(ready.body == "ok\n")
        #expect(try await Self.fetch(base + "/readyz", method: "HEAD").status == 200)

        // PostgreSQL stopped: the loops' failed round trips make it unready, with no query of the probe's own.
        _ = try await onThread { try ReplicatedCluster.script("pg-throwaway.sh", ["stop", directory]) }
        let down = try await Self.waitFor(base + "/readyz") { $0.status == 503 }
        #expect(down.body.hasPrefix("database: unreachable; the last round trip failed"), "\(down.body)")
        #expect(try await Self.fetch(base + "/healthz").status == 200)

        _ = try await onThread { try ReplicatedCluster.script("pg-throwaway.sh", ["start", directory, String(port)]) }
        #expect(try await Self.waitFor(base + "/readyz") { $0.status == 200 }.body == "ok\n")

        process.terminate()
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationStatus == 0)
    }

    struct Answer: Sendable {
        var status: Int
        var body: String
        var contentType: String?
        var cacheControl: String?
    }

    /// One request over HTTP/1.1 (URLSession, loopback).
    static func fetch(_ url: String, method: String = "GET") async throws -> Answer {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        request.timeoutInterval = 30
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        return Answer(
            status: http.statusCode, body: String(decoding: data, as: UTF8.self),
            contentType: http.value(forHTTPHeaderField: "Content-Type"),
            cacheControl: http.value(forHTTPHeaderField: "Cache-Control"))
    }

    /// Asks `url` until an answer satisfies `condition` (the listener may not be up yet; the worker notices a
    /// change at its next round trip). A hang guard of 2 minutes, not a timing assertion: the last answer is
    /// returned then, and the caller's expectations fail on it.
    static func waitFor(_ url: String, _ condition: (Answer) -> Bool) async throws -> Answer {
        let deadline = ContinuousClock.now + .seconds(120)
        var last: Answer?
        while ContinuousClock.now < deadline {
            if let answer = try? await fetch(url) {
                if condition(answer) { return answer }
                last = answer
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("\(url): no answer met the condition in 2 minutes; the last: \(String(describing: last))")
        if let last { return last }
        return try await fetch(url)
    }
}
