import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// A real PgBouncer (`/usr/sbin/pgbouncer`, Debian's package) in front of the test PostgreSQL: listening on
/// 127.0.0.1 at the first free port of 55621...55629, every database passed through, trust authentication, the
/// given `pool_mode`, its configuration and log in a temporary directory. Stopped (SIGTERM) when `body` ends.
struct PgBouncer: Sendable {
    static let executable = "/usr/sbin/pgbouncer"

    let port: Int
    let directory: String

    /// The libpq connection string of `database` through this PgBouncer.
    func connectionString(database: String) -> String {
        "host=127.0.0.1 port=\(port) user=postgres dbname=\(database)"
    }

    /// PgBouncer's own log so far (connection and pooling errors).
    var log: String { (try? String(contentsOfFile: directory + "/pgbouncer.log", encoding: .utf8)) ?? "" }

    /// - Parameters:
    ///   - serverConnectionString: the test PostgreSQL's `key=value` string (its `host` and `port` are used).
    ///   - poolSize: server connections per database and user (`default_pool_size`): fewer than the clients', so
    ///     server sessions pass from one client to another as they would under load.
    static func with<T: Sendable>(
        inFrontOf serverConnectionString: String, poolMode: String = "transaction", poolSize: Int = 4,
        _ body: @Sendable (PgBouncer) async throws -> T
    ) async throws -> T {
        var server: [String: String] = [:]
        for pair in serverConnectionString.split(separator: " ") {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { server[parts[0]] = parts[1] }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-pgbouncer-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // PgBouncer refuses to run as root: it switches to the postgres user (`-u`), which must write its log here.
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory)
        let user = server["user"] ?? "postgres"
        try "\"\(user)\" \"\"\n".write(toFile: directory + "/users.txt", atomically: true, encoding: .utf8)
        for port in 55621...55629 {
            let configuration = """
                [databases]
                * = host=\(server["host"] ?? "127.0.0.1") port=\(server["port"] ?? "5432")
                [pgbouncer]
                listen_addr = 127.0.0.1
                listen_port = \(port)
                unix_socket_dir =
                auth_type = trust
                auth_file = \(directory)/users.txt
                pool_mode = \(poolMode)
                default_pool_size = \(poolSize)
                max_client_conn = 500
                logfile = \(directory)/pgbouncer.log
                """
            try configuration.write(toFile: directory + "/pgbouncer.ini", atomically: true, encoding: .utf8)
            for file in ["pgbouncer.ini", "users.txt"] {
                try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: directory + "/" + file)
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = (getuid() == 0 ? ["-u", "postgres"] : []) + [directory + "/pgbouncer.ini"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let bouncer = PgBouncer(port: port, directory: directory)
            // Up when its log says it listens; a taken port ends the process instead (hang guard: 60 s).
            let deadline = ContinuousClock.now + .seconds(60)
            while process.isRunning, !bouncer.log.contains("listening on 127.0.0.1:\(port)"), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            guard process.isRunning else { continue }
            if !bouncer.log.contains("listening on 127.0.0.1:\(port)") {
                kill(process.processIdentifier, SIGKILL)
                throw PgBouncerUnavailable(log: bouncer.log)
            }
            // SIGKILL: the test process blocks SIGTERM in its threads (the worker's signal handling is tested in
            // process), and a spawned child inherits the mask, so PgBouncer's SIGTERM handler would never run.
            let stop = { @Sendable in
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
            do {
                let result = try await body(bouncer)
                try await onThread(stop)
                return result
            } catch {
                try await onThread(stop)
                throw error
            }
        }
        throw PgBouncerUnavailable(log: (try? String(contentsOfFile: directory + "/pgbouncer.log", encoding: .utf8)) ?? "")
    }
}

struct PgBouncerUnavailable: Error, CustomStringConvertible {
    let log: String
    var description: String { "PgBouncer did not start on any of ports 55621...55629: \(log)" }
}
