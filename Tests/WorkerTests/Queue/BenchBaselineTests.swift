import Foundation
import Postgres
import Testing
@testable import Worker

/// `make bench` compares the worker's end-to-end rate with `pgbench` running the worker's own claim and
/// completion SQL (scripts/bench/*.pgbench). These tests keep that baseline honest: the scripts hold the
/// worker's statements as it sends them, and they run, draining what they claim.
@Suite struct BenchBaselineTests {
    static let benchDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("scripts/bench")

    static let scripts = ["claim-complete.pgbench", "small-expand-claim-complete.pgbench"]

    /// The worker's claim for a limit of 200, with pgbench's variables for its two parameters, split where the
    /// scripts wrap its final `SELECT` in the `claim_rows` CTE.
    static func claimParts() -> (ctes: String, select: String) {
        // No app is short of room in pgbench's clients: the room arrays are empty.
        let text = ClaimStore.claimSQL(picking: .due, limit: 200)
            .replacingOccurrences(of: "$1::float8", with: ":lease_seconds::float8")
            .replacingOccurrences(of: "leased_by = $2", with: "leased_by = 'pgbench-' || :client_id")
            .replacingOccurrences(of: "$3::uuid[]", with: "'{}'::uuid[]")
            .replacingOccurrences(of: "$4::uuid[]", with: "'{}'::uuid[]")
            .replacingOccurrences(of: "$5::integer[]", with: "'{}'::integer[]")
        let split = text.range(of: "\nSELECT c.id")!
        return (String(text[..<split.lowerBound]), String(text[text.index(after: split.lowerBound)...]))
    }

    /// The worker's completion with pgbench's variables for `$1`...`$12`.
    static func completion() -> String {
        let names = [
            "ids", "fences", "events", "reasons", "details", "next_run_ats", "last_errors", "refunds", "app_ids",
            "notification_ids", "subscription_ids", "attempts", "writes_events", "uncounted",
        ]
        var text = CompletionStore.completeSQL
        // Highest first, so `$1` does not match the start of `$10`.
        for (index, name) in names.enumerated().reversed() {
            text = text.replacingOccurrences(of: "$\(index + 1)::", with: ":\(name)::")
        }
        return text
    }

    /// What the scripts do with the claim's rows: fold them into the completion's arrays (pgbench keeps one row of
    /// variables), every column written out as text.
    static let foldIntoArrays = """
        SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(fence), '{}') AS fences,
               coalesce(array_agg('sent'::text), '{}') AS events, coalesce(array_agg(NULL::text), '{}') AS reasons,
               coalesce(array_agg(json_build_object('provider_message_id', apns_id, 'apns_id', apns_id, 'provider', 'apns')::text), '{}') AS details,
               coalesce(array_agg(NULL::timestamptz), '{}') AS next_run_ats, coalesce(array_agg(NULL::text), '{}') AS last_errors,
               coalesce(array_agg(false), '{}') AS refunds, coalesce(array_agg(app_id), '{}') AS app_ids,
               coalesce(array_agg(notification_id), '{}') AS notification_ids,
               coalesce(array_agg(subscription_id), '{}') AS subscription_ids, coalesce(array_agg(attempt), '{}') AS attempts,
               coalesce(array_agg(true), '{}') AS writes_events, coalesce(array_agg(false), '{}') AS uncounted,
               sum(octet_length(r::text)) AS claimed_text_bytes
        FROM claim_rows r \\gset

        """

    /// claim-complete.pgbench after its header: the claim (in its transaction with `jit` off) and the completion,
    /// and nothing else (no other statement or meta-command, such as an `\if` that would skip one).
    static func claimAndCompletion() -> String {
        let (ctes, select) = claimParts()
        let indentedSelect = select.split(separator: "\n", omittingEmptySubsequences: false)
            .map { "    " + $0 }.joined(separator: "\n")
        // The claim in a transaction of its own with `jit` off, as the worker runs it (ClaimStore.withoutJIT).
        return "\\set lease_seconds 120\nBEGIN;\nSET LOCAL jit = off;\n" + ctes + ",\nclaim_rows AS (\n" + indentedSelect
            + "\n)\n" + foldIntoArrays + "COMMIT;\n\n" + completion() + ";\n"
    }

    /// A script without its leading comment lines (its header).
    static func withoutHeader(_ script: String) -> Substring {
        var rest = script[...]
        while rest.hasPrefix("--"), let end = rest.firstIndex(of: "\n") { rest = rest[rest.index(after: end)...] }
        return rest
    }

    @Test func theBroadcastScriptIsTheClaimAndTheCompletionAlone() throws {
        if let directory = ProcessInfo.processInfo.environment["PUSHIZO_TEST_WRITE_BENCH_SQL"] {
            try Self.claimAndCompletion().write(toFile: directory + "/claim-and-completion.sql", atomically: true, encoding: .utf8)
        }
        let script = try String(contentsOf: Self.benchDirectory.appendingPathComponent("claim-complete.pgbench"), encoding: .utf8)
        #expect(Self.withoutHeader(script) == Self.claimAndCompletion()[...], "claim-complete.pgbench differs from the worker's statements")
        #expect(!Self.completion().contains("$"))
    }

    /// The burst's script: one expansion statement (the worker's pass with the target read in SQL, as its
    /// header says), then the same claim and completion.
    @Test func theBurstScriptEndsWithTheSameClaimAndCompletion() throws {
        let script = try String(
            contentsOf: Self.benchDirectory.appendingPathComponent("small-expand-claim-complete.pgbench"), encoding: .utf8)
        let body = Self.withoutHeader(script)
        let tail = Self.claimAndCompletion()
        #expect(body.hasSuffix(tail), "small-expand-claim-complete.pgbench does not end with the worker's statements")
        let expansion = body.dropLast(tail.count)
        #expect(expansion.hasPrefix("WITH picked AS ("))
        #expect(expansion.hasSuffix(";\n\n"))
        #expect(!expansion.contains("\\") && expansion.filter { $0 == ";" }.count == 1, "one statement, no meta-command")
    }

    /// One pgbench transaction of each script against a queue of three deliveries: every one is claimed and
    /// completed as `sent`, with the detail the worker writes for APNs.
    @Test(arguments: scripts)
    func scriptDrainsWhatItClaims(_ file: String) async throws {
        let (run, queued, sent) = try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                defer { seed.connection.close() }
                let notification = try Self.notificationOfThreeListedDevices(seed)
                if file == "claim-complete.pgbench" {
                    // The broadcast's queue, expanded beforehand as the bench does.
                    _ = try seed.connection.query(
                        """
                        INSERT INTO deliveries (notification_id, subscription_id, app_id)
                        SELECT $1, id, app_id FROM subscriptions WHERE app_id = $2
                        """, [notification, seed.appID])
                }
                let run = try Self.pgbench(file, url)
                let rows = try seed.connection.query(
                    """
                    SELECT (SELECT count(*) FROM deliveries) AS queued,
                           (SELECT count(*) FROM delivery_events
                            WHERE event = 'sent' AND attempt = 1 AND detail->>'provider' = 'apns'
                              AND detail->>'apns_id' IS NOT NULL) AS sent
                    """)
                return (run, try rows[0].decode(Int.self, "queued"), try rows[0].decode(Int.self, "sent"))
            }
        }
        #expect(run.status == 0, "\(run.output)")
        #expect(queued == 0)
        #expect(sent == 3)
    }

    /// The floor's script writes each event as the completion does: the same `INSERT` column list and the same
    /// `jsonb` guard on the detail (its rows named `i` instead of the completion's `s`).
    @Test func theFloorScriptWritesEventsAsTheCompletionDoes() throws {
        let script = try String(contentsOf: Self.benchDirectory.appendingPathComponent("event-floor.pgbench"), encoding: .utf8)
        let insert = "INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)"
        let guardOnDetail = #"coalesce(replace(s.detail, '\u0000', '\ufffd')::jsonb, '{}'::jsonb)"#
        #expect(CompletionStore.completeSQL.contains(insert) && CompletionStore.completeSQL.contains(guardOnDetail))
        let body = Self.withoutHeader(script)
        #expect(body.hasPrefix(insert + "\n"))
        #expect(body.contains("SELECT i.app_id, i.notification_id, i.subscription_id, i.event, i.reason, i.attempt,"))
        #expect(body.contains(guardOnDetail.replacingOccurrences(of: "s.detail", with: "i.detail")))
        let metaCommands = body.split(separator: "\n").filter { $0.hasPrefix("\\") }
        #expect(metaCommands.isEmpty && body.filter { $0 == ";" }.count == 1, "one statement, no meta-command")
    }

    /// The floor's input (event-floor-batches.sql, batches of 2 here) and two transactions of its script: the three
    /// listed deliveries' `sent` events are written, and counted by the count trigger.
    @Test func theFloorScriptWritesTheListedDeliveriesEvents() async throws {
        let (build, runs, sent, counted) = try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                defer { seed.connection.close() }
                let notification = try Self.notificationOfThreeListedDevices(seed)
                let build = try Self.run(
                    "/usr/bin/psql", ["-q", "-v", "ON_ERROR_STOP=1", "-v", "batch=2", "-f",
                                      Self.benchDirectory.appendingPathComponent("event-floor-batches.sql").path, url])
                let runs = try (0..<2).map { _ in try Self.pgbench("event-floor.pgbench", url) }
                let rows = try seed.connection.query(
                    """
                    SELECT (SELECT count(*) FROM delivery_events
                            WHERE event = 'sent' AND attempt = 1 AND notification_id = $1
                              AND detail->>'provider' = 'apns' AND detail->>'apns_id' IS NOT NULL) AS sent,
                           (SELECT coalesce(sum(sent), 0) FROM notification_event_counts WHERE notification_id = $1) AS counted
                    """, [notification])
                return (build, runs, try rows[0].decode(Int.self, "sent"), try rows[0].decode(Int.self, "counted"))
            }
        }
        #expect(build.status == 0, "\(build.output)")
        for run in runs { #expect(run.status == 0, "\(run.output)") }
        #expect(sent == 3)
        #expect(counted == 3)
    }

    /// Seeds an app with three subscriptions and a notification listing them by id; returns the notification's id.
    static func notificationOfThreeListedDevices(_ seed: Seed) throws -> UUID {
        try seed.app()
        let devices = try (0..<3).map { _ in try seed.subscription().uuidString.lowercased() }
        return try seed.notification(target: #"{"include_subscription_ids": ["\#(devices.joined(separator: #"", ""#))"]}"#)
    }

    /// Runs one transaction of `file` as `make bench` runs it (prepared statements).
    static func pgbench(_ file: String, _ url: String) throws -> (status: Int32, output: String) {
        try run(
            pgbenchPath(),
            ["-n", "-M", "prepared", "-c", "1", "-t", "1", "-f", benchDirectory.appendingPathComponent(file).path, url])
    }

    /// Runs `executable` with `arguments` to its end: its status and its output (standard output and error).
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    /// pgbench of the installed PostgreSQL server package, found as scripts/pg-throwaway.sh finds initdb.
    static func pgbenchPath() throws -> String {
        let candidates = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { $0.compare($1, options: .numeric) == .orderedDescending }
            .map { "/usr/lib/postgresql/\($0)/bin/pgbench" } + ["/usr/bin/pgbench"]
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw BenchBaselineError.pgbenchNotFound
        }
        return found
    }

    enum BenchBaselineError: Error { case pgbenchNotFound }
}
