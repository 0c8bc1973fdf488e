import Foundation
import Testing
import DeliveryCore

/// Messages a hostile or careless producer can write: none may trap, and every one that cannot be
/// delivered as given is refused with `invalid_message` naming the field.
@Suite struct HostileMessageTests {
    static let refused: [(JSONValue, String)] = [
        // Int64.max seconds overflowed `now + ttl` in the APNs factory and killed the worker.
        (["contents": ["en": "x"], "ttl": 9_223_372_036_854_775_807], "ttl"),
        (["contents": ["en": "x"], "ttl": 2_419_201], "ttl"),
        (["contents": ["en": "x"], "ttl": 1e300], "ttl"),
        // Header injection through apns-collapse-id.
        (["contents": ["en": "x"], "collapse_id": "a\r\nb: c"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "a\nb"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "a\u{0}b"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "tab\there"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "del\u{7F}"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "c1\u{85}"], "collapse_id"),
        // RFC 9113 §8.2.1: a field value must not start or end with whitespace.
        (["contents": ["en": "x"], "collapse_id": " padded"], "collapse_id"),
        (["contents": ["en": "x"], "collapse_id": "padded "], "collapse_id"),
        // Badge counts the SDK's Int32-sized badge arithmetic cannot hold.
        (["contents": ["en": "x"], "ios_badge_type": "SetTo", "ios_badge_count": 9_223_372_036_854_775_807], "ios_badge_count"),
        (["contents": ["en": "x"], "ios_badge_type": "Increase", "ios_badge_count": -9_223_372_036_854_775_808], "ios_badge_count"),
        (["contents": ["en": "x"], "ios_badge_type": "SetTo", "ios_badge_count": 1e30], "ios_badge_count"),
        (["contents": ["en": "x"], "ios_relevance_score": 1e308], "ios_relevance_score"),
        (["contents": ["en": "x"], "ios_relevance_score": -1e-300], "ios_relevance_score"),
        (["contents": ["en": "x"], "ios_critical_sound": ["name": "s", "volume": 1e308]], "ios_critical_sound.volume"),
    ]

    @Test(arguments: 0..<refused.count) func refusedNamingTheField(index: Int) {
        let (json, field) = Self.refused[index]
        do {
            _ = try NotificationMessage(json: json)
            Issue.record("expected \(field) to be rejected in \(json.jsonText)")
        } catch {
            #expect(error.field == field)
            #expect(error.outcome == .failed(reason: .invalidMessage,
                                             detail: ["field": .string(field), "message": .string(error.description)]))
        }
    }

    @Test func limitsThemselvesAreAccepted() throws {
        #expect(NotificationMessage.maximumTTL == 2_419_200)
        let message = try NotificationMessage(json: [
            "contents": ["en": "x"], "ttl": 2_419_200, "collapse_id": "order-1 (çok)",
            "ios_badge_type": "Increase", "ios_badge_count": -2_147_483_647,
        ])
        #expect(message.ttl == 2_419_200)
        #expect(message.collapseID == "order-1 (çok)")
        #expect(message.iosBadgeCount == -2_147_483_647)
        let setTo = try NotificationMessage(json: ["contents": ["en": "x"], "ios_badge_type": "SetTo", "ios_badge_count": 2_147_483_647])
        #expect(setTo.iosBadgeCount == 2_147_483_647)
    }

    @Test func headerValueCheck() {
        #expect(HTTPFieldValue.isValid("order-1"))
        #expect(HTTPFieldValue.isValid("çç"))
        #expect(!HTTPFieldValue.isValid("a\r\nb"))
        #expect(!HTTPFieldValue.isValid(" a"))
        #expect(!HTTPFieldValue.isValid("a\t"))
        #expect(HTTPFieldValue.isValid(""))
        #expect(HTTPFieldValue.isVisibleASCII("com.example.app.voip"))
        #expect(!HTTPFieldValue.isVisibleASCII("com.example app"))
        #expect(!HTTPFieldValue.isVisibleASCII("com.exämple"))
        #expect(!HTTPFieldValue.isVisibleASCII(""))
    }
}

@Suite struct RetryPolicyExtremesTests {
    @Test func extremeAttemptsAndFloorsDoNotTrap() {
        let policy = RetryPolicy(baseDelay: .seconds(30), maximumDelay: .seconds(3600))
        let now = Date(timeIntervalSince1970: 1_000)
        // `attempt - 1` with Int.min overflowed.
        #expect(policy.nextAttempt(after: Int.min, now: now, unitRandom: 0) == now.addingTimeInterval(15))
        #expect(policy.nextAttempt(after: Int.max, now: now, unitRandom: 0) == now.addingTimeInterval(1800))
        // A configuration out of every range never yields a non-finite instant (which would trap in timestamp
        // encoding).
        let broken = RetryPolicy(baseDelay: .seconds(Int64.max), maximumDelay: .seconds(-5))
        let next = broken.nextAttempt(after: 3, now: now, unitRandom: .nan)
        #expect(next.timeIntervalSince1970.isFinite)
        #expect(next >= now)
    }
}

@Suite struct PlaceholderBoundsTests {
    @Test func defaultsUpToTheLimitFillAndLongerOnesAreRefused() throws {
        let values = PlaceholderValues()
        let fits = String(repeating: "d", count: Placeholders.maximumDefaultLength)
        #expect(try Placeholders.fill("{{ name | default: \"\(fits)\" }}", values: values) == fits)
        let tooLong = "{{ name | default: \"\(fits)d\" }}"
        #expect(throws: TemplateError.self) { try Placeholders.fill(tooLong, values: values) }
    }

    /// Each `{{` opens an unterminated quote: once every one rescanned to the end of the text. The first
    /// malformed placeholder now ends filling with an error, after one pass.
    @Test func manyUnterminatedDefaultsAreRefused() {
        let text = String(repeating: "{{a|default:\"", count: 20_000)
        #expect(throws: TemplateError.self) { try Placeholders.fill(text, values: PlaceholderValues(tags: ["a": "x"]), maximumBytes: .max) }
        #expect(throws: TemplateError.self) { try Placeholders.fill(text, values: PlaceholderValues(tags: ["a": "x"])) }
    }
}
