import DeliveryCore
import Foundation
import Testing

/// An instant from ISO 8601 text with an explicit offset (the expected local time and its offset in one).
private func at(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let date = formatter.date(from: text) else { fatalError("bad test timestamp \(text)") }
    return date
}

private func time(_ text: String) -> LocalTime {
    guard let parsed = LocalTimeDelivery.parseTimeOfDay(text) else { fatalError("bad test time \(text)") }
    return parsed
}

/// One row: time of day, subscriber zone, notification start, expected due instant (`nil`: due at once).
struct LocalTimeCase: Sendable, CustomTestStringConvertible {
    var label: String
    var time: String
    var zone: String
    var start: String
    var expected: String
    var testDescription: String { "\(label): \(time) \(zone) from \(start) -> \(expected)" }
}

/// Shared with the SQL agreement test (Tests/WorkerTests/Queue/LocalTimeExpansionTests.swift keeps its own
/// copy of the zones and instants; these rows pin the answers).
private let cases: [LocalTimeCase] = [
    LocalTimeCase(label: "later today", time: "09:00", zone: "Europe/Paris", start: "2026-12-01T06:00:00+01:00", expected: "2026-12-01T09:00:00+01:00"),
    LocalTimeCase(label: "already passed: tomorrow", time: "09:00", zone: "Europe/Paris", start: "2026-12-01T09:00:01+01:00", expected: "2026-12-02T09:00:00+01:00"),
    LocalTimeCase(label: "exactly now: at the start", time: "09:00", zone: "Europe/Paris", start: "2026-12-01T09:00:00+01:00", expected: "2026-12-01T09:00:00+01:00"),
    LocalTimeCase(label: "midnight", time: "00:00", zone: "America/New_York", start: "2026-12-01T23:59:00-05:00", expected: "2026-12-02T00:00:00-05:00"),
    LocalTimeCase(label: "last minute of the day", time: "23:59", zone: "America/New_York", start: "2026-12-01T00:00:00-05:00", expected: "2026-12-01T23:59:00-05:00"),
    // +14 and -12: the same UTC start is a different local day.
    LocalTimeCase(label: "+14 Kiritimati", time: "09:00", zone: "Pacific/Kiritimati", start: "2026-12-01T00:00:00Z", expected: "2026-12-02T09:00:00+14:00"),
    LocalTimeCase(label: "-12 Etc/GMT+12", time: "09:00", zone: "Etc/GMT+12", start: "2026-12-01T00:00:00Z", expected: "2026-12-01T09:00:00-12:00"),
    // Half and quarter hours.
    LocalTimeCase(label: "Kolkata +05:30", time: "09:00", zone: "Asia/Kolkata", start: "2026-12-01T00:00:00Z", expected: "2026-12-01T09:00:00+05:30"),
    LocalTimeCase(label: "Kathmandu +05:45", time: "09:00", zone: "Asia/Kathmandu", start: "2026-12-01T00:00:00Z", expected: "2026-12-01T09:00:00+05:45"),
    LocalTimeCase(label: "Eucla +08:45", time: "09:00", zone: "Australia/Eucla", start: "2026-12-01T00:00:00Z", expected: "2026-12-01T09:00:00+08:45"),
    LocalTimeCase(label: "Eucla, passed by a quarter hour", time: "08:30", zone: "Australia/Eucla", start: "2026-12-01T00:00:00Z", expected: "2026-12-02T08:30:00+08:45"),
    // America/New_York spring forward, 2026-03-08: 02:00 EST -> 03:00 EDT. 02:30 does not exist that day.
    LocalTimeCase(label: "gap: moved to the transition", time: "02:30", zone: "America/New_York", start: "2026-03-08T00:00:00-05:00", expected: "2026-03-08T03:00:00-04:00"),
    LocalTimeCase(label: "gap start", time: "02:00", zone: "America/New_York", start: "2026-03-08T00:00:00-05:00", expected: "2026-03-08T03:00:00-04:00"),
    LocalTimeCase(label: "after the gap: next day exists", time: "02:30", zone: "America/New_York", start: "2026-03-08T03:10:00-04:00", expected: "2026-03-09T02:30:00-04:00"),
    LocalTimeCase(label: "09:00 on the 23-hour day", time: "09:00", zone: "America/New_York", start: "2026-03-07T12:00:00-05:00", expected: "2026-03-08T09:00:00-04:00"),
    // Fall back, 2026-11-01: 02:00 EDT -> 01:00 EST; 01:30 exists twice.
    LocalTimeCase(label: "overlap: first occurrence", time: "01:30", zone: "America/New_York", start: "2026-11-01T00:00:00-04:00", expected: "2026-11-01T01:30:00-04:00"),
    LocalTimeCase(label: "overlap: start between them", time: "01:30", zone: "America/New_York", start: "2026-11-01T01:15:00-05:00", expected: "2026-11-01T01:30:00-05:00"),
    LocalTimeCase(label: "overlap: both passed", time: "01:30", zone: "America/New_York", start: "2026-11-01T01:45:00-05:00", expected: "2026-11-02T01:30:00-05:00"),
    // Europe/London: gap at 01:00.
    LocalTimeCase(label: "London gap", time: "01:15", zone: "Europe/London", start: "2026-03-29T00:00:00Z", expected: "2026-03-29T02:00:00+01:00"),
    // Australia/Lord_Howe: a 30-minute DST gap, 2026-10-04 02:00 -> 02:30.
    LocalTimeCase(label: "Lord Howe half-hour gap", time: "02:15", zone: "Australia/Lord_Howe", start: "2026-10-04T00:00:00+10:30", expected: "2026-10-04T02:30:00+11:00"),
    // A whole skipped day: Pacific/Kiritimati went from -10 to +14 on 1994-12-31.
    LocalTimeCase(label: "skipped day", time: "09:00", zone: "Pacific/Kiritimati", start: "1994-12-30T10:00:00-10:00", expected: "1995-01-01T00:00:00+14:00"),
]

@Suite("Local-time delivery (pure rule)")
struct LocalTimeDeliveryTests {
    @Test(arguments: cases)
    func dueInstant(_ row: LocalTimeCase) {
        let due = LocalTimeDelivery.due(
            timeOfDay: time(row.time), subscriberZone: row.zone, appDefaultZone: "UTC", start: at(row.start))
        #expect(due.dueAt == at(row.expected))
        #expect(due.zone == row.zone)
        #expect(due.resolution == .subscriber(row.zone))
    }

    @Test func dueIsNeverBeforeStartNorMoreThanADayAndAnHourAfter() throws {
        let zones = ["UTC", "Pacific/Kiritimati", "Etc/GMT+12", "Asia/Kathmandu", "America/New_York", "Australia/Lord_Howe"]
        var start = at("2026-03-01T00:00:00Z")
        for _ in 0..<200 {
            for zone in zones {
                for text in ["00:00", "02:30", "09:00", "23:59"] {
                    let due = try #require(
                        LocalTimeDelivery.due(timeOfDay: time(text), subscriberZone: zone, appDefaultZone: nil, start: start).dueAt)
                    #expect(due >= start)
                    #expect(due.timeIntervalSince(start) <= 25 * 3600)
                }
            }
            start = start.addingTimeInterval(97_213)  // about 27 hours: walks through every time of day
        }
    }

    @Test func fractionalStartAfterTheMinuteGoesToTomorrow() {
        let start = at("2026-12-01T09:00:00Z").addingTimeInterval(0.25)
        let due = LocalTimeDelivery.due(timeOfDay: time("09:00"), subscriberZone: "UTC", appDefaultZone: nil, start: start)
        #expect(due.dueAt == at("2026-12-02T09:00:00Z"))
    }

    @Test func unknownAndMissingZonesFallBackLikeQuietHours() {
        let start = at("2026-12-01T00:00:00Z")
        let unknown = LocalTimeDelivery.due(
            timeOfDay: time("09:00"), subscriberZone: "Americas/Vancouver", appDefaultZone: "Asia/Kolkata", start: start)
        #expect(unknown.zone == "Asia/Kolkata")
        #expect(unknown.resolution == .appDefault("Asia/Kolkata"))
        #expect(unknown.unknownZones == ["Americas/Vancouver"])
        #expect(unknown.dueAt == at("2026-12-01T09:00:00+05:30"))
        let none = LocalTimeDelivery.due(timeOfDay: time("09:00"), subscriberZone: nil, appDefaultZone: "Etc/Unknown", start: start)
        #expect(none.zone == "UTC")
        #expect(none.resolution == .utc)
        #expect(none.unknownZones == ["Etc/Unknown"])
        #expect(none.dueAt == at("2026-12-01T09:00:00Z"))
        let folded = LocalTimeDelivery.due(timeOfDay: time("09:00"), subscriberZone: "europe/paris", appDefaultZone: nil, start: start)
        #expect(folded.zone == "UTC")
    }

    @Test func unplaceableStartsHaveNoSchedule() {
        for start in [Date.distantFuture.addingTimeInterval(1e12), Date(timeIntervalSince1970: .infinity), Date(timeIntervalSince1970: -.infinity), Date(timeIntervalSince1970: .nan)] {
            #expect(LocalTimeDelivery.due(timeOfDay: time("09:00"), subscriberZone: "UTC", appDefaultZone: nil, start: start).dueAt == nil)
        }
    }

    @Test(arguments: ["9:00", "09:0", "24:00", "23:60", "09:00:00", " 09:00", "09:00 ", "09-00", "0900", "", "٠٩:٠٠", "09:00Z", "+9:00"])
    func malformedTimesAreRefused(_ text: String) {
        #expect(LocalTimeDelivery.parseTimeOfDay(text) == nil)
        #expect(throws: MessageError.self) {
            try NotificationMessage.deliveryTimeOfDay(.string(text))
        }
    }

    @Test func messageFieldParsesAndNamesItself() throws {
        let message = try NotificationMessage(json: ["contents": ["en": "Hi"], "delivery_time_of_day": "09:30"])
        #expect(message.deliveryTimeOfDay == LocalTime(hour: 9, minute: 30))
        #expect(try NotificationMessage(json: ["contents": "Hi", "delivery_time_of_day": .null]).deliveryTimeOfDay == nil)
        do {
            _ = try NotificationMessage(json: ["contents": "Hi", "delivery_time_of_day": 900])
            Issue.record("a number was accepted")
        } catch {
            #expect(error.field == "delivery_time_of_day")
            #expect(error.code == .wrongType)
        }
        do {
            _ = try NotificationMessage(json: ["contents": "Hi", "delivery_time_of_day": "25:00"])
            Issue.record("25:00 was accepted")
        } catch {
            #expect(error.field == "delivery_time_of_day")
            #expect(error.description.contains("HH:MM"))
        }
    }
}

/// How local time composes with the rest of the one decision path.
@Suite("Local-time delivery in the decision")
struct LocalTimeDecisionTests {
    private func facts(start: Date, zone: String?, due: Date?, quiet: (String, String)? = nil) -> DeliveryFacts {
        var facts = DeliveryFacts(
            attempt: 1, maxAttempts: 5, notificationCanceled: false, notificationStart: start,
            subscriptionID: UUID(), capKey: UUID(), subscriptionStatus: "active", platform: Platform("ios"),
            hasChannel: true, channelPausedUntil: nil, quietHoursStart: quiet?.0, quietHoursEnd: quiet?.1,
            timezone: zone, defaultTimezone: "UTC")
        facts.localTimeDueAt = due
        return facts
    }

    private func message(_ extra: [String: JSONValue]) throws -> NotificationMessage {
        var members: [String: JSONValue] = ["contents": "Hi", "delivery_time_of_day": "09:00"]
        for (key, value) in extra { members[key] = value }
        return try NotificationMessage(json: .object(members))
    }

    private func decide(_ facts: DeliveryFacts, now: Date, _ message: NotificationMessage) -> DeliveryStep {
        var decision = DeliveryDecision(facts, now: now)
        decision.messageLoaded(message)
        return decision.next()
    }

    @Test func beforeTheLocalTimeItDefersWithTheZone() throws {
        let start = at("2026-12-01T00:00:00Z")
        var f = facts(start: start, zone: "Asia/Kathmandu", due: nil)
        f.computesLocalTimeDue = true
        let step = decide(f, now: start, try message([:]))
        #expect(step == .complete(
            .deferred(until: at("2026-12-01T09:00:00+05:45"),
                      detail: ["zone": "Asia/Kathmandu", "delivery_time_of_day": "09:00"], reason: .localTime),
            provider: .apns))
        #expect(DeliveryOutcome.deferred(until: start, reason: .localTime).reason == DeliveryReason.localTime)
    }

    @Test func theQueuesDueInstantIsTheAuthority() throws {
        let start = at("2026-12-01T00:00:00Z")
        // The database said 03:00 (say a tz database differing from Foundation's): at 03:00 it is sent.
        let f = facts(start: start, zone: "Asia/Kathmandu", due: at("2026-12-01T03:00:00Z"))
        #expect(decide(f, now: at("2026-12-01T03:00:00Z"), try message([:])) == .send(.apns))
        // Claimed a little early by the worker's clock (skew with the database's): sent, not re-deferred.
        #expect(decide(f, now: at("2026-12-01T02:59:30Z"), try message([:])) == .send(.apns))
        // Far earlier (a run_at changed by hand): deferred to the queued instant.
        guard case .complete(.deferred(let until, _, .localTime), _) = decide(f, now: at("2026-12-01T02:00:00Z"), try message([:])) else {
            Issue.record("expected a local-time deferral an hour early")
            return
        }
        #expect(until == at("2026-12-01T03:00:00Z"))
    }

    @Test func expiringBeforeTheLocalTimeIsSkippedExpired() throws {
        let start = at("2026-12-01T00:00:00Z")
        let due = at("2026-12-01T09:00:00Z")
        let step = decide(facts(start: start, zone: "UTC", due: due), now: start, try message(["ttl": 3600]))
        guard case .complete(.skipped(let reason, let detail), _) = step else {
            Issue.record("expected a skip, got \(step)")
            return
        }
        #expect(reason == DeliveryReason.expired)
        #expect(detail["local_time_due"] == .string(due.formatted(.iso8601)))
        // ttl 0 cannot wait for a later local time either.
        let zero = decide(facts(start: start, zone: "UTC", due: due), now: start, try message(["ttl": 0]))
        guard case .complete(.skipped(.expired, _), _) = zero else {
            Issue.record("ttl 0: expected a skip, got \(zero)")
            return
        }
        // A ttl reaching past the local time waits.
        let long = decide(facts(start: start, zone: "UTC", due: due), now: start, try message(["ttl": 32_400]))
        guard case .complete(.deferred(let until, _, .localTime), _) = long else {
            Issue.record("expected a local-time deferral, got \(long)")
            return
        }
        #expect(until == due)
    }

    @Test func aLocalTimeInsideQuietHoursIsDeferredByThem() throws {
        let due = at("2026-12-01T07:00:00Z")
        let f = facts(start: at("2026-12-01T00:00:00Z"), zone: "UTC", due: due, quiet: ("22:00", "08:00"))
        let step = decide(f, now: due, try message([:]))
        guard case .complete(.deferred(let until, _, .quietHours), _) = step else {
            Issue.record("expected quiet hours, got \(step)")
            return
        }
        #expect(until == at("2026-12-01T08:00:00Z"))
    }

    @Test func canceledAndCappedDecideAsBefore() throws {
        let due = at("2026-12-01T09:00:00Z")
        var canceled = facts(start: at("2026-12-01T00:00:00Z"), zone: "UTC", due: due)
        canceled.notificationCanceled = true
        #expect(decide(canceled, now: due, try message([:])) == .complete(.skipped(reason: .canceled), provider: nil))
        // Caps are asked only at the send, i.e. at the local time, never at scheduling.
        var capped = facts(start: at("2026-12-01T00:00:00Z"), zone: "UTC", due: due)
        capped.frequencyCaps = try FrequencyCaps(parsing: [["max": 1, "per_seconds": 86_400]])
        let early = decide(capped, now: at("2026-12-01T00:00:00Z"), try message([:]))
        guard case .complete(.deferred(_, _, .localTime), _) = early else {
            Issue.record("expected a local-time deferral before any cap, got \(early)")
            return
        }
        guard case .reserveFrequencyCap = decide(capped, now: due, try message([:])) else {
            Issue.record("expected the cap reservation at the local time")
            return
        }
    }
}
