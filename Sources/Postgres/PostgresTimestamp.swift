import Foundation

/// Conversions between `Date` and PostgreSQL timestamp text without `DateFormatter`/`Calendar` (slow,
/// locale-dependent): proleptic Gregorian arithmetic in UTC, microsecond resolution (docs §8.5).
enum PostgresTimestamp {
    /// `2024-05-01T12:34:56.123456Z` (ISO 8601, UTC, always six fraction digits). Years outside
    /// 1...9999 are written with `BC` / extra digits as PostgreSQL's input accepts.
    static func format(_ date: Date) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        append(date, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The instant as a binary-format `timestamptz` (PostgreSQL's `timestamptz_send`): microseconds since
    /// 2000-01-01 00:00 UTC, rounded as ``format(_:)`` rounds; `Int64.max` / `Int64.min` (the server's
    /// `DT_NOEND` / `DT_NOBEGIN`, `infinity` / `-infinity`) where ``format(_:)`` writes those words.
    static func postgresMicroseconds(_ date: Date) -> Int64 {
        if date == .distantFuture { return .max }
        if date == .distantPast { return .min }
        let sinceReference = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        guard sinceReference >= Double(firstMicros) else { return .min }
        guard sinceReference < Double(endMicros) else { return .max }
        return Int64(sinceReference) + 31_622_400_000_000
    }

    /// Appends ``format(_:)``'s text to `bytes`, without building a `String`.
    static func append(_ date: Date, to bytes: inout [UInt8]) {
        if date == .distantFuture { return bytes.append(contentsOf: "infinity".utf8) }
        if date == .distantPast { return bytes.append(contentsOf: "-infinity".utf8) }
        // From the reference date (2001), Date's own storage, so no precision is lost converting epochs.
        // Beyond PostgreSQL's range (or NaN) it is `infinity` / `-infinity`, never a trap or a value the server
        // refuses: a producer's far-future timestamp read back and written again must not fail a statement.
        let sinceReference = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        guard sinceReference >= Double(firstMicros) else { return bytes.append(contentsOf: "-infinity".utf8) }
        guard sinceReference < Double(endMicros) else { return bytes.append(contentsOf: "infinity".utf8) }
        let referenceDayMicros = Int64(sinceReference)
        var days = referenceDayMicros / 86_400_000_000
        var micros = referenceDayMicros % 86_400_000_000
        if micros < 0 { micros += 86_400_000_000; days -= 1 }
        days += referenceDays
        let (year, month, day) = civil(fromDays: days)
        let seconds = micros / 1_000_000
        let fraction = micros % 1_000_000
        let bc = year <= 0
        let shownYear = bc ? 1 - year : year
        pad(shownYear, 4, &bytes)
        bytes.append(UInt8(ascii: "-"))
        pad(month, 2, &bytes)
        bytes.append(UInt8(ascii: "-"))
        pad(day, 2, &bytes)
        bytes.append(UInt8(ascii: "T"))
        pad(seconds / 3600, 2, &bytes)
        bytes.append(UInt8(ascii: ":"))
        pad(seconds / 60 % 60, 2, &bytes)
        bytes.append(UInt8(ascii: ":"))
        pad(seconds % 60, 2, &bytes)
        bytes.append(UInt8(ascii: "."))
        pad(fraction, 6, &bytes)
        bytes.append(UInt8(ascii: "Z"))
        if bc { bytes.append(contentsOf: " BC".utf8) }
    }

    /// Parses `YYYY-MM-DD[ T]HH:MM:SS[.ffffff][Z|±HH[:MM[:SS]]][ BC]`, a bare date, or `infinity`.
    /// A missing offset means UTC. Nil when malformed.
    static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse($0) }
    }

    /// ``parse(_:)`` of the text's UTF-8 bytes.
    static func parse(_ b: UnsafeBufferPointer<UInt8>) -> Date? {
        if b.elementsEqual("infinity".utf8) { return .distantFuture }
        if b.elementsEqual("-infinity".utf8) { return .distantPast }
        var i = 0
        func number(minDigits: Int, maxDigits: Int) -> Int64? {
            var value: Int64 = 0
            var n = 0
            while i < b.count, n < maxDigits, b[i] >= 48, b[i] <= 57 {
                value = value * 10 + Int64(b[i] - 48)
                i += 1
                n += 1
            }
            return n >= minDigits ? value : nil
        }
        func expect(_ c: Unicode.Scalar) -> Bool {
            guard i < b.count, b[i] == UInt8(ascii: c) else { return false }
            i += 1
            return true
        }
        guard var year = number(minDigits: 4, maxDigits: 7), expect("-"),
              let month = number(minDigits: 2, maxDigits: 2), expect("-"),
              let day = number(minDigits: 2, maxDigits: 2),
              (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var micros: Int64 = 0
        var offsetSeconds: Int64 = 0
        if i < b.count, b[i] == UInt8(ascii: " ") || b[i] == UInt8(ascii: "T") {
            let save = i
            i += 1
            if i < b.count, b[i] >= 48, b[i] <= 57 {
                guard let hour = number(minDigits: 2, maxDigits: 2), expect(":"),
                      let minute = number(minDigits: 2, maxDigits: 2), expect(":"),
                      let second = number(minDigits: 2, maxDigits: 2),
                      hour <= 24, minute <= 59, second <= 60
                else { return nil }
                micros = (hour * 3600 + minute * 60 + second) * 1_000_000
                if i < b.count, b[i] == UInt8(ascii: ".") {
                    i += 1
                    var scale: Int64 = 100_000
                    var digits = 0
                    while i < b.count, b[i] >= 48, b[i] <= 57 {
                        micros += Int64(b[i] - 48) * scale
                        scale /= 10
                        i += 1
                        digits += 1
                    }
                    guard digits > 0 else { return nil }
                }
                if i < b.count, b[i] == UInt8(ascii: "Z") {
                    i += 1
                } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
                    let sign: Int64 = b[i] == UInt8(ascii: "-") ? -1 : 1
                    i += 1
                    guard let oh = number(minDigits: 2, maxDigits: 2) else { return nil }
                    var offset = oh * 3600
                    if expect(":") {
                        guard let om = number(minDigits: 2, maxDigits: 2) else { return nil }
                        offset += om * 60
                        if expect(":") {
                            guard let os = number(minDigits: 2, maxDigits: 2) else { return nil }
                            offset += os
                        }
                    }
                    offsetSeconds = sign * offset
                }
            } else {
                i = save
            }
        }
        if i < b.count {
            guard b[i...].elementsEqual(" BC".utf8) else { return nil }
            year = 1 - year
            i = b.count
        }
        // Microseconds since 2001 fit Int64 for every instant PostgreSQL can store (year 294276 included);
        // a longer year in malformed text is refused rather than trapping on overflow.
        let days = daysFromCivil(year: year, month: month, day: day) - referenceDays
        let (dayMicros, o1) = days.multipliedReportingOverflow(by: 86_400_000_000)
        let (utcMicros, o2) = dayMicros.addingReportingOverflow(micros - offsetSeconds * 1_000_000)
        guard !o1, !o2 else { return nil }
        return Date(timeIntervalSinceReferenceDate: Double(utcMicros) / 1_000_000)
    }

    /// 2001-01-01 (Foundation's reference date) in days since 1970-01-01.
    private static let referenceDays: Int64 = 11_323
    /// PostgreSQL's first and after-last storable instants (4714-11-24 00:00 BC, 294277-01-01 00:00), in
    /// microseconds since 2001 (its `MIN_TIMESTAMP` / `END_TIMESTAMP` count from 2000, 366 days earlier).
    private static let firstMicros: Int64 = -211_813_488_000_000_000 - 31_622_400_000_000
    private static let endMicros: Int64 = 9_223_371_331_200_000_000 - 31_622_400_000_000

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The inverse of ``daysFromCivil(year:month:day:)`` (Hinnant's `civil_from_days`).
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Appends the decimal digits of `value` (not negative), zero-padded to at least `width`.
    private static func pad(_ value: Int64, _ width: Int, _ bytes: inout [UInt8]) {
        var digits = 1
        var limit: Int64 = 10
        while value >= limit, digits < 19 {
            digits += 1
            limit = limit.multipliedReportingOverflow(by: 10).overflow ? .max : limit * 10
        }
        let count = max(digits, width)
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        var rest = value
        var index = start + count - 1
        while rest > 0 {
            bytes[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
            index -= 1
        }
    }
}
