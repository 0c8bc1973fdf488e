import Foundation
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// The status page of a real `pushizo-worker run` (PostgreSQL, the emulator over TLS) as a real browser renders
/// it: Debian's `chromium`, headless, on loopback only. What the page shows is read from the DOM the browser built
/// (`--dump-dom`), so markup smuggled in through producers' text would show there as elements, and a script in it
/// would have run first.
@Suite("The status page in a real browser")
struct StatusPageBrowserTests {
    /// An app name that would retitle the page if it ran as a script, and tags that would be elements if not escaped.
    static let hostileName = #"<script>document.title='pwned'</script> & <b>Zed's</b>"#
    static let hostileReason = #"operator: <img src=x onerror="document.title='pwned'"> rotating keys"#

    /// A broadcast of 300 devices queued behind its app's paused APNs channel: the page shows the provider's row,
    /// the paused channel with its reason and the app's name, every one escaped; a screenshot is left in
    /// `var/status-page.png` for a person to look at.
    @Test func chromiumShowsTheFleetWithProducersTextEscaped() async throws {
        guard let chromium = findExecutable("chromium") else {
            Issue.record("chromium is not installed (scripts/install-deps.sh installs it: apt-get install chromium)")
            return
        }
        let devices = 300
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    _ = try seed.connection.query("UPDATE apps SET name = $2 WHERE id = $1", [seed.appID, Self.hostileName])
                    _ = try seed.connection.query(
                        "UPDATE app_channels SET paused_until = now() + interval '1 hour', paused_reason = $2 WHERE app_id = $1",
                        [seed.appID, Self.hostileReason])
                    _ = try seed.connection.query(
                        """
                        INSERT INTO subscriptions (app_id, platform, token)
                        SELECT $1, 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30) FROM generate_series(1, $2) n
                        """, [seed.appID, devices])
                    _ = try seed.connection.query(
                        #"INSERT INTO notifications (app_id, message, target) VALUES ($1, '{"contents": {"en": "hi"}}', '{"all": true}')"#,
                        [seed.appID])
                }
                let port = try freePort()
                let process = emulator.workerProcess(databaseURL: url, extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)"])
                try process.run()
                defer { if process.isRunning { process.terminate() } }

                // Until the broadcast is expanded (its deliveries wait for the channel).
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                try await waitUntil("the broadcast's \(devices) deliveries are queued") {
                    try await database.query("SELECT count(*) AS n FROM deliveries")[0].decode(Int.self, "n") == devices
                }
                await database.shutdown()
                _ = try await ProbesEndToEndTests.waitFor("http://127.0.0.1:\(port)/readyz") { $0.status == 200 }

                let page = "http://127.0.0.1:\(port)/"
                let dom = try await Self.browse(chromium, ["--dump-dom", page])
                #expect(dom.contains("<title>pushizo-worker status</title>"), "a script ran: \(dom)")
                #expect(dom.contains(#"<tr id="queue-apns"><th scope="row">apns</th><td>"#), "\(dom)")
                // Due, deferred (the worker defers a paused channel's deliveries) and leased add up to the broadcast.
                let total = WorkerFolderLayeringTests.matches(
                    #"<tr id="queue-total"><th scope="row"><strong>total</strong></th><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td></tr>"#,
                    in: dom, group: 0)
                let cells = total.first.map { WorkerFolderLayeringTests.matches(#"<td>(\d+)</td>"#, in: $0, group: 1) } ?? []
                #expect(cells.compactMap(Int.init).reduce(0, +) == devices, "\(dom)")
                // The paused channel: its app's name and its reason, as text.
                #expect(dom.contains(#"<tr class="paused"><th scope="row"><span class="app-name">&lt;script&gt;document.title='pwned'&lt;/script&gt; &amp; &lt;b&gt;Zed's&lt;/b&gt;</span>"#), "\(dom)")
                #expect(dom.contains(#"<td>apns</td><td>until "#))
                #expect(dom.contains(#"<td>operator: &lt;img src=x onerror="document.title='pwned'"&gt; rotating keys</td>"#), "\(dom)")
                #expect(!dom.contains("<script") && !dom.contains("<img") && !dom.contains("<b>"), "\(dom)")
                #expect(!dom.contains("PRIVATE KEY"))
                // The worker serving the page, by its heartbeat.
                #expect(dom.contains(#"<h2>Workers</h2>"#) && dom.contains(#"<th scope="row">live</th>"#), "\(dom)")

                let screenshot = ReplicatedCluster.repositoryRoot.appendingPathComponent("var/status-page.png")
                try FileManager.default.createDirectory(
                    at: screenshot.deletingLastPathComponent(), withIntermediateDirectories: true)
                try? FileManager.default.removeItem(at: screenshot)
                _ = try await Self.browse(chromium, ["--screenshot=\(screenshot.path)", "--window-size=1280,1300", page])
                let png = try Data(contentsOf: screenshot)
                #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]), "not a PNG: \(screenshot.path)")

                process.terminate()
                try await onThread { process.waitUntilExit() }
                #expect(process.terminationStatus == 0)
            }
        }
    }

    /// Runs headless `chromium` with `arguments` (a profile of its own, deleted after; nothing fetched but the page:
    /// no background networking, component updates, sync or default apps); its standard output. Hang guard: killed
    /// after 2 minutes.
    static func browse(_ chromium: String, _ arguments: [String]) async throws -> String {
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-chromium-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: profile) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: chromium)
        process.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile.path)", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
        ] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let guardKill = Task {
            try await Task.sleep(for: .seconds(120))
            process.terminate()
        }
        defer { guardKill.cancel() }
        let text = try await onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationStatus == 0, "chromium \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        return text
    }
}
