import DeliveryCore
import Foundation
import Testing

/// An instant from ISO 8601 text with an explicit offset, e.g. `2026-03-08T03:00:00-04:00`. Writing the
/// expected local time with its offset makes each row say both the wall clock and the UTC instant.
private func at(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let date = formatter.date(from: text) else { fatalError("bad test timestamp \(text)") }
    return date
}

private func window(_ start: String, _ end: String) -> QuietHoursWindow {
    // Test tables only hold valid windows; a parse failure is a broken table, reported by the crash text.
    guard let w = try? QuietHoursWindow(start: start, end: end) else { fatalError("bad test window \(start)-\(end)") }
    return w
}

/// One row: the window, the subscriber's zone, the attempt (local time with its offset), and the expected
/// release instant (`nil` = send now).
struct QuietCase: Sendable, CustomTestStringConvertible {
    var label: String
    var start: String
    var end: String
    var zone: String
    var instant: String
    var expected: String?
    var testDescription: String { "\(label): \(start)–\(end) \(zone) at \(instant) -> \(expected ?? "send now")" }
}

private let cases: [QuietCase] = [
    // 22:00–08:00 on an ordinary day.
    QuietCase(label: "wrap, small hours", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-10T02:30:00-04:00", expected: "2026-06-10T08:00:00-04:00"),
    QuietCase(label: "wrap, one minute before start", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-10T21:59:00-04:00", expected: nil),
    QuietCase(label: "wrap, second before start", start: "22:00:00", end: "08:00:00", zone: "America/New_York", instant: "2026-06-10T21:59:59-04:00", expected: nil),
    QuietCase(label: "wrap, start is inside", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-10T22:00:00-04:00", expected: "2026-06-11T08:00:00-04:00"),
    QuietCase(label: "wrap, end is outside", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-10T08:00:00-04:00", expected: nil),
    QuietCase(label: "wrap, last quiet second", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-10T07:59:59-04:00", expected: "2026-06-10T08:00:00-04:00"),
    QuietCase(label: "wrap, local midnight", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-06-11T00:00:00-04:00", expected: "2026-06-11T08:00:00-04:00"),
    // 00:00–08:00 does not wrap.
    QuietCase(label: "no wrap, evening", start: "00:00", end: "08:00", zone: "Europe/Paris", instant: "2026-06-10T21:00:00+02:00", expected: nil),
    QuietCase(label: "no wrap, midnight", start: "00:00", end: "08:00", zone: "Europe/Paris", instant: "2026-06-10T00:00:00+02:00", expected: "2026-06-10T08:00:00+02:00"),
    QuietCase(label: "no wrap, afternoon window", start: "13:00", end: "14:30:15", zone: "Europe/Paris", instant: "2026-06-10T14:00:00+02:00", expected: "2026-06-10T14:30:15+02:00"),

    // America/New_York spring forward, 2026-03-08: 02:00 EST -> 03:00 EDT (a 23-hour day).
    QuietCase(label: "NY spring, end in the gap", start: "22:00", end: "02:30", zone: "America/New_York", instant: "2026-03-07T23:00:00-05:00", expected: "2026-03-08T03:00:00-04:00"),
    QuietCase(label: "NY spring, end at gap start", start: "22:00", end: "02:00", zone: "America/New_York", instant: "2026-03-08T01:59:59-05:00", expected: "2026-03-08T03:00:00-04:00"),
    QuietCase(label: "NY spring, 8 hours not 9", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-03-07T23:00:00-05:00", expected: "2026-03-08T08:00:00-04:00"),
    QuietCase(label: "NY spring, after the gap", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-03-08T03:00:00-04:00", expected: "2026-03-08T08:00:00-04:00"),
    // America/New_York fall back, 2026-11-01: 02:00 EDT -> 01:00 EST, 01:00–02:00 twice (a 25-hour day).
    QuietCase(label: "NY fall, end repeated, before", start: "22:00", end: "01:30", zone: "America/New_York", instant: "2026-10-31T23:00:00-04:00", expected: "2026-11-01T01:30:00-04:00"),
    QuietCase(label: "NY fall, in first pass", start: "22:00", end: "01:30", zone: "America/New_York", instant: "2026-11-01T01:15:00-04:00", expected: "2026-11-01T01:30:00-04:00"),
    QuietCase(label: "NY fall, in second pass", start: "22:00", end: "01:30", zone: "America/New_York", instant: "2026-11-01T01:15:00-05:00", expected: "2026-11-01T01:30:00-05:00"),
    QuietCase(label: "NY fall, outside in first pass", start: "22:00", end: "01:30", zone: "America/New_York", instant: "2026-11-01T01:45:00-04:00", expected: nil),
    QuietCase(label: "NY fall, window inside the repeated hour", start: "01:00", end: "01:30", zone: "America/New_York", instant: "2026-11-01T01:10:00-05:00", expected: "2026-11-01T01:30:00-05:00"),
    QuietCase(label: "NY fall, 11 hours not 10", start: "22:00", end: "08:00", zone: "America/New_York", instant: "2026-10-31T22:00:00-04:00", expected: "2026-11-01T08:00:00-05:00"),

    // Europe/Paris spring forward, 2026-03-29: 02:00 CET -> 03:00 CEST.
    QuietCase(label: "Paris spring, end in the gap", start: "22:00", end: "02:30", zone: "Europe/Paris", instant: "2026-03-28T23:00:00+01:00", expected: "2026-03-29T03:00:00+02:00"),
    QuietCase(label: "Paris spring, ordinary end", start: "23:00", end: "07:00", zone: "Europe/Paris", instant: "2026-03-29T01:30:00+01:00", expected: "2026-03-29T07:00:00+02:00"),
    // Europe/Paris fall back, 2026-10-25: 03:00 CEST -> 02:00 CET, 02:00–03:00 twice.
    QuietCase(label: "Paris fall, end repeated, before", start: "22:00", end: "02:30", zone: "Europe/Paris", instant: "2026-10-24T23:00:00+02:00", expected: "2026-10-25T02:30:00+02:00"),
    QuietCase(label: "Paris fall, in first pass", start: "22:00", end: "02:30", zone: "Europe/Paris", instant: "2026-10-25T02:10:00+02:00", expected: "2026-10-25T02:30:00+02:00"),
    QuietCase(label: "Paris fall, in second pass", start: "22:00", end: "02:30", zone: "Europe/Paris", instant: "2026-10-25T02:10:00+01:00", expected: "2026-10-25T02:30:00+01:00"),
    QuietCase(label: "Paris fall, outside between passes", start: "22:00", end: "02:30", zone: "Europe/Paris", instant: "2026-10-25T02:45:00+02:00", expected: nil),

    // Asia/Kathmandu, +05:45 all year.
    QuietCase(label: "Kathmandu, one minute before", start: "22:00", end: "08:00", zone: "Asia/Kathmandu", instant: "2026-06-10T21:59:00+05:45", expected: nil),
    QuietCase(label: "Kathmandu, start", start: "22:00", end: "08:00", zone: "Asia/Kathmandu", instant: "2026-06-10T22:00:00+05:45", expected: "2026-06-11T08:00:00+05:45"),
    QuietCase(label: "Kathmandu, small hours", start: "22:00", end: "08:00", zone: "Asia/Kathmandu", instant: "2026-06-11T02:30:00+05:45", expected: "2026-06-11T08:00:00+05:45"),

    // Australia/Lord_Howe: +10:30 standard, +11:00 summer; the clock moves by 30 minutes at 02:00.
    // Spring forward 2026-10-04: 02:00 -> 02:30.
    QuietCase(label: "Lord Howe spring, end in the gap", start: "22:00", end: "02:15", zone: "Australia/Lord_Howe", instant: "2026-10-03T23:00:00+10:30", expected: "2026-10-04T02:30:00+11:00"),
    QuietCase(label: "Lord Howe spring, ordinary end", start: "22:00", end: "08:00", zone: "Australia/Lord_Howe", instant: "2026-10-03T23:00:00+10:30", expected: "2026-10-04T08:00:00+11:00"),
    // Fall back 2026-04-05: 02:00 -> 01:30, 01:30–02:00 twice.
    QuietCase(label: "Lord Howe fall, first pass", start: "22:00", end: "01:45", zone: "Australia/Lord_Howe", instant: "2026-04-05T01:40:00+11:00", expected: "2026-04-05T01:45:00+11:00"),
    QuietCase(label: "Lord Howe fall, second pass", start: "22:00", end: "01:45", zone: "Australia/Lord_Howe", instant: "2026-04-05T01:40:00+10:30", expected: "2026-04-05T01:45:00+10:30"),
    QuietCase(label: "Lord Howe fall, before", start: "22:00", end: "01:45", zone: "Australia/Lord_Howe", instant: "2026-04-04T23:00:00+11:00", expected: "2026-04-05T01:45:00+11:00"),

    // Pacific/Kiritimati, +14:00: the local date is a day ahead of UTC's most of the day.
    QuietCase(label: "Kiritimati, evening", start: "22:00", end: "08:00", zone: "Pacific/Kiritimati", instant: "2026-06-10T23:00:00+14:00", expected: "2026-06-11T08:00:00+14:00"),
    QuietCase(label: "Kiritimati, small hours", start: "22:00", end: "08:00", zone: "Pacific/Kiritimati", instant: "2026-06-11T02:30:00+14:00", expected: "2026-06-11T08:00:00+14:00"),
    QuietCase(label: "Kiritimati, day", start: "22:00", end: "08:00", zone: "Pacific/Kiritimati", instant: "2026-06-11T12:00:00+14:00", expected: nil),
    // Whole skipped days: Kiritimati 1994-12-31 and Samoa 2011-12-30 never happened locally; the end lands
    // on the first instant after the gap, local midnight of the following day.
    QuietCase(label: "Kiritimati skipped day", start: "22:00", end: "08:00", zone: "Pacific/Kiritimati", instant: "1994-12-30T23:00:00-10:00", expected: "1995-01-01T00:00:00+14:00"),
    QuietCase(label: "Apia skipped day", start: "22:00", end: "08:00", zone: "Pacific/Apia", instant: "2011-12-29T23:00:00-10:00", expected: "2011-12-31T00:00:00+14:00"),

    // UTC itself.
    QuietCase(label: "UTC", start: "22:00", end: "08:00", zone: "UTC", instant: "2026-06-10T23:30:00Z", expected: "2026-06-11T08:00:00Z"),
]

@Suite("Quiet hours: deferral in the subscriber's wall-clock time")
struct QuietHoursDeferralTests {
    @Test(arguments: cases)
    func decides(_ row: QuietCase) {
        let decision = QuietHours.decide(window: window(row.start, row.end), subscriberZone: row.zone, appDefaultZone: nil, at: at(row.instant))
        #expect(decision.deferUntil == row.expected.map(at))
        #expect(decision.windowEnd == decision.deferUntil, "no spread asked")
        #expect(decision.resolution == .subscriber(row.zone))
        #expect(decision.unknownZones.isEmpty)
    }

    /// Over a year in odd and DST zones, every deferral is in the future, lands outside the window and at its
    /// end's wall-clock time (or later, when the end falls in a gap): asking again at the release never defers
    /// again, so a deferral cannot loop.
    @Test(arguments: ["America/New_York", "Europe/Paris", "Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Kiritimati", "Pacific/Chatham", "America/St_Johns", "Africa/Casablanca"])
    func releaseIsLaterAndOutsideTheWindow(zone: String) throws {
        let tz = try #require(TimeZone(identifier: zone))
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = tz
        let windows = [window("22:00", "08:00"), window("00:00", "08:00"), window("01:30", "02:45"), window("02:15", "01:45")]
        var deferred = 0
        // 2026 in steps of 7h13m: every hour of the day is visited on many days, including transition days.
        var instant = at("2026-01-01T00:00:00Z")
        let stop = at("2027-01-01T00:00:00Z")
        while instant < stop {
            for w in windows {
                let decision = QuietHours.decide(window: w, subscriberZone: zone, appDefaultZone: nil, at: instant)
                guard let release = decision.deferUntil else { continue }
                deferred += 1
                #expect(release > instant)
                #expect(release.timeIntervalSince(instant) <= 86_400 + 3_600, "at most a day (plus a DST hour) away")
                let parts = calendar.dateComponents([.hour, .minute, .second], from: release)
                let local = (parts.hour ?? 0) * 3600 + (parts.minute ?? 0) * 60 + (parts.second ?? 0)
                #expect(local >= w.end.secondsOfDay, "\(w) at \(instant): released at local \(local)s")
                #expect(QuietHours.decide(window: w, subscriberZone: zone, appDefaultZone: nil, at: release).deferUntil == nil,
                        "\(w) at \(instant): deferred again at its own release \(release)")
            }
            instant = instant.addingTimeInterval(7 * 3600 + 13 * 60)
        }
        #expect(deferred > 1000)
    }

    @Test func emptyWindowIsOff() {
        let w = window("08:00", "08:00")
        #expect(w.isEmpty)
        for hour in 0..<24 {
            let instant = at("2026-06-10T00:00:00Z").addingTimeInterval(Double(hour) * 3600)
            #expect(QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: instant).deferUntil == nil)
        }
        let midnightToMidnight = window("00:00", "24:00")
        #expect(midnightToMidnight.isEmpty, "24:00 is midnight, so this window is empty too (documented)")
        #expect(QuietHours.decide(window: midnightToMidnight, subscriberZone: "UTC", appDefaultZone: nil, at: at("2026-06-10T03:00:00Z")).deferUntil == nil)
        #expect(QuietHours.decide(window: nil, subscriberZone: "UTC", appDefaultZone: nil, at: at("2026-06-10T23:00:00Z")).deferUntil == nil)
    }

    // Seconds since 1970, not `Date`s: Foundation's `Date.description` traps on a non-finite date, and the
    // test library describes its arguments.
    @Test(arguments: [Double.nan, .infinity, -.infinity, 1e15, -1e15, 95_000_000_001])
    func unplaceableInstantsSendNow(_ seconds: Double) {
        let decision = QuietHours.decide(window: window("00:00", "23:59:59"), subscriberZone: "Europe/Paris", appDefaultZone: nil, at: Date(timeIntervalSince1970: seconds), spreadSeconds: 600, spreadKey: UUID())
        #expect(decision.deferUntil == nil)
    }

    /// Near the ±3000-year bound the arithmetic still answers without trapping, and a deferral is still later.
    @Test(arguments: [94_999_999_000.0, -94_999_999_000.0, Date.distantFuture.timeIntervalSince1970, Date.distantPast.timeIntervalSince1970])
    func extremeButPlaceableInstants(_ seconds: Double) {
        let instant = Date(timeIntervalSince1970: seconds)
        for zone in ["Pacific/Kiritimati", "America/New_York", "Pacific/Pago_Pago"] {
            let decision = QuietHours.decide(window: window("00:00", "23:59:59"), subscriberZone: zone, appDefaultZone: nil, at: instant, spreadSeconds: 86_400, spreadKey: UUID())
            if let release = decision.deferUntil { #expect(release > instant) }
        }
    }

    @Test func expiryBeforeRelease() {
        let decision = QuietHours.decide(window: window("22:00", "08:00"), subscriberZone: "UTC", appDefaultZone: nil, at: at("2026-06-10T23:00:00Z"))
        #expect(decision.expiresBeforeRelease(at("2026-06-11T07:59:59Z")))
        #expect(!decision.expiresBeforeRelease(at("2026-06-11T08:00:00Z")), "the worker's rule: expired once expiresAt < now")
        #expect(!decision.expiresBeforeRelease(nil))
        let outside = QuietHours.decide(window: window("22:00", "08:00"), subscriberZone: "UTC", appDefaultZone: nil, at: at("2026-06-10T12:00:00Z"))
        #expect(!outside.expiresBeforeRelease(at("2026-06-10T12:00:01Z")))
    }
}

@Suite("Quiet hours: zone fallback")
struct QuietHoursZoneTests {
    let w = window("22:00", "08:00")

    @Test func unknownSubscriberZoneUsesAppDefault() {
        for bad in ["Etc/Unknown", "Americas/Vancouver", "", "america/new_york", "Europe/Paris ", "../../etc/passwd", String(repeating: "A/", count: 5000)] {
            let decision = QuietHours.decide(window: w, subscriberZone: bad, appDefaultZone: "Asia/Kathmandu", at: at("2026-06-10T23:00:00+05:45"))
            #expect(decision.resolution == .appDefault("Asia/Kathmandu"))
            #expect(decision.zone == "Asia/Kathmandu")
            #expect(decision.unknownZones == [bad])
            #expect(decision.deferUntil == at("2026-06-11T08:00:00+05:45"), "the app default's wall clock decides")
        }
    }

    @Test func bothUnknownUsesUTC() {
        let decision = QuietHours.decide(window: w, subscriberZone: "Americas/Vancouver", appDefaultZone: "", at: at("2026-06-10T23:00:00Z"))
        #expect(decision.resolution == .utc)
        #expect(decision.zone == "UTC")
        #expect(decision.unknownZones == ["Americas/Vancouver", ""])
        #expect(decision.deferUntil == at("2026-06-11T08:00:00Z"))
    }

    @Test func missingZonesAreNotUnknown() {
        let none = QuietHours.decide(window: w, subscriberZone: nil, appDefaultZone: nil, at: at("2026-06-10T12:00:00Z"))
        #expect(none.resolution == .utc)
        #expect(none.unknownZones.isEmpty)
        let appOnly = QuietHours.decide(window: w, subscriberZone: nil, appDefaultZone: "Europe/Paris", at: at("2026-06-10T23:00:00+02:00"))
        #expect(appOnly.resolution == .appDefault("Europe/Paris"))
        #expect(appOnly.unknownZones.isEmpty)
        #expect(appOnly.deferUntil == at("2026-06-11T08:00:00+02:00"))
    }

    @Test func knownSubscriberZoneWins() {
        let decision = QuietHours.decide(window: w, subscriberZone: "Pacific/Kiritimati", appDefaultZone: "Etc/Unknown", at: at("2026-06-10T12:00:00Z"))
        #expect(decision.resolution == .subscriber("Pacific/Kiritimati"))
        #expect(decision.unknownZones.isEmpty, "the app default is not even looked at")
        // 12:00Z is 02:00 the next day in Kiritimati: quiet until 08:00 there, 18:00Z.
        #expect(decision.deferUntil == at("2026-06-10T18:00:00Z"))
    }

    @Test func zoneNamesAreReportedEvenWhenOutsideTheWindow() {
        let decision = QuietHours.decide(window: w, subscriberZone: "Etc/Unknown", appDefaultZone: nil, at: at("2026-06-10T12:00:00Z"))
        #expect(decision.deferUntil == nil)
        #expect(decision.unknownZones == ["Etc/Unknown"])
    }
}

@Suite("Quiet hours: release spread")
struct QuietHoursSpreadTests {
    let w = window("22:00", "08:00")
    let night = at("2026-06-10T23:00:00Z")
    let end = at("2026-06-11T08:00:00Z")

    @Test func spreadIsBoundedAndDeterministic() {
        var offsets: Set<Int> = []
        for _ in 0..<2000 {
            let key = UUID()
            let first = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: night, spreadSeconds: 900, spreadKey: key)
            let again = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: night.addingTimeInterval(3600), spreadSeconds: 900, spreadKey: key)
            #expect(first.windowEnd == end)
            #expect(first.deferUntil == again.deferUntil, "same subscription, same release")
            let offset = (first.deferUntil ?? .distantPast).timeIntervalSince(end)
            #expect(offset >= 0 && offset < 900)
            #expect(offset == offset.rounded(), "whole seconds")
            offsets.insert(Int(offset))
        }
        // 2000 draws into 900 slots: a working hash fills most of them (expected about 800).
        #expect(offsets.count > 600)
    }

    /// Pinned FNV-1a 64 values (computed independently in Python over `uuid.UUID(...).bytes`), so the release
    /// time of a subscription is the same on every host and after every upgrade.
    @Test func spreadIsStableAcrossProcesses() throws {
        let zero = try #require(UUID(uuidString: "00000000-0000-0000-0000-000000000000"))
        let other = try #require(UUID(uuidString: "6f1d2c3a-9b8e-4f7a-8c5d-0e1f2a3b4c5d"))
        for (key, spread, expected) in [(zero, 900, 621.0), (other, 900, 7.0), (zero, 86_400, 85_221.0), (other, 1_000_000, 46_807.0)] {
            let decision = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: night, spreadSeconds: spread, spreadKey: key)
            #expect(decision.deferUntil.map { $0.timeIntervalSince(end) } == expected)
        }
    }

    @Test func noSpreadWithoutSecondsOrKey() {
        let key = UUID()
        for (seconds, k) in [(0, key as UUID?), (-5, key), (Int.min, key), (900, nil)] {
            let decision = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: night, spreadSeconds: seconds, spreadKey: k)
            #expect(decision.deferUntil == end)
        }
        let huge = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: night, spreadSeconds: Int.max, spreadKey: key)
        #expect((huge.deferUntil ?? .distantPast).timeIntervalSince(end) < Double(QuietHours.maximumSpreadSeconds))
        let outside = QuietHours.decide(window: w, subscriberZone: "UTC", appDefaultZone: nil, at: at("2026-06-10T12:00:00Z"), spreadSeconds: 900, spreadKey: key)
        #expect(outside.deferUntil == nil)
    }
}

@Suite("Quiet hours: window columns")
struct QuietHoursWindowTests {
    @Test func parsesPostgresTimeText() throws {
        let w = try #require(try QuietHoursWindow(start: "22:00:00", end: "08:00"))
        #expect(w.start == LocalTime(hour: 22, minute: 0))
        #expect(w.end == LocalTime(hour: 8, minute: 0))
        #expect(w.wrapsMidnight)
        #expect(LocalTime.parse("07:30:15.123456") == LocalTime(hour: 7, minute: 30, second: 15))
        #expect(LocalTime.parse("24:00:00") == LocalTime(hour: 0, minute: 0))
        #expect(LocalTime.parse("24:00") == LocalTime(hour: 0, minute: 0))
        #expect(LocalTime.parse("23:59:59")?.description == "23:59:59")
    }

    @Test(arguments: ["", "8:00", "22", "22:0", "22:00:0", "25:00", "22:60", "22:00:60", "24:00:01", "24:30", "22:00+02", "22:00:00 ", " 22:00", "22:00:00.", "22:00:00.1234567", "22h00", "٢٢:٠٠", "22:00:00.12x"])
    func rejectsOtherText(_ text: String) {
        #expect(LocalTime.parse(text) == nil)
        #expect(throws: QuietHoursError.self) { try QuietHoursWindow(start: text, end: "08:00") }
        do {
            _ = try QuietHoursWindow(start: "22:00", end: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.code == .invalidTime)
            #expect(error.field == "quiet_hours_end")
        }
    }

    @Test func nullsAreOffOrNamed() throws {
        #expect(try QuietHoursWindow(start: nil, end: nil) == nil)
        do {
            _ = try QuietHoursWindow(start: "22:00", end: nil)
            Issue.record("accepted a null end")
        } catch {
            #expect(error.code == .missingBound)
            #expect(error.field == "quiet_hours_end")
        }
        do {
            _ = try QuietHoursWindow(start: nil, end: "08:00")
            Issue.record("accepted a null start")
        } catch {
            #expect(error.code == .missingBound)
            #expect(error.field == "quiet_hours_start")
            #expect(error.description.hasPrefix("`quiet_hours_start`"))
        }
    }

    @Test func longBadTextIsCutInTheMessage() {
        do {
            _ = try QuietHoursWindow(start: String(repeating: "x", count: 10_000), end: "08:00")
            Issue.record("accepted junk")
        } catch {
            #expect(error.message.count < 100)
        }
    }
}
