import BuildInfo
import Foundation
import Postgres
import SocketTestSupport
import Testing

@testable import Worker

/// Worker processes in `pushizo-worker status` through their heartbeats (`worker_heartbeats`): the real
/// executable, two worker processes and PostgreSQL. States are waited for, never timed: each wait has a hang guard
/// only.
@Suite("Workers in pushizo-worker status", .serialized)
struct WorkerHeartbeatEndToEndTests {
    /// A worker process with a 1 s heartbeat (stale after 3 s without one), no provider in reach and no work.
    static func startWorker(_ url: String, name: String, extra: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["run"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": url, "PUSHIZO_WORKER_ID": name, "PUSHIZO_HEARTBEAT_INTERVAL": "1s",
            "PUSHIZO_LOG_LEVEL": "warning", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ].merging(extra) { _, new in new }
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// `status --json`'s workers, read until `done` holds for them (hang guard: 60 s, then the last reading).
    static func workers(
        _ url: String, until done: ([FleetStatus.Worker]) -> Bool
    ) async throws -> [FleetStatus.Worker] {
        let deadline = ContinuousClock.now + .seconds(60)  // a hang guard, not a timing assertion
        while true {
            let (exit, json, errors) = try await StatusCommandTests.status(["--json"], databaseURL: url)
            #expect(exit == 0, "\(errors)")
            let status = try FleetStatusRenderer.decoder().decode(FleetStatus.self, from: Data(json.utf8))
            let workers = try #require(status.workers, "\(json)")
            if done(workers) || ContinuousClock.now > deadline { return workers }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// `pushizo_fleet_workers` scraped from the worker listening on `port`, until it is `expected` (hang guard:
    /// 60 s, then the last value).
    static func fleetWorkers(_ port: Int, until expected: Double) async throws -> Double? {
        let deadline = ContinuousClock.now + .seconds(60)  // a hang guard, not a timing assertion
        while true {
            let value = sample(try await scrape("http://127.0.0.1:\(port)/metrics"), "pushizo_fleet_workers")
            if value == expected || ContinuousClock.now > deadline { return value }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    static func worker(_ workers: [FleetStatus.Worker], pid: Int32) -> FleetStatus.Worker? {
        workers.first { $0.pid == pid }
    }

    /// Two workers show up live with their pids; one killed with SIGKILL turns stale once its heartbeat is three
    /// intervals old, while the other stays live; the other, stopped with SIGTERM, shows as stopped.
    @Test func liveWorkersAKilledOneTurningStaleAndACleanlyStoppedOne() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let killed = try Self.startWorker(url, name: "w-killed")
            let metricsPort = try freePort()
            let stopped = try Self.startWorker(
                url, name: "w-stopped", extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(metricsPort)"])
            defer {
                for process in [killed, stopped] where process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
            let (killedPID, stoppedPID) = (killed.processIdentifier, stopped.processIdentifier)

            let live = try await Self.workers(url) { workers in
                [killedPID, stoppedPID].allSatisfy { Self.worker(workers, pid: $0)?.state == .live }
            }
            #expect(Set(live.map(\.pid)) == [killedPID, stoppedPID], "\(live)")
            for worker in live {
                #expect(worker.state == .live)
                #expect(worker.leasedBy == (worker.pid == killedPID ? "w-killed" : "w-stopped"))
                #expect(worker.host == HeartbeatService.hostName())
                #expect(worker.version == BuildInfo.version && worker.commit == BuildInfo.commit)
                #expect(worker.roles == ["expand", "send"])
                #expect(worker.heartbeatSeconds == 1)
                #expect(worker.inFlight == 0)
                #expect(worker.stoppingAt == nil && worker.stoppedAt == nil)
            }
            // The JSON's ids are lower case, as PostgreSQL prints them.
            let (_, json, _) = try await StatusCommandTests.status(["--json"], databaseURL: url)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            let listed = try #require(object["workers"] as? [[String: Any]])
            #expect(Set(listed.compactMap { $0["worker_id"] as? String }) == Set(live.map { $0.workerID.uuidString.lowercased() }))
            #expect(Set(listed.compactMap { $0["state"] as? String }) == ["live"])

            // The fleet's live workers, as the survivor's heartbeat counts them.
            #expect(try await Self.fleetWorkers(metricsPort, until: 2) == 2)

            kill(killedPID, SIGKILL)
            try await onThread { killed.waitUntilExit() }
            let afterKill = try await Self.workers(url) { workers in
                Self.worker(workers, pid: killedPID)?.state == .stale && Self.worker(workers, pid: stoppedPID)?.state == .live
            }
            let dead = try #require(Self.worker(afterKill, pid: killedPID))
            #expect(dead.state == .stale)
            #expect(dead.lastSeenSecondsAgo >= 3 * dead.heartbeatSeconds)
            #expect(dead.stoppingAt == nil && dead.stoppedAt == nil)
            #expect(Self.worker(afterKill, pid: stoppedPID)?.state == .live)
            #expect(try await Self.fleetWorkers(metricsPort, until: 1) == 1)
            let (_, text, _) = try await StatusCommandTests.status(databaseURL: url)
            let lines = StatusCommandTests.folded(text)
            #expect(lines.contains("workers: 1 live, 1 stale"), "\(text)")
            #expect(lines.contains { $0.hasPrefix("stale \(HeartbeatService.hostName()) \(killedPID) ") }, "\(text)")
            #expect(lines.contains { $0.hasPrefix("stale: no heartbeat for 3 of its intervals") }, "\(text)")

            stopped.terminate()
            try await onThread { stopped.waitUntilExit() }
            #expect(stopped.terminationStatus == 0)
            // Marked stopped before the process exited: no wait needed.
            let afterStop = try await Self.workers(url) { _ in true }
            let clean = try #require(Self.worker(afterStop, pid: stoppedPID))
            #expect(clean.state == .stopped)
            let stoppedAt = try #require(clean.stoppedAt)
            #expect(try #require(clean.stoppingAt) <= stoppedAt)
            #expect(Self.worker(afterStop, pid: killedPID)?.state == .stale)
            // Live first, then stale, then stopped.
            #expect(afterStop.map(\.state) == [.stale, .stopped])
            let (_, stoppedText, _) = try await StatusCommandTests.status(databaseURL: url)
            #expect(StatusCommandTests.folded(stoppedText).contains("workers: 1 stale, 1 stopped"), "\(stoppedText)")
        }
    }

    /// `status --app` is about one app's rows: no workers section, `workers` null in JSON.
    @Test func statusOfOneAppListsNoWorkers() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let app = UUID().uuidString.lowercased()
            _ = try await OperatorCommandTests.query(url, "INSERT INTO apps (id) VALUES ($1::uuid) RETURNING id", [app])
            let (exit, json, errors) = try await StatusCommandTests.status(["--app", app, "--json"], databaseURL: url)
            #expect(exit == 0, "\(errors)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            #expect(object["workers"] is NSNull)
            let (_, text, _) = try await StatusCommandTests.status(["--app", app], databaseURL: url)
            #expect(!text.contains("workers:"))
        }
    }

    /// A heartbeat interval outside 100 ms...5 min is a bad setting: exit 78 naming the key.
    @Test(arguments: ["50ms", "10m", "soon"])
    func aBadHeartbeatIntervalExits78(_ value: String) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["run"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": "host=127.0.0.1 port=1", "PUSHIZO_HEARTBEAT_INTERVAL": value, "PATH": "/usr/bin:/bin",
        ]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let text = try await onThread { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationStatus == 78)
        #expect(text.contains("PUSHIZO_HEARTBEAT_INTERVAL"), "\(text)")
    }
}
