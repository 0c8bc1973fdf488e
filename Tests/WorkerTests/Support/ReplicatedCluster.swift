import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Postgres

/// A throwaway primary and streaming standby on loopback, for failover tests: either plain streaming replication
/// (`scripts/pg-replicated.sh`, promoted by hand with `pg_ctl promote`) or two Patroni nodes and an etcd member
/// (`scripts/patroni-cluster.sh`, which promote by themselves). Ports are free loopback ports below Linux's
/// ephemeral range (``freePorts(_:)``).
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

    /// The base port the suite's throwaway PostgreSQL listens on.
    static var basePort: Int {
        ProcessInfo.processInfo.environment["PUSHIZO_TEST_PG_PORT"].flatMap(Int.init) ?? 55432
    }

    /// `count` loopback ports free when chosen, counting up from 20,000 plus the base port's last four digits
    /// (25432 for 55432, so suites run side by side on other base ports look in other places). Below Linux's
    /// ephemeral range (32768-60999 by default): the suite's own thousands of client connections draw their local
    /// ports from that range, and one of them held a fixed port there (Patroni's REST API port) when a cluster
    /// started.
    static func freePorts(_ count: Int) -> [Int] {
        var ports: [Int] = []
        var candidate = 20_000 + basePort % 10_000
        while ports.count < count && candidate < 32_768 {
            if isFree(candidate) { ports.append(candidate) }
            candidate += 1
        }
        return ports
    }

    /// Whether 127.0.0.1:`port` can be bound now (TCP).
    private static func isFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
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
        let needed = manager == .byHand ? 2 : 6
        let ports = freePorts(needed)
        guard ports.count == needed else {
            throw PostgresError(code: .connectionFailed, message: "no \(needed) free loopback ports below 32768")
        }
        let (primaryPort, standbyPort) = (ports[0], ports[1])
        let script = manager == .byHand ? "pg-replicated.sh" : "patroni-cluster.sh"
        defer {
            _ = try? Self.script(script, ["stop", directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
        let url = try await onThread {
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
