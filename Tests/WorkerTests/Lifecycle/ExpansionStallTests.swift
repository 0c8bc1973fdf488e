import Foundation
import Postgres
import Synchronization
import Testing

/// The real executable's expand loop under a fault every chunk meets (docs/targets.md, "Poison rows"): it
/// fails nothing, logs the stall once (SQLSTATE only), backs off, and expands everything once the fault is gone.
@Suite("Expansion stalled by a broken trigger")
struct ExpansionStallTests {
    /// Everything the child process wrote to stderr so far.
    final class Output: Sendable {
        private let text = Mutex("")
        func append(_ data: Data) { text.withLock { $0 += String(decoding: data, as: UTF8.self) } }
        var lines: [Substring] { text.withLock { $0.split(separator: "\n") } }
    }

    @Test func aBrokenTriggerFailsNothingLogsOnceAndEverythingExpandsOnceItIsDropped() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let notifications = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try ExpansionTests.seedSubscriptions(seed, 2)
                    var ids = try (0..<3).map { _ in try seed.notification(target: #"{"all": true}"#) }
                    ids.append(try ExpansionTests.goodNotificationOfAnotherApp(url).notification)
                    try seed.poisonDeliveries(
                        before: "INSERT", "RAISE EXCEPTION 'broken: token-like-text' USING ERRCODE = '23514';")
                    return ids
                }
                let process = Process()
                process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                process.arguments = ["run", "--poll-interval", "0.05"]
                process.environment = [
                    "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": emulator.caFile, "PUSHIZO_LOG_LEVEL": "warning",
                    "PUSHIZO_ROLES": "expand", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                ]
                let output = Output()
                let pipe = Pipe()
                pipe.fileHandleForReading.readabilityHandler = { output.append($0.availableData) }
                process.standardError = pipe
                try process.run()
                let started = ContinuousClock.now
                defer {
                    if process.isRunning { process.terminate() }
                    pipe.fileHandleForReading.readabilityHandler = nil
                }
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                func statuses() async throws -> [String] {
                    try await database.query(
                        "SELECT status || coalesce(':' || status_reason, '') AS s FROM notifications ORDER BY id"
                    ).map { $0["s"] ?? "" }
                }
                func waitFor(_ what: String, _ condition: () async throws -> Bool) async throws {
                    let deadline = ContinuousClock.now + .seconds(120)  // a hang guard, not a timing assertion
                    while ContinuousClock.now < deadline {
                        if try await condition() { return }
                        try await Task.sleep(for: .milliseconds(50))
                    }
                    Issue.record("never: \(what)")
                }

                try await waitFor("the stall is logged") { output.lines.contains { $0.contains("expansion stalled") } }
                // Several more backoffs (every notification is tried again in turn) and still nothing failed.
                let touched = try await database.query("SELECT max(expansion_touched_at) AS t FROM notifications")[0]
                    .decode(Date.self, "t")
                try await waitFor("every notification is tried after the stall") {
                    try await database.query(
                        "SELECT count(*) AS n FROM notifications WHERE expansion_touched_at > $1", [touched]
                    )[0]["n"] == "4"
                }
                #expect(try await statuses() == ["pending", "pending", "pending", "pending"])
                // Once a minute at most: a run that a loaded machine stretched past a minute may rightly hold more.
                let stalls = output.lines.filter { $0.contains("expansion stalled") }
                let minutes = Int((ContinuousClock.now - started) / .seconds(60))
                #expect(stalls.count >= 1 && stalls.count <= 1 + minutes, "\(stalls.count) stall lines in \(minutes) whole minutes")
                #expect(stalls.first?.contains("sqlstate=23514") == true)
                #expect(stalls.first?.contains("condition=integrity_constraint_violation") == true)
                #expect(!output.lines.contains { $0.contains("token-like-text") })
                #expect(!output.lines.contains { $0.contains("notification failed") })

                _ = try await database.query("DROP TRIGGER poison ON deliveries")
                _ = try await database.query("NOTIFY pushizo_wakeup, 'notifications'")
                try await waitFor("everything expands") {
                    try await statuses() == ["expanded", "expanded", "expanded", "expanded"]
                }
                #expect(try await database.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "7")
                #expect(notifications.count == 4)
                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
                await database.shutdown()
            }
        }
    }
}
