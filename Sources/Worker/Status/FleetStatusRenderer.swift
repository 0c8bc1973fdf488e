import Foundation

/// Prints a ``FleetStatus`` for a terminal (`text`) or a script (`json`). No I/O. Text from the database
/// (worker ids, pause reasons, provider names) goes through ``TerminalText/sanitized(_:)`` and is cut to a
/// bounded width; the JSON keeps values as stored but writes every character ``TerminalText`` considers unsafe
/// as a `\uXXXX` escape, so it is safe on a terminal too and decodes to the stored text.
public enum FleetStatusRenderer {
    /// Longest worker id or pause reason printed in text (characters); longer ones end in "...".
    public static let maximumTextWidth = 120

    /// `until <instant> (in <duration>)`, or `indefinitely` for PostgreSQL's `infinity` (an operator's pause
    /// until resumed).
    static func pauseEnd(_ until: Date, _ now: Date) -> String {
        guard until != .distantFuture else { return "indefinitely" }
        return "until \(instant(until)) (in \(duration(until.timeIntervalSince(now))))"
    }

    /// What the fleet's pause means for claims: `no claims until resumed (pushizo-worker resume --fleet)` for a
    /// pause until resumed; for a timed one, when claims resume by themselves.
    static func fleetPauseEffect(_ pause: FleetStatus.Pause, _ now: Date) -> String {
        guard pause.until != .distantFuture else { return "no claims until resumed (pushizo-worker resume --fleet)" }
        return "no claims until \(instant(pause.until)) (in \(duration(pause.until.timeIntervalSince(now)))), when the pause ends by itself, or until resumed sooner (pushizo-worker resume --fleet)"
    }

    /// Whether the queue's `held` column is shown: while an operator's pause of an app or of the fleet is in force,
    /// or any due row is held.
    static func showsHeld(_ status: FleetStatus) -> Bool {
        status.fleetPause != nil || !status.pausedApps.isEmpty || status.queue.held.value > 0
    }

    /// What holds the held rows: `the fleet's pause` or `the paused apps' pauses`.
    static func heldBy(_ status: FleetStatus) -> String {
        status.fleetPause != nil ? "the fleet's operator pause" : "their apps' operator pauses"
    }

    /// The human-readable report: one section per figure group; estimated figures are prefixed with `~`.
    public static func text(_ status: FleetStatus) -> String {
        var lines: [String] = []
        lines.append("pushizo-worker status at \(instant(status.takenAt))  (~ = estimated, see docs/status.md)")
        if let server = status.server {
            lines.append("database server: \(safe(server.description))")
        }
        if let app = status.app { lines.append("narrowed to app \(app.uuidString.lowercased())") }
        if let pause = status.fleetPause {
            lines.append(
                "FLEET PAUSED \(pauseEnd(pause.until, status.takenAt)): \(pauseWhy(pause.reason, pause.note)); \(fleetPauseEffect(pause, status.takenAt))")
        }
        lines.append("")

        let queue = status.queue
        let held = showsHeld(status)
        func columns(_ name: String, _ due: String, _ heldCount: String, _ deferred: String, _ leased: String) -> [String] {
            held ? [name, due, heldCount, deferred, leased] : [name, due, deferred, leased]
        }
        var table: [[String]] = [columns("queue", "due", "held", "deferred", "leased")]
        for depth in queue.providers {
            table.append(
                columns("  " + safe(depth.provider), figure(depth.due), figure(depth.held), figure(depth.deferred), figure(depth.leased)))
        }
        table.append(columns("  total", figure(queue.due), figure(queue.held), figure(queue.deferred), figure(queue.leased)))
        lines += aligned(table, rightAligned: held ? [1, 2, 3, 4] : [1, 2, 3])
        let floors = [("due", queue.due), ("held", queue.held), ("deferred", queue.deferred)].compactMap { name, figure in
            figure.countedAtLeast.map { "\(name) over \(grouped($0))" }
        }
        if !floors.isEmpty { lines.append("  counted: " + floors.joined(separator: ", ") + "; the rest estimated") }
        if queue.held.value > 0 {
            lines.append("held: \(figure(queue.held)) due, kept from claims by \(heldBy(status)) (not in due or the lag)")
        }
        if let lag = queue.lagSeconds, let oldest = queue.oldestDueAt {
            lines.append("lag: \(duration(lag)) (oldest due delivery due since \(instant(oldest)))")
        } else {
            lines.append("lag: none (nothing is due)")
        }
        if let scheduled = queue.scheduledByLocalTime, scheduled.value > 0 {
            lines.append("scheduled: \(figure(scheduled)) of the deferred wait for their subscriber's local time (delivery_time_of_day)")
        }
        if queue.expiredLeases > 0 {
            lines.append("expired leases: \(grouped(queue.expiredLeases)) (due again: their workers stopped before completing them)")
        }
        lines.append("")

        if status.leases.isEmpty {
            lines.append("leases: none")
        } else {
            var leases: [[String]] = [["leases by worker", "leased", "oldest lease expires", "expired"]]
            for worker in status.leases {
                let expiry = worker.oldestLeaseExpiresAt.map {
                    "\(instant($0)) (in \(duration($0.timeIntervalSince(status.takenAt))))"
                } ?? "-"
                leases.append(["  " + safe(worker.workerID), grouped(worker.leased), expiry, grouped(worker.expired)])
            }
            lines += aligned(leases, rightAligned: [1, 3])
        }
        lines.append("")
        if let workers = status.workers {
            lines += workerLines(workers)
            lines.append("")
        }

        var events: [[String]] = [["events per minute"] + status.events.map { "last \($0.minutes) min" }]
        events.append(["  sent"] + status.events.map { perMinute($0.sent, $0.minutes) })
        events.append(["  failed"] + status.events.map { perMinute($0.failed, $0.minutes) })
        events.append(["  retrying"] + status.events.map { perMinute($0.retrying, $0.minutes) })
        for (name, path) in channelEventRows(status) {
            events.append(["  " + name] + status.events.map { perMinute($0[keyPath: path] ?? .exact(0), $0.minutes) })
        }
        lines += aligned(events, rightAligned: Set(1..<(status.events.count + 1)))
        lines.append("")
        if let channels = status.liveActivityChannels, !channels.isIdle {
            lines += liveActivityChannelLines(channels, status)
            lines.append("")
        }

        let expansion = status.expansion
        lines.append("expansion: \(figure(expansion.expanding)) expanding, \(figure(expansion.pending)) pending")
        for notification in expansion.notifications {
            var line = "  notification \(notification.id.uuidString.lowercased()) (app \(notification.appID.uuidString.lowercased())): \(TerminalWords.count(Int(notification.expanded), "delivery", "deliveries"))"
            if let progress = notification.progress {
                line += ", ~\(percent(progress)) of the audience"
            }
            if let audience = notification.audienceEstimate { line += ", ~\(grouped(audience)) expected" }
            if let last = notification.lastChunkAt {
                line += "; last chunk \(duration(status.takenAt.timeIntervalSince(last))) ago"
            }
            lines.append(line)
        }
        let listed = Int64(expansion.notifications.count)
        if expansion.expanding.value > listed, listed > 0 {
            lines.append("  (\(grouped(listed)) listed, least recently served first)")
        }
        lines.append("")

        // The fleet's pause is printed first (above); then the apps, then the channels (docs/operations.md).
        if !status.pausedApps.isEmpty {
            lines.append("paused apps: \(status.pausedApps.count)")
            for app in status.pausedApps {
                lines.append(
                    "  app \(app.appID.uuidString.lowercased()) \(pauseEnd(app.pausedUntil, status.takenAt)): \(pauseWhy(app.reason, app.note))")
            }
        }
        if status.pausedChannels.isEmpty {
            lines.append("paused channels: none")
        } else {
            lines.append("paused channels: \(status.pausedChannels.count)")
            for channel in status.pausedChannels {
                lines.append(
                    "  app \(channel.appID.uuidString.lowercased()) \(safe(channel.provider)) \(pauseEnd(channel.pausedUntil, status.takenAt)): \(pauseWhy(channel.reason, channel.note))")
            }
        }
        if !status.throttledApps.isEmpty {
            lines.append("")
            var rows = [["throttled apps", "limit/s", "burst", "permits", "due", "drains in"]]
            for app in status.throttledApps {
                let due = app.due.countedAtLeast.map { "over \(grouped($0))" } ?? grouped(app.due.value)
                rows.append([
                    "  app \(app.appID.uuidString.lowercased())", rate(app.maxSendsPerSecond), rate(app.burst),
                    rate(app.permits.rounded(.down)), due,
                    (app.due.countedAtLeast == nil ? "" : "over ")
                        + duration(Double(app.due.value) / app.maxSendsPerSecond),
                ])
            }
            lines += aligned(rows, rightAligned: [1, 2, 3, 4, 5])
        }
        if !status.heldProjects.isEmpty {
            lines.append("")
            var rows = [["fcm projects held by their quota", "quota/min", "permits", "held", "last held"]]
            for project in status.heldProjects {
                rows.append([
                    "  project \(safe(project.project))", grouped(Int64(project.quotaPerMinute)),
                    rate(project.permits.rounded(.down)), grouped(project.heldDeliveries),
                    duration(max(0, status.takenAt.timeIntervalSince(project.heldAt))) + " ago",
                ])
            }
            lines += aligned(rows, rightAligned: [1, 2, 3, 4])
        }
        for note in status.notes { lines.append("note: " + TerminalText.sanitized(note)) }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The rows of Live Activity channel sends under the event rates (`channel sent`, `channel failed`), when a
    /// window counted any: they are part of `sent` and `failed` above, and an app without channels needs no rows of
    /// zeros.
    static func channelEventRows(_ status: FleetStatus) -> [(String, KeyPath<FleetStatus.EventWindow, FleetStatus.Figure?>)] {
        let rows: [(String, KeyPath<FleetStatus.EventWindow, FleetStatus.Figure?>)] = [
            ("channel sent", \.channelSent), ("channel failed", \.channelFailed),
        ]
        let counted = status.events.contains { window in rows.contains { (window[keyPath: $0.1]?.value ?? 0) > 0 } }
        return counted ? rows : []
    }

    /// The Live Activity channels section: the rows' reconciliation, the sends queued, and each failed row.
    static func liveActivityChannelLines(_ channels: FleetStatus.LiveActivityChannels, _ status: FleetStatus) -> [String] {
        var lines = [
            "live activity channels: \(grouped(channels.pending)) pending (a change not yet made at APNs), \(grouped(channels.failed)) failed, \(grouped(channels.active)) active",
            "live activity channel sends: \(grouped(channels.sendsDue)) due, \(grouped(channels.sendsDeferred)) deferred, \(grouped(channels.sendsLeased)) leased",
        ]
        for channel in channels.failedChannels {
            lines.append(
                "  failed: app \(channel.appID.uuidString.lowercased()) channel \(safe(channel.name)): \(safe(channel.reason ?? "(no reason)")) (\(duration(max(0, status.takenAt.timeIntervalSince(channel.failedAt)))) ago)")
        }
        if Int64(channels.failedChannels.count) < channels.failed {
            lines.append("  (\(grouped(Int64(channels.failedChannels.count))) listed, latest first)")
        }
        return lines
    }

    /// The workers section: a count per state, a row per worker, and what a stale worker means.
    static func workerLines(_ workers: [FleetStatus.Worker]) -> [String] {
        guard !workers.isEmpty else { return ["workers: none has written a heartbeat"] }
        let states: [FleetStatus.Worker.State] = [.live, .stopping, .stale, .stopped]
        let counts = states.compactMap { state -> String? in
            let count = workers.filter { $0.state == state }.count
            return count > 0 ? "\(count) \(state.rawValue)" : nil
        }
        var lines = ["workers: " + counts.joined(separator: ", ")]
        var rows = [["  state", "host", "pid", "version", "started", "last seen", "in flight", "claims/min", "sends/min", "leased_by"]]
        for worker in workers {
            let seen = worker.state == .stopped
                ? "stopped \(duration(worker.lastSeenSecondsAgo)) ago" : "\(duration(worker.lastSeenSecondsAgo)) ago"
            rows.append([
                "  " + worker.state.rawValue, safe(worker.host), "\(worker.pid)",
                safe(worker.version) + " (" + safe(worker.commit) + ")", instant(worker.startedAt), seen,
                grouped(worker.inFlight), rate(worker.claimsPerMinute.rounded()), rate(worker.sendsPerMinute.rounded()),
                safe(worker.leasedBy),
            ])
        }
        lines += aligned(rows, rightAligned: [2, 6, 7, 8])
        if workers.contains(where: { $0.state == .stale }) {
            lines.append(
                "  stale: no heartbeat for 3 of its intervals: killed, crashed, hung or cut off from the database; its leases are rescued as they run out")
        }
        return lines
    }

    /// The JSON document (docs/status.md), as every report's JSON is written (``ReportJSON``): sorted keys,
    /// ISO 8601 instants, lower-case UUIDs, `null` for absent values.
    /// - Throws: `EncodingError` (not expected: every value is finite).
    public static func json(_ status: FleetStatus) throws -> String {
        try ReportJSON.encode(status)
    }

    /// The decoder matching ``json(_:)``.
    public static func decoder() -> JSONDecoder {
        ReportJSON.decoder()
    }

    // MARK: Pieces

    /// A pause's reason, and the operator's note after it: `operator: new .p8 key being installed`.
    static func pauseWhy(_ reason: String?, _ note: String?) -> String {
        safe(reason ?? "(no reason)") + (note.map { ": " + safe($0) } ?? "")
    }

    static func safe(_ text: String) -> String {
        let cut = text.count > maximumTextWidth ? String(text.prefix(maximumTextWidth)) + "..." : text
        return TerminalText.sanitized(cut)
    }

    /// `1,234,567`.
    static func grouped(_ value: Int64) -> String {
        TerminalWords.grouped(value)
    }

    static func figure(_ figure: FleetStatus.Figure) -> String {
        (figure.estimated ? "~" : "") + grouped(figure.value)
    }

    /// A count over `minutes` as a rate: whole numbers plain, others with one decimal.
    static func perMinute(_ figure: FleetStatus.Figure, _ minutes: Int) -> String {
        let rate = Double(figure.value) / Double(max(minutes, 1))
        let tenths = Int64((rate * 10).rounded())
        let text = tenths % 10 == 0 ? grouped(tenths / 10) : grouped(tenths / 10) + ".\(tenths % 10)"
        return (figure.estimated ? "~" : "") + text
    }

    /// A rate or permit count: whole numbers grouped, others with up to two decimals.
    static func rate(_ value: Double) -> String {
        // Beyond 10^15 (a limit the column allows up to float8's largest), digits say nothing: `1.7e+308`; below a
        // hundredth, two decimals would say 0.00: `4.94e-324`.
        if !(abs(value) < 1e15) || (value != 0 && abs(value) < 0.01) { return String(format: "%.3g", value) }
        return value == value.rounded() ? grouped(Int64(value)) : String(format: "%.2f", value)
    }

    static func percent(_ fraction: Double) -> String {
        "\(Int((fraction * 100).rounded()))%"
    }

    /// `2026-12-01 02:40:12 UTC`.
    static func instant(_ date: Date) -> String {
        TerminalWords.instant(date)
    }

    /// `3d 4h`, `1h 59m 50s`, `3m 58s`, `42s` (whole seconds, rounded down; negative and NaN as 0s, at most
    /// 10^12 s).
    static func duration(_ seconds: Double) -> String {
        // Capped at about 31,700 years: a queue over a tiny send limit gives any number of seconds (infinity
        // included), and Int64(_:) traps beyond its range.
        var rest = Int64(seconds.isNaN ? 0 : min(max(0, seconds), 1e12))
        let days = rest / 86_400
        rest %= 86_400
        let hours = rest / 3_600
        rest %= 3_600
        let minutes = rest / 60
        let secs = rest % 60
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m \(secs)s" }
        if minutes > 0 { return "\(minutes)m \(secs)s" }
        return "\(secs)s"
    }

    /// Rows padded to column widths, two spaces apart; `rightAligned` columns padded on the left.
    static func aligned(_ rows: [[String]], rightAligned: Set<Int>) -> [String] {
        let columns = rows.map(\.count).max() ?? 0
        let widths = (0..<columns).map { column in rows.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return rightAligned.contains(column) ? padding + cell : cell + padding
            }.joined(separator: "  ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression)
        }
    }
}
