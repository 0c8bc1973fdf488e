import Foundation
import Postgres

/// A throwaway primary and streaming standby on loopback, for failover tests: either plain streaming replication
/// (`scripts/pg-replicated.sh`, promoted by hand with `pg_ctl promote`) or two Patroni nodes and an etcd member
/// (`scripts/patroni-cluster.sh`, which promote by themselves). Ports count from `PUSHIZO_TEST_PG_PORT` (55432
/// by default), so suites run side by side on other base ports do not collide: the plain pair takes + 1 and + 2,
/// the Patroni nodes' PostgreSQL + 3 and + 4, etcd + 10 and + 11, the Patroni REST APIs + 12 and + 13.
struct ReplicatedCluster: Sendable {
    enum Replication: String, Sendable { case sync, async }

    /// Who promotes the standby.
    enum Manager: String, Sendable {
        /// The test: `kill -9` of the primary's postmaster, then `pg_ctl promote` of the standby.
        case byHand = "pg_ctl promote"
        /// Patroni: `kill -9` of the leader's Patroni and postmaster; the other node takes the leader key once
        /// it expires (ttl 10 s) and promotes itself.
        case patroni = "Patroni"
    }

    let manager: Manager
    let directory: String
    let primaryPort: Int
    let standbyPort: Int
    /// `postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/pushizo?target_session_attrs=read-write`: libpq tries
    /// both and keeps the one that takes writes.
    let url: String

    static var repositoryRoot: URL {
        // Tests/WorkerTests/Support/ReplicatedCluster.swift -> repository root.
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
    }

    /// The base port the suite's throwaway PostgreSQL listens on; failover clusters take the ports after it.
    static var basePort: Int {
        ProcessInfo.processInfo.environment["PUSHIZO_TEST_PG_PORT"].flatMap(Int.init) ?? 55432
    }

    var script: String { manager == .byHand ? "pg-replicated.sh" : "patroni-cluster.sh" }

    /// Runs `scripts/<name>` with `arguments`; returns its standard output, trimmed.
    @discardableResult
    static func script(_ name: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = repositoryRoot.appendingPathComponent("scripts/\(name)")
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let text = output.fileHandleForReading.readDataToEndOfFile()
        let errorText = errors.fileHandleForReading.readDataToEndOfFile()
        guard exitStatus(of: process) == 0 else {
            throw PostgresError(
                code: .connectionFailed,
                message: "\(name) \(arguments.first ?? "") failed: \(String(decoding: errorText, as: UTF8.self))")
        }
        return String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The exit status of `process`, reaped here with `waitpid` when Foundation has not: a script that leaves
    /// daemons behind (pg_ctl's postmasters, Patroni) sometimes ends with Foundation's `waitUntilExit` waiting
    /// forever beside a zombie.
    static func exitStatus(of process: Process) -> Int32 {
        let pid = process.processIdentifier
        while process.isRunning {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                // WIFEXITED / WEXITSTATUS, which Swift does not import: a normal exit keeps the low 7 bits zero.
                return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            }
            usleep(20_000)
        }
        return process.terminationStatus
    }

    /// Starts a primary and a standby streaming from it, migrates the `pushizo` database (on the primary,
    /// replicated to the standby), runs `body`, and stops both.
    static func with<T: Sendable>(
        _ replication: Replication, managedBy manager: Manager = .byHand,
        _ body: @Sendable (ReplicatedCluster) async throws -> T
    ) async throws -> T {
        let directory = "/tmp/pushizo-failover-\(UUID().uuidString.prefix(8))"
        let base = basePort
        let (primaryPort, standbyPort) = manager == .byHand ? (base + 1, base + 2) : (base + 3, base + 4)
        let script = manager == .byHand ? "pg-replicated.sh" : "patroni-cluster.sh"
        defer {
            _ = try? Self.script(script, ["stop", directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
        let url = try await onThread {
            let ports = manager == .byHand
                ? [primaryPort, standbyPort] : [primaryPort, standbyPort, base + 10, base + 11, base + 12, base + 13]
            let url = try Self.script(script, ["start", directory] + ports.map(String.init) + [replication.rawValue])
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-migrate")
            defer { connection.close() }
            _ = try PostgresMigrator(directory: TestDatabase.migrationsDirectory).migrate(on: connection)
            return url
        }
        return try await body(
            ReplicatedCluster(manager: manager, directory: directory, primaryPort: primaryPort, standbyPort: standbyPort, url: url))
    }

    /// `kill -9` of the primary (its postmaster; with Patroni, its Patroni too): no shutdown checkpoint, no
    /// last WAL sent.
    func killPrimary() throws {
        try Self.script(script, [manager == .byHand ? "kill-primary" : "kill-leader", directory])
    }

    /// By hand, `pg_ctl promote` of the standby, returning once it takes writes; with Patroni, nothing (the
    /// surviving node promotes itself once the leader key expires).
    func promoteStandby() throws {
        if manager == .byHand { try Self.script(script, ["promote", directory]) }
    }
}
