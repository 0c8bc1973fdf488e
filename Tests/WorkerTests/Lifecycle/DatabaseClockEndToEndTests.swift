import Foundation
import Postgres
import SocketTestSupport
import Testing

/// The real `pushizo-worker run` with its wall clock ten minutes off PostgreSQL's, through libfaketime
/// (Debian package `faketime`; `LD_PRELOAD`ed, it moves what Foundation's `Date` reads), against
/// the test database and the APNs emulator (docs/clocks.md): PostgreSQL's clock, read with the claim, decides
/// expiry, quiet hours and local times, and the worker reports its offset as a metric and a warning.
@Suite("PostgreSQL's clock decides, end to end")
struct DatabaseClockEndToEndTests {
    /// Ten minutes, the offset the worker's clock is moved by.
    static let offset = 600

    /// The worker ahead by ten minutes: a notification created by the database now with `ttl: 300` is sent, not
    /// `skipped`/`expired` at once; one to an app whose quiet hours begin in about five minutes (by PostgreSQL's
    /// clock; the worker's reads inside them) is sent, not deferred; the offset gauge reads about -600 s and the
    /// warning names it.
    @Test func aWorkerTenMinutesAheadSendsByTheDatabasesClockAndReportsItsOffset() async throws {
        let faketime = try #require(Self.libfaketime, "libfaketime is not installed (scripts/install-deps.sh)")
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let tokens = try await onThread {
                    let short = try Seed(url)
                    try short.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let shortToken = Seed.token()
                    try short.subscription(token: shortToken)
                    let quiet = try Seed(url)
                    try quiet.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let quietToken = Seed.token()
                    try quiet.subscription(token: quietToken)
                    // Quiet from the whole minute 4-5 minutes ahead for 15 minutes, in UTC (no zone set): the
                    // worker's clock, 10 minutes ahead, reads inside the window; PostgreSQL's reads before it.
                    _ = try quiet.connection.query(
                        """
                        UPDATE apps SET quiet_hours_start = (date_trunc('minute', now() AT TIME ZONE 'UTC') + interval '5 minutes')::time,
                                        quiet_hours_end = (date_trunc('minute', now() AT TIME ZONE 'UTC') + interval '20 minutes')::time
                        WHERE id = $1
                        """, [quiet.appID])
                    try short.notification(message: #"{"contents": {"en": "five minutes"}, "ttl": 300}"#, target: #"{"all": true}"#)
                    try quiet.notification(message: #"{"contents": {"en": "not quiet yet"}}"#, target: #"{"all": true}"#)
                    return [shortToken, quietToken]
                }
                let port = try freePort()
                let (process, stderr) = Self.workerUnderFaketime(
                    faketime, offset: "+\(Self.offset)", emulator: emulator, databaseURL: url,
                    extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                try process.run()
                defer { if process.isRunning { process.terminate() } }

                // Until both have a terminal event (or one was skipped or failed). A hang guard, below the 4 minutes
                // before the quiet window opens on PostgreSQL's clock too (a worker that slow on a loaded machine
                // would see it open, and this test could not tell the clocks apart).
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await waitUntil("both notifications' deliveries are settled", limit: 200) {
                    let row = try await database.query(
                        """
                        SELECT count(*) FILTER (WHERE event = 'sent') AS sent,
                               count(*) FILTER (WHERE event IN ('skipped', 'failed')) AS other
                        FROM delivery_events
                        """)[0]
                    return try row.decode(Int.self, "sent") == 2 || row.decode(Int.self, "other") > 0
                }
                let events = try await database.query(
                    "SELECT event, coalesce(reason, '') AS reason, detail::text AS detail FROM delivery_events WHERE event <> 'retrying' ORDER BY event")
                #expect(events.map { "\($0["event"] ?? "?")/\($0["reason"] ?? "")" } == ["sent/", "sent/"],
                        "\(events.map { $0["detail"] ?? "" })")
                #expect(Set(emulator.apns.acceptedNotifications.map(\.deviceToken)) == Set(tokens))

                // The worker measured PostgreSQL's clock about ten minutes behind its own (to within half a claim's
                // round trip, which a loaded machine stretches to seconds, never to a minute).
                let text = try await scrape("http://127.0.0.1:\(port)/metrics")
                let measured = try #require(sample(text, "pushizo_database_clock_offset_seconds"))
                #expect(abs(measured + Double(Self.offset)) < 60, "offset \(measured)")
                try await promtoolCheckMetrics(text)

                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
                let log = try await onThread { String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
                #expect(log.contains("this host's clock is off PostgreSQL's") && log.contains("offset_seconds"), "stderr: \(log)")
                await database.shutdown()
            }
        }
    }

    /// libfaketime's library (Debian package `faketime`), or `nil`.
    static var libfaketime: String? {
        let candidates = ["x86_64-linux-gnu", "aarch64-linux-gnu"].map { "/usr/lib/\($0)/faketime/libfaketime.so.1" }
            + ["/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1"]
        return candidates.first { FileManager.default.fileExists(atPath: $0) }
    }

    /// The worker (``EmulatorHarness/workerProcess(databaseURL:arguments:extra:)``) with libfaketime preloaded
    /// (what the `faketime` command does, without its wrapper process between the test and the worker's signals):
    /// its wall clock moved by `offset` seconds ("+600"), its monotonic clock left alone
    /// (`FAKETIME_DONT_FAKE_MONOTONIC`), as on a host whose clock is set wrong. Started through `env`, which execs
    /// it: libfaketime loaded without `FAKETIME_SHARED` creates its shared state and sets that variable in the
    /// process, which moves `environ` off the initial stack where Swift's runtime finds `argv` on Linux (the
    /// worker then saw no arguments); loaded first into `env`, it sets the variable there and the worker inherits
    /// it. Its stderr (warnings only) is piped.
    static func workerUnderFaketime(
        _ library: String, offset: String, emulator: EmulatorHarness, databaseURL: String, extra: [String: String]
    ) -> (Process, Pipe) {
        let process = emulator.workerProcess(
            databaseURL: databaseURL, arguments: ["run", "--poll-interval", "0.2"],
            extra: extra.merging(["LD_PRELOAD": library, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                   // No shared state in /dev/shm: there is no child process to share it with, and
                                   // nothing would remove it after the run.
                                   "FAKETIME_DISABLE_SHM": "1"]) { _, new in new })
        process.arguments = [process.executableURL!.path] + (process.arguments ?? [])
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let stderr = Pipe()
        process.standardError = stderr
        return (process, stderr)
    }
}
