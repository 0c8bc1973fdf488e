import Foundation

/// `Retry-After` (RFC 9110 §10.2.3) as FCM and Web Push push services send it: delay seconds
/// (`1*DIGIT`) or an HTTP-date in the preferred IMF-fixdate form (`Sun, 06 Nov 1994 08:49:37 GMT`,
/// RFC 9110 §5.6.7). Shared by ``FCMResponseClassifier`` and ``WebPushResponseClassifier``.
enum RetryAfterHeader {
    /// The longest wait honoured, in seconds (1 hour), as for APNs: a misbehaving server cannot park
    /// deliveries for days, and the worker's own backoff still applies on top.
    static let maximum: Double = 3600

    /// The instant before which no retry should happen, or `nil` when the header is absent, malformed,
    /// or an HTTP-date not after `now`. Values beyond ``maximum`` seconds are cut to it.
    static func notBefore(_ response: PushResponse, now: Date) -> Date? {
        guard let value = fieldValue(response, "retry-after") else { return nil }
        if let seconds = delaySeconds(value) { return now.addingTimeInterval(seconds) }
        guard let date = imfFixdate(value) else { return nil }
        let seconds = date.timeIntervalSince(now)
        guard seconds > 0 else { return nil }
        return now.addingTimeInterval(min(seconds, maximum))
    }

    /// WNS's own wait for a throttled sender, `X-WNS-CONTINUE-AFTER` (Microsoft, "Push notification service
    /// request and response headers": an integer, "the number of seconds to wait until sending another
    /// notification without being throttled"), cut to ``maximum``; `nil` when absent or not digits.
    static func wnsContinueAfter(_ response: PushResponse, now: Date) -> Date? {
        guard let value = fieldValue(response, "x-wns-continue-after"), let seconds = delaySeconds(value) else { return nil }
        return now.addingTimeInterval(seconds)
    }

    /// The field's value without surrounding whitespace; `nil` when absent, empty or over 64 bytes.
    private static func fieldValue(_ response: PushResponse, _ name: String) -> String? {
        guard let raw = response.header(name), raw.utf8.count <= 64 else { return nil }
        let value = raw.trimmingCharacters(in: .whitespaces)
        return value.isEmpty ? nil : value
    }

    /// `delay-seconds` (`1*DIGIT`) cut to ``maximum``; `nil` for anything else.
    private static func delaySeconds(_ value: String) -> Double? {
        guard value.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        // Digits only, so the only failure of Int(_:) is overflow: beyond the cap anyway.
        return min(Double(Int(value) ?? Int.max), maximum)
    }

    /// Parses `Day, DD Mon YYYY HH:MM:SS GMT` exactly (29 characters); anything else gives `nil`.
    static func imfFixdate(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 29 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard (48...57).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let text = String(decoding: bytes, as: UTF8.self)
        guard days.contains(String(text.prefix(3))),
              bytes[3] == UInt8(ascii: ","), bytes[4] == 32, bytes[7] == 32, bytes[11] == 32, bytes[16] == 32,
              bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 32,
              text.hasSuffix("GMT"),
              let day = number(5..<7), let year = number(12..<16), let hour = number(17..<19),
              let minute = number(20..<22), let second = number(23..<25),
              let monthIndex = months.firstIndex(of: String(decoding: bytes[8..<11], as: UTF8.self))
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "GMT")!
        let components = DateComponents(year: year, month: monthIndex + 1, day: day, hour: hour, minute: minute, second: second)
        guard (1...31).contains(day), hour < 24, minute < 60, second < 61, components.isValidDate(in: calendar) else { return nil }
        return calendar.date(from: components)
    }
}
