import Foundation

/// The status page of the metrics listener (`GET /`, docs/status.md, "The status page"): a ``FleetStatus`` as one
/// HTML5 document, what `pushizo-worker status` prints, with inline CSS only (no script, no external resource: it
/// works offline and under any Content Security Policy) and a `<meta http-equiv="refresh">` that reloads it.
/// A pure function of the report: no I/O, no clock. Every value from the database goes through
/// ``FleetStatusRenderer/safe(_:)`` (control characters shown as escapes, cut to a bounded width) and then
/// ``HTMLText/escaped(_:)``; nothing on the page is a form or a link that writes.
public enum FleetStatusPage {
    /// What the page says besides the report: how old it is and how often it reloads.
    public struct Freshness: Sendable, Equatable {
        /// Seconds between the read and this answer (the page is served from a cache).
        public var ageSeconds: Double
        /// The `refresh` interval written into the page, in seconds.
        public var refreshSeconds: Int

        public init(ageSeconds: Double, refreshSeconds: Int) {
            self.ageSeconds = ageSeconds
            self.refreshSeconds = refreshSeconds
        }
    }

    /// The page of a report.
    public static func html(_ status: FleetStatus, freshness: Freshness) -> String {
        var body: [String] = []
        body.append("<h1>pushizo-worker status</h1>")
        var meta = "at \(text(FleetStatusRenderer.instant(status.takenAt)))"
        if let server = status.server { meta += " &middot; database server \(text(server.description))" }
        meta += " &middot; read \(text(FleetStatusRenderer.duration(freshness.ageSeconds))) ago, reloads every \(freshness.refreshSeconds)s &middot; ~ = estimated"
        body.append("<p class=\"meta\">\(meta)</p>")
        if let app = status.app { body.append("<p class=\"meta\">narrowed to \(appLabel(app, status))</p>") }
        if let pause = status.fleetPause {
            body.append(
                "<p class=\"alert\" id=\"fleet-pause\">Fleet paused \(text(FleetStatusRenderer.pauseEnd(pause.until, status.takenAt))): \(text(why(pause.reason, pause.note))); \(HTMLText.escaped(FleetStatusRenderer.fleetPauseEffect(pause, status.takenAt)))</p>")
        }
        body += queue(status)
        body += workers(status)
        body += events(status)
        body += expansion(status)
        body += pauses(status)
        body += throttled(status)
        body += heldProjects(status)
        body += liveActivityChannels(status)
        body += leases(status)
        if !status.notes.isEmpty {
            body.append("<h2>Notes</h2><ul>" + status.notes.map { "<li>\(text($0))</li>" }.joined() + "</ul>")
        }
        return document(body.joined(separator: "\n"), refreshSeconds: freshness.refreshSeconds)
    }

    /// A pause's reason and the operator's `--note` after it, as the text report writes them
    /// (`operator: new .p8 key being installed`); escaped by the caller.
    static func why(_ reason: String?, _ note: String?) -> String {
        (reason ?? "(no reason)") + (note.map { ": " + $0 } ?? "")
    }

    /// The page when no report could be read (`reason`: already free of secrets, e.g. the database unreachable).
    public static func unavailable(reason: String, refreshSeconds: Int) -> String {
        document(
            "<h1>pushizo-worker status</h1>\n<p class=\"alert\" id=\"unavailable\">The fleet's status cannot be read: \(text(reason))</p>\n<p class=\"meta\">reloads every \(refreshSeconds)s</p>",
            refreshSeconds: refreshSeconds)
    }

    // MARK: Sections

    static func queue(_ status: FleetStatus) -> [String] {
        let queue = status.queue
        let held = FleetStatusRenderer.showsHeld(status)
        func columns(_ name: String, _ due: String, _ heldCount: String, _ deferred: String, _ leased: String) -> [String] {
            held ? [name, due, heldCount, deferred, leased] : [name, due, deferred, leased]
        }
        var rows = queue.providers.map { depth in
            row(
                columns(text(depth.provider), figure(depth.due), figure(depth.held), figure(depth.deferred), figure(depth.leased)),
                id: "queue-\(depth.provider)")
        }
        rows.append(
            row(columns("total", figure(queue.due), figure(queue.held), figure(queue.deferred), figure(queue.leased)), id: "queue-total",
                strong: true))
        var lines = ["<h2>Queue</h2>", table(columns("provider", "due", "held", "deferred", "leased"), rows)]
        if queue.held.value > 0 {
            lines.append(
                "<p id=\"held\">Held: <strong>\(figure(queue.held))</strong> due, kept from claims by \(HTMLText.escaped(FleetStatusRenderer.heldBy(status))) (not in due or the lag)</p>")
        }
        if let lag = queue.lagSeconds, let oldest = queue.oldestDueAt {
            lines.append(
                "<p id=\"lag\">Lag: <strong>\(text(FleetStatusRenderer.duration(lag)))</strong> (oldest due delivery due since \(text(FleetStatusRenderer.instant(oldest))))</p>")
        } else {
            lines.append("<p id=\"lag\">Lag: none (nothing is due)</p>")
        }
        if queue.expiredLeases > 0 {
            lines.append("<p>Expired leases: \(FleetStatusRenderer.grouped(queue.expiredLeases)) (due again)</p>")
        }
        return lines
    }

    /// The worker processes by their heartbeats (nothing when narrowed to an app or before their table exists).
    static func workers(_ status: FleetStatus) -> [String] {
        guard let workers = status.workers else { return [] }
        guard !workers.isEmpty else { return ["<h2>Workers</h2>", "<p>none has written a heartbeat</p>"] }
        let rows = workers.map { worker in
            let seen = FleetStatusRenderer.duration(worker.lastSeenSecondsAgo) + " ago"
            return row([
                text(worker.state.rawValue), text(worker.host), "\(worker.pid)",
                text(worker.version) + " (" + text(worker.commit) + ")", text(FleetStatusRenderer.instant(worker.startedAt)),
                text(seen), FleetStatusRenderer.grouped(worker.inFlight),
                FleetStatusRenderer.rate(worker.claimsPerMinute.rounded()), FleetStatusRenderer.rate(worker.sendsPerMinute.rounded()),
                text(worker.leasedBy),
            ], cssClass: worker.state == .stale ? "paused" : nil)
        }
        var lines = [
            "<h2>Workers</h2>",
            table(
                ["state", "host", "pid", "version", "started", "last seen", "in flight", "claims/min", "sends/min", "leased_by"],
                rows, textual: true),
        ]
        if workers.contains(where: { $0.state == .stale }) {
            lines.append(
                "<p>stale: no heartbeat for 3 of its intervals: killed, crashed, hung or cut off from the database; its leases are rescued as they run out</p>")
        }
        return lines
    }

    static func events(_ status: FleetStatus) -> [String] {
        let header = ["per minute"] + status.events.map { "last \($0.minutes) min" }
        var rows = [("sent", \FleetStatus.EventWindow.sent), ("failed", \.failed), ("retrying", \.retrying)].map { name, path in
            row([name] + status.events.map { FleetStatusRenderer.perMinute($0[keyPath: path], $0.minutes) }, id: "events-\(name)")
        }
        for (name, path) in FleetStatusRenderer.channelEventRows(status) {
            rows.append(
                row(
                    [name] + status.events.map { FleetStatusRenderer.perMinute($0[keyPath: path] ?? .exact(0), $0.minutes) },
                    id: "events-" + name.replacingOccurrences(of: " ", with: "-")))
        }
        return ["<h2>Send and failure rates</h2>", table(header, rows)]
    }

    static func liveActivityChannels(_ status: FleetStatus) -> [String] {
        guard let channels = status.liveActivityChannels, !channels.isIdle else { return [] }
        let grouped = FleetStatusRenderer.grouped
        var lines = [
            "<h2>Live Activity channels</h2>",
            "<p id=\"live-activity-channels\">\(grouped(channels.pending)) pending, \(grouped(channels.failed)) failed, \(grouped(channels.active)) active; sends: \(grouped(channels.sendsDue)) due, \(grouped(channels.sendsDeferred)) deferred, \(grouped(channels.sendsLeased)) leased</p>",
        ]
        guard !channels.failedChannels.isEmpty else { return lines }
        let rows = channels.failedChannels.map { channel in
            row([
                appLabel(channel.appID, status), text(channel.name), text(channel.reason ?? "(no reason)"),
                text(FleetStatusRenderer.duration(max(0, status.takenAt.timeIntervalSince(channel.failedAt))) + " ago"),
            ])
        }
        lines.append(table(["app", "failed channel", "reason", "since"], rows, textual: true))
        return lines
    }

    static func expansion(_ status: FleetStatus) -> [String] {
        let expansion = status.expansion
        var lines = ["<h2>Expansion</h2>", "<p>\(figure(expansion.expanding)) expanding, \(figure(expansion.pending)) pending</p>"]
        guard !expansion.notifications.isEmpty else { return lines }
        let rows = expansion.notifications.map { notification in
            row([
                text(notification.id.uuidString.lowercased()), appLabel(notification.appID, status),
                FleetStatusRenderer.grouped(notification.expanded),
                notification.progress.map { "~" + FleetStatusRenderer.percent($0) } ?? "-",
                notification.audienceEstimate.map { "~" + FleetStatusRenderer.grouped($0) } ?? "-",
                notification.lastChunkAt.map { text(FleetStatusRenderer.duration(status.takenAt.timeIntervalSince($0))) + " ago" } ?? "-",
            ])
        }
        lines.append(table(["notification", "app", "deliveries", "progress", "audience", "last chunk"], rows, textual: true))
        return lines
    }

    /// The paused apps (when any), then the paused channels, in the text's order (the fleet's pause is at the top).
    static func pauses(_ status: FleetStatus) -> [String] {
        var lines: [String] = []
        if !status.pausedApps.isEmpty {
            lines.append("<h2>Paused apps</h2>")
            lines.append(table(
                ["app", "paused", "reason"],
                status.pausedApps.map { app in
                    row([
                        appLabel(app.appID, status), text(FleetStatusRenderer.pauseEnd(app.pausedUntil, status.takenAt)),
                        text(why(app.reason, app.note)),
                    ], id: nil, cssClass: "paused")
                }, textual: true))
        }
        lines.append("<h2>Paused channels</h2>")
        if status.pausedChannels.isEmpty {
            lines.append("<p id=\"paused-channels-none\">none</p>")
        } else {
            lines.append(table(
                ["app", "provider", "paused", "reason"],
                status.pausedChannels.map { channel in
                    row([
                        appLabel(channel.appID, status), text(channel.provider),
                        text(FleetStatusRenderer.pauseEnd(channel.pausedUntil, status.takenAt)), text(why(channel.reason, channel.note)),
                    ], id: nil, cssClass: "paused")
                }, textual: true))
        }
        return lines
    }

    static func throttled(_ status: FleetStatus) -> [String] {
        guard !status.throttledApps.isEmpty else { return [] }
        let rows = status.throttledApps.map { app in
            row([
                appLabel(app.appID, status), FleetStatusRenderer.rate(app.maxSendsPerSecond), FleetStatusRenderer.rate(app.burst),
                FleetStatusRenderer.rate(app.permits.rounded(.down)),
                app.due.countedAtLeast.map { "over " + FleetStatusRenderer.grouped($0) } ?? FleetStatusRenderer.grouped(app.due.value),
            ])
        }
        return ["<h2>Throttled apps</h2>", table(["app", "limit/s", "burst", "permits", "due"], rows)]
    }

    static func heldProjects(_ status: FleetStatus) -> [String] {
        guard !status.heldProjects.isEmpty else { return [] }
        let rows = status.heldProjects.map { project in
            row([
                text(project.project), FleetStatusRenderer.grouped(Int64(project.quotaPerMinute)),
                FleetStatusRenderer.rate(project.permits.rounded(.down)), FleetStatusRenderer.grouped(project.heldDeliveries),
                text(FleetStatusRenderer.duration(max(0, status.takenAt.timeIntervalSince(project.heldAt))) + " ago"),
            ])
        }
        return ["<h2>FCM projects held by their quota</h2>", table(["project", "quota/min", "permits", "held", "last held"], rows)]
    }

    static func leases(_ status: FleetStatus) -> [String] {
        guard !status.leases.isEmpty else { return ["<h2>Leases by worker</h2>", "<p>none</p>"] }
        let rows = status.leases.map { worker in
            row([
                text(worker.workerID), FleetStatusRenderer.grouped(worker.leased),
                worker.oldestLeaseExpiresAt.map { "in " + text(FleetStatusRenderer.duration($0.timeIntervalSince(status.takenAt))) } ?? "-",
                FleetStatusRenderer.grouped(worker.expired),
            ])
        }
        return ["<h2>Leases by worker</h2>", table(["worker", "leased", "oldest lease expires", "expired"], rows, textual: true)]
    }

    // MARK: Pieces

    /// Database text, made safe: control characters escaped and cut (``FleetStatusRenderer/safe(_:)``), then
    /// HTML-escaped.
    static func text(_ value: String) -> String {
        HTMLText.escaped(FleetStatusRenderer.safe(value))
    }

    static func figure(_ figure: FleetStatus.Figure) -> String {
        FleetStatusRenderer.figure(figure)
    }

    /// `name (id)`, or the id alone when the app has no name.
    static func appLabel(_ app: UUID, _ status: FleetStatus) -> String {
        let id = "<code>\(app.uuidString.lowercased())</code>"
        guard let name = status.name(of: app) else { return id }
        return "<span class=\"app-name\">\(text(name))</span> \(id)"
    }

    /// A table row of cells already escaped; the first cell is the row's header.
    static func row(_ cells: [String], id: String? = nil, strong: Bool = false, cssClass: String? = nil) -> String {
        let attributes = (id.map { " id=\"\(HTMLText.escaped($0))\"" } ?? "") + (cssClass.map { " class=\"\($0)\"" } ?? "")
        let first = strong ? "<th scope=\"row\"><strong>\(cells.first ?? "")</strong></th>" : "<th scope=\"row\">\(cells.first ?? "")</th>"
        return "<tr\(attributes)>" + first + cells.dropFirst().map { "<td>\($0)</td>" }.joined() + "</tr>"
    }

    /// A table of rows already made (``row(_:id:strong:cssClass:)``); `textual`: its cells are text, aligned left
    /// (numbers are aligned right).
    static func table(_ header: [String], _ rows: [String], textual: Bool = false) -> String {
        (textual ? "<table class=\"text\">" : "<table>") + "<thead><tr>" + header.map { "<th scope=\"col\">\(HTMLText.escaped($0))</th>" }.joined() + "</tr></thead><tbody>\n"
            + rows.joined(separator: "\n") + "\n</tbody></table>"
    }

    static let style = """
        body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
        h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
        .meta{color:#555;margin:.2em 0}
        .alert{background:#fde8e8;border:1px solid #d33;padding:.5em .8em;font-weight:600}
        table{border-collapse:collapse}th,td{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}
        th[scope=row],table.text td{text-align:left}thead th{text-align:left;color:#555;font-weight:600}
        tr.paused td,tr.paused th{background:#fff6e0}code{font-size:.9em;color:#555}.app-name{font-weight:600}
        """

    static func document(_ body: String, refreshSeconds: Int) -> String {
        """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta http-equiv="refresh" content="\(refreshSeconds)">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>pushizo-worker status</title>
        <style>
        \(style)
        </style>
        </head>
        <body>
        \(body)
        </body>
        </html>

        """
    }
}
