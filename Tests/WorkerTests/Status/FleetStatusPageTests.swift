import Foundation
import Postgres
import Testing

@testable import Worker

/// The status page's HTML as a pure function of the report: no socket, no database.
@Suite("FleetStatus page")
struct FleetStatusPageTests {
    static let freshness = FleetStatusPage.Freshness(ageSeconds: 2.4, refreshSeconds: 10)
    static let hostile = #"<script>alert("x")</script> & <img src=x onerror=alert(1)> 'Zed'"#

    @Test func everyValueFromTheDatabaseIsEscaped() {
        var status = FleetStatusRendererTests.sample(workerID: Self.hostile, reason: "operator: " + Self.hostile)
        status.appNames = [.init(appID: FleetStatusRendererTests.app, name: Self.hostile + "\u{1B}[31m")]
        status.pausedApps = [.init(appID: FleetStatusRendererTests.app, pausedUntil: .distantFuture, reason: Self.hostile)]
        status.fleetPause = .init(until: .distantFuture, reason: Self.hostile)
        status.notes = [Self.hostile]
        status.queue.providers.append(.init(provider: Self.hostile, due: .exact(1), deferred: .exact(0), leased: .exact(0)))
        let html = FleetStatusPage.html(status, freshness: Self.freshness)
        let escaped = #"&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt; &#39;Zed&#39;"#
        // The name, the reasons, the worker id, the provider and the note: each escaped, none as markup.
        #expect(html.components(separatedBy: escaped).count - 1 >= 7)
        #expect(!html.contains("<script"))
        #expect(!html.contains("<img"))
        #expect(!html.contains(Self.hostile))
        // A terminal escape in a name is shown, not passed on.
        #expect(html.contains(#"\u{1B}[31m"#) && !html.contains("\u{1B}"))
        #expect(html.contains("<p class=\"alert\" id=\"fleet-pause\">Fleet paused indefinitely: "))
    }

    @Test func showsTheQueueRatesPausesAndThrottles() {
        var status = FleetStatusRendererTests.sample()
        status.appNames = [.init(appID: FleetStatusRendererTests.app, name: "Acme News")]
        status.throttledApps = [.init(appID: FleetStatusRendererTests.app, maxSendsPerSecond: 50, burst: 100, permits: 12.7, due: .exact(3_000))]
        let html = FleetStatusPage.html(status, freshness: Self.freshness)
        #expect(html.hasPrefix("<!DOCTYPE html>\n<html lang=\"en\">"))
        #expect(html.contains(#"<meta http-equiv="refresh" content="10">"#))
        #expect(html.contains("<tr id=\"queue-apns\"><th scope=\"row\">apns</th><td>~1,000,000</td><td>10</td><td>2</td></tr>"))
        #expect(html.contains("<tr id=\"queue-total\"><th scope=\"row\"><strong>total</strong></th><td>~1,234,567</td><td>12</td><td>3</td></tr>"))
        #expect(html.contains("Lag: <strong>1h 2m 5s</strong>"))
        #expect(html.contains("<tr id=\"events-sent\"><th scope=\"row\">sent</th><td>120</td><td>120.2</td><td>~120,000</td></tr>"))
        #expect(html.contains(
            "<tr class=\"paused\"><th scope=\"row\"><span class=\"app-name\">Acme News</span> <code>00000000-0000-4000-8000-000000000001</code></th><td>fcm</td><td>until 2026-09-21 14:17:18 UTC (in 3m 58s)</td><td>credentials_refused: InvalidProviderToken</td></tr>"))
        #expect(html.contains("<td>50</td><td>100</td><td>12</td><td>3,000</td>"))
        #expect(html.contains("~25%") && html.contains("~1,000,000"))
        #expect(html.contains("read 2s ago, reloads every 10s"))
        // Inline CSS only: no script, no external resource, nothing that writes.
        #expect(!html.contains("<script") && !html.contains("<link") && !html.contains("src=") && !html.contains("<form"))
    }

    @Test func anOperatorsPauseShowsItsNoteEscaped() {
        var status = FleetStatusRendererTests.sample(reason: "operator")
        status.pausedChannels[0].note = "new .p8 key <b>now</b>"
        var app = FleetStatus.PausedApp(appID: FleetStatusRendererTests.app, pausedUntil: .distantFuture, reason: "operator")
        app.note = "drain"
        status.pausedApps = [app]
        var fleet = FleetStatus.Pause(until: .distantFuture, reason: "operator")
        fleet.note = "maintenance"
        status.fleetPause = fleet
        let html = FleetStatusPage.html(status, freshness: Self.freshness)
        #expect(html.contains("<td>operator: new .p8 key &lt;b&gt;now&lt;/b&gt;</td>"))
        #expect(html.contains("<td>operator: drain</td>"))
        #expect(html.contains("Fleet paused indefinitely: operator: maintenance; no claims"))
        // As in the text (docs/operations.md, "Pausing and resuming"): the fleet's pause, then the paused apps,
        // then the paused channels.
        let order = ["id=\"fleet-pause\"", "<h2>Paused apps</h2>", "<h2>Paused channels</h2>"].map { html.range(of: $0)?.lowerBound }
        #expect(order.allSatisfy { $0 != nil } && order == order.sorted { $0! < $1! }, "\(html)")
    }

    @Test func showsTheWorkersByHeartbeatWithTheirTextEscaped() {
        var status = FleetStatusRendererTests.sample()
        let now = FleetStatusRendererTests.now
        status.workers = [
            .init(
                workerID: UUID(), leasedBy: "host-a:17", host: Self.hostile, pid: 17, version: "0.9.0", commit: "1a2b3c4d5e6f",
                roles: ["expand", "send"], state: .live, startedAt: now.addingTimeInterval(-3_600), lastSeenAt: now,
                lastSeenSecondsAgo: 2, heartbeatSeconds: 5, inFlight: 12, claimsPerMinute: 30, sendsPerMinute: 1_200,
                stoppingAt: nil, stoppedAt: nil),
            .init(
                workerID: UUID(), leasedBy: "host-b:9", host: "host-b", pid: 9, version: "0.9.0", commit: "1a2b3c4d5e6f",
                roles: ["send"], state: .stale, startedAt: now.addingTimeInterval(-7_200), lastSeenAt: now.addingTimeInterval(-60),
                lastSeenSecondsAgo: 60, heartbeatSeconds: 5, inFlight: 0, claimsPerMinute: 0, sendsPerMinute: 0,
                stoppingAt: nil, stoppedAt: nil),
        ]
        let html = FleetStatusPage.html(status, freshness: Self.freshness)
        #expect(html.contains("<h2>Workers</h2>"))
        #expect(html.contains(
            "<tr><th scope=\"row\">live</th><td>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt; &#39;Zed&#39;</td><td>17</td><td>0.9.0 (1a2b3c4d5e6f)</td>"))
        #expect(html.contains("<td>2s ago</td><td>12</td><td>30</td><td>1,200</td><td>host-a:17</td></tr>"))
        #expect(html.contains("<tr class=\"paused\"><th scope=\"row\">stale</th><td>host-b</td>"))
        #expect(html.contains("stale: no heartbeat for 3 of its intervals"))
        #expect(!html.contains("<script"))
        // Narrowed to an app (no workers listed): no section.
        status.workers = nil
        #expect(!FleetStatusPage.html(status, freshness: Self.freshness).contains("<h2>Workers</h2>"))
    }

    @Test func anEmptyFleetSaysSo() {
        let status = FleetStatusRendererTests.empty()
        let html = FleetStatusPage.html(status, freshness: Self.freshness)
        #expect(html.contains("<tr id=\"queue-webpush\"><th scope=\"row\">webpush</th><td>0</td><td>0</td><td>0</td></tr>"))
        #expect(html.contains("Lag: none (nothing is due)"))
        #expect(html.contains("<p id=\"paused-channels-none\">none</p>"))
        #expect(!html.contains("Paused apps") && !html.contains("Throttled apps") && !html.contains("fleet-pause"))
        #expect(html.contains("<h2>Leases by worker</h2>\n<p>none</p>"))
    }

    @Test func anUnreadableDatabaseIsAPageToo() {
        let html = FleetStatusPage.unavailable(reason: "connection refused <at> 10.0.0.1", refreshSeconds: 10)
        #expect(html.contains("The fleet's status cannot be read: connection refused &lt;at&gt; 10.0.0.1"))
        #expect(html.contains(#"content="10""#))
    }

    @Test func escapesTheFiveSpecialCharacters() {
        #expect(HTMLText.escaped(#"a&b<c>d"e'f"#) == "a&amp;b&lt;c&gt;d&quot;e&#39;f")
        #expect(HTMLText.escaped("plain ünïcödé") == "plain ünïcödé")
    }
}
