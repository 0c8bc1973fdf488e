import DeliveryCore
import Foundation
import Testing

/// `delivery_events.reason` is a pinned contract: the worker's names for it stay one per text, snake_case, and
/// the same set the docs give producers.
@Suite("DeliveryReason vocabulary")
struct DeliveryReasonTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func document(_ name: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent("docs").appendingPathComponent(name), encoding: .utf8)
    }

    /// The `code` spans of `text`.
    static func codeSpans(_ text: String) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated()
            .filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// `BadDeviceToken` -> `bad_device_token`: a word starts at a capital after a small letter or digit.
    static func appleSnakeCase(_ text: String) -> String {
        var output = ""
        var previous: Character?
        for character in text {
            if character.isUppercase, let previous, previous.isLowercase || previous.isNumber { output.append("_") }
            output.append(contentsOf: character.lowercased())
            previous = character
        }
        return output
    }

    static func isSnakeCase(_ text: String) -> Bool {
        text.wholeMatch(of: /[a-z][a-z0-9]*(_[a-z0-9]+)*/) != nil
    }

    /// `retry --reason`: a reason named in any case, with or without underscores (the providers' own spellings),
    /// is the stored one; no two documented reasons read alike so; anything else names none.
    @Test func aNamedReasonIsTheStoredOne() {
        #expect(DeliveryReason(named: "Unavailable") == .unavailable)
        #expect(DeliveryReason(named: "UNAVAILABLE") == .unavailable)
        #expect(DeliveryReason(named: "BadDeviceToken") == .badDeviceToken)
        #expect(DeliveryReason(named: "MAX_ATTEMPTS") == .maxAttempts)
        #expect(DeliveryReason(named: "HTTP_503") == .http(status: 503))
        for bad in ["unavaliable", "", "http_5030", "http_abc", "http_99", "max attempts"] {
            #expect(DeliveryReason(named: bad) == nil, "\(bad)")
        }
        for reason in DeliveryReason.documented {
            #expect(DeliveryReason(named: reason.rawValue.uppercased()) == reason, "\(reason)")
        }
    }

    @Test func everyStoredTextIsUniqueAndSnakeCase() {
        let texts = DeliveryReason.documented.map(\.rawValue)
        #expect(Set(texts).count == texts.count, "two reasons share a text")
        for text in texts { #expect(Self.isSnakeCase(text), "\(text)") }
        #expect(DeliveryReason.http(status: 503).rawValue == "http_503")
        #expect(DeliveryReason(providerText: "") == nil)
    }

    /// Every reason the worker names is in the docs, as written (`max_attempts`), or in the provider's own
    /// spelling that the classifier converts (APNs `BadDeviceToken` -> `bad_device_token`, FCM
    /// `UNREGISTERED` -> `unregistered`).
    @Test func everyReasonIsDocumented() throws {
        let names = try FileManager.default.contentsOfDirectory(
            atPath: Self.repositoryRoot.appendingPathComponent("docs").path)
        var spans = Set<String>()
        for name in names where name.hasSuffix(".md") {
            for span in Self.codeSpans(try Self.document(name)) {
                spans.insert(span)
                spans.insert(span.lowercased())
                // Apple's spelling, snake-cased as the classifier does for the reasons Apple lists.
                spans.insert(Self.appleSnakeCase(span))
            }
        }
        for reason in DeliveryReason.documented {
            #expect(spans.contains(reason.rawValue), "\(reason) is in no doc")
        }
    }

    /// Every reason the producer contract's `delivery_events` table and the provider-answer tables name is one
    /// the worker knows (the other code spans there are events, columns and message fields).
    @Test func everyDocumentedReasonIsNamed() throws {
        let known = Set(DeliveryReason.documented.map(\.rawValue))
        let notReasons: Set<String> = Set(DeliveryEvent.allCases.map(\.rawValue)).union([
            "retry", "pause", "invalid", "message", "voip", "liveactivity", "ttl", "last_error", "paused_reason",
            "endpoint", "timestamp", "project_id", "name",
            // A Live Activity channel row's states, and a column an event of a channel's broadcast has none of.
            "active", "deleted", "subscription_id",
        ])
        let contract = try Self.document("producer-contract.md")
        let events = try #require(contract.range(of: "## `delivery_events`"))
        var named: [String] = []
        for line in contract[events.upperBound...].split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            if cells.count > 3 { named += Self.codeSpans(String(cells[3])) }
        }
        for line in try Self.document("provider-answers.md").split(separator: "\n") where line.hasPrefix("|") {
            named += Self.codeSpans(String(line)).filter { Self.isSnakeCase($0) && !$0.hasPrefix("http_") }
        }
        #expect(named.count > 40)
        for text in named where Self.isSnakeCase(text) && !notReasons.contains(text) {
            #expect(known.contains(text), "the docs name `\(text)`, which no DeliveryReason member is")
        }
    }
}
