import DeliveryCore
import Emulator
import Foundation
import Postgres
import Testing
@testable import Worker

/// The egress policy with the real worker, PostgreSQL and the emulator on 127.0.0.1: without the operator
/// switch nothing connects to a non-public address, whatever the spelling, and what is refused says nothing
/// about the network.
@Suite("Egress policy end to end", .serialized)
struct EgressEndToEndTests {
    /// Web Push endpoints at the emulator (by name and by literal), at the metadata address and a closed port
    /// fail at once with `forbidden_endpoint`, one event each and a fixed detail; the emulator gets nothing.
    /// APNs channels whose override is cleartext or resolves to loopback are paused as configuration errors.
    @Test func withoutTheSwitchNothingPrivateIsContacted() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let port = emulator.port
                let (web, apnsByName, apnsCleartext) = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    var web: [String: UUID] = [:]
                    let origins = [
                        "name": "https://localhost:\(port)", "literal": "https://127.0.0.1:\(port)",
                        "hex": "https://0x7f.1:\(port)", "decimal": "https://2130706433:\(port)",
                        "mapped": "https://[::ffff:127.0.0.1]:\(port)", "closed": "https://127.0.0.1:1",
                        "metadata": "https://169.254.169.254", "metadata-octal": "https://0251.0376.0251.0376",
                    ]
                    for (label, origin) in origins {
                        web[label] = try seed.webSubscription(try emulator.webSubscription("okay-\(label)"), origin: origin)
                    }
                    _ = try seed.notification(target: #"{"all": true}"#)

                    // APNs override by name: resolved, then refused (loopback).
                    let byName = try Seed(url)
                    try byName.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let nameSubscription = try byName.subscription()
                    _ = try byName.notification(target: #"{"all": true}"#)
                    // APNs override in cleartext to the metadata address: refused as the channel's settings.
                    let cleartext = try Seed(url)
                    try cleartext.app(channelSettings: emulator.channelSettings, endpoint: "http://169.254.169.254")
                    let cleartextSubscription = try cleartext.subscription()
                    _ = try cleartext.notification(target: #"{"all": true}"#)
                    return (web, (byName.appID, nameSubscription), (cleartext.appID, cleartextSubscription))
                }
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url,
                        extra: ["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "false", "PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await runUntil(runtime, "every delivery has its event") {
                    let rows = try await database.query("SELECT count(DISTINCT subscription_id) AS n FROM delivery_events")
                    return rows[0]["n"] == "\(web.count + 2)"
                }
                for (label, subscription) in web {
                    let events = try await database.query(
                        "SELECT event, reason, detail::text AS detail FROM delivery_events WHERE subscription_id = $1",
                        [subscription])
                    #expect(events.count == 1, "\(label)")
                    #expect(events.first?["event"] == "failed", "\(label)")
                    #expect(events.first?["reason"] == "forbidden_endpoint", "\(label)")
                    let detail = events.first?["detail"] ?? ""
                    for leak in ["127.0.0.1", "169.254", "refused:", "Connection", "errno", "localhost", "certificate"] {
                        #expect(!detail.contains(leak), "\(label): \(detail)")
                    }
                }
                #expect(emulator.webPush.acceptedMessages.isEmpty)
                #expect(emulator.webPush.statusCounts.isEmpty)
                #expect(emulator.apns.acceptedNotifications.isEmpty)

                for (app, subscription) in [apnsByName, apnsCleartext] {
                    let events = try await database.query(
                        "SELECT event, reason FROM delivery_events WHERE subscription_id = $1", [subscription])
                    #expect(events.first?["event"] == "retrying")
                    #expect(events.first?["reason"] == "invalid_channel_settings")
                    let channel = try await database.query(
                        "SELECT paused_until IS NOT NULL AS paused FROM app_channels WHERE app_id = $1", [app])
                    #expect(channel.first?["paused"] == "t")
                }
                await database.shutdown()
            }
        }
    }

    /// `check` with hostile rows and settings prints no terminal control, no URL user info and no database
    /// password, and reports refused overrides.
    @Test func checkPrintsNothingHostile() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(
                        channelSettings: emulator.channelSettings,
                        endpoint: "https://admin:hunter2@api.push.apple.com\u{1b}]52;c;cm0gLXJmIH4=\u{07}\u{202e}")
                    _ = try seed.connection.query(
                        "UPDATE app_channels SET paused_until = now() + interval '1 hour', paused_reason = $2 WHERE app_id = $1",
                        [seed.appID, "\u{1b}[2J\u{9b}31m\r\nFAILED: nothing \u{2067}https://u:p@x"])
                    let cleartext = try Seed(url)
                    try cleartext.app(channelSettings: emulator.channelSettings, endpoint: "http://169.254.169.254")
                }
                let password = #"Se#c r@t%23'"\"#
                let withPassword = url + #" password='Se#c r@t%23\'"\\'"#
                // libpq reads this URI's password as `Se#c%2r` and refuses its bad %-escape, quoting it: a setting
                // only an operator can fix, so `check` exits 78 (EX_CONFIG) naming the key.
                let unparsable = "postgresql://postgres:Se#c%2r@t@localhost/db"
                for (databaseURL, expectedStatus) in [(withPassword, 1), (withPassword + " port=1", 1), (unparsable, 78)] {
                    let (status, output) = try await Self.runCheck(databaseURL: databaseURL)
                    #expect(status == expectedStatus, "\(output)")
                    for forbidden in ["\u{1b}", "\u{9b}", "\u{07}", "\u{202e}", "\u{2067}", "\r", "hunter2", "u:p@", password, "Se#c", "r@t"] {
                        #expect(!output.contains(forbidden), "\(forbidden.unicodeScalars.map { $0.value }): \(output)")
                    }
                    if databaseURL == withPassword + " port=1" {
                        #expect(output.contains("database: FAILED: "), "\(output)")
                    }
                    if databaseURL == withPassword {
                        #expect(output.contains("https://***@api.push.apple.com\\u{1B}"), "\(output)")
                        #expect(output.contains("INVALID ENDPOINT: endpoint is refused: http:// is cleartext"), "\(output)")
                        #expect(output.split(separator: "\n").filter { $0.hasPrefix("FAILED") }.count == 1, "\(output)")
                    }
                }
            }
        }
    }

    /// A host name is resolved as the worker's connection would resolve it: `check` fails an override whose name
    /// answers with a forbidden address (`localhost`: loopback), which `run` would pause the channel for, and
    /// passes it with the operator switch on.
    @Test func checkResolvesOverrideHostNames() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: "https://localhost:9")
                }
            }
            let (status, output) = try await Self.runCheck(databaseURL: url)
            #expect(status == 1, "\(output)")
            // 127.0.0.1 or ::1, whichever the resolver lists first.
            let line = output.split(separator: "\n").first { $0.contains("endpoint=https://localhost:9: INVALID") }
            #expect(line?.contains("INVALID ENDPOINT: endpoint is refused: localhost resolves to ") == true, "\(output)")
            // One verdict a line: the settings' (ok) and the endpoint's (invalid) are not on the same one.
            #expect(!output.split(separator: "\n").contains { $0.contains(": ok (") && $0.contains("INVALID") }, "\(output)")
            #expect(line?.contains("loopback") == true, "\(output)")
            let (allowed, allowedOutput) = try await Self.runCheck(databaseURL: url, extra: ["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true"])
            #expect(allowed == 0, "\(allowedOutput)")
            #expect(!allowedOutput.contains("INVALID"), "\(allowedOutput)")
        }
    }

    /// Runs `pushizo-worker check`; returns its exit status and stdout + stderr.
    static func runCheck(databaseURL: String, extra: [String: String] = [:]) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = ["check"]
        process.environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "PUSHIZO_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ].merging(extra) { _, new in new }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = try await onThread { pipe.fileHandleForReading.readDataToEndOfFile() }
        try await onThread { process.waitUntilExit() }
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
