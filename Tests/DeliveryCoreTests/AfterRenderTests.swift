import Testing
@testable import DeliveryCore

/// The placeholder language: Liquid's string filters that fit a push, with Liquid's results.
@Suite struct LiquidFilterTests {
    let values = PlaceholderValues(tags: ["first_name": "ayşe", "padded": "  Ann \t\n", "off": false, "on": true, "n": 7,
                                          "long": "The quick brown fox jumps over the lazy dog", "null": .null])

    static let cases: [(String, String)] = [
        // The reported title.
        ("Hi {{ first_name | upcase }}", "Hi AYŞE"),
        ("{{ first_name | capitalize }}", "Ayşe"),
        ("{{ \"mIXed CaSe\" | capitalize }}", "Mixed case"),
        // Unicode case mapping without a locale, as Ruby's: `I` becomes `i`, not Turkish `ı`.
        ("{{ \"ÇIĞ\" | downcase }}", "çiğ"),
        ("[{{ padded | strip }}]", "[Ann]"),
        ("[{{ padded | lstrip }}]", "[Ann \t\n]"),
        ("[{{ padded | rstrip }}]", "[  Ann]"),
        ("{{ missing | default: \"friend\" }}", "friend"),
        ("{{ null | default: \"friend\" }}", "friend"),
        ("{{ off | default: \"no\" }}", "no"),
        ("{{ off }}", "false"),
        ("{{ on | default: \"no\" }}", "true"),
        ("{{ missing | upcase | default: \"FRIEND\" }}", "FRIEND"),
        ("{{ first_name | default: \"friend\" | upcase }}", "AYŞE"),
        // Liquid's truncate: the ellipsis counts toward the length.
        ("{{ long | truncate: 20 }}", "The quick brown f..."),
        ("{{ long | truncate: 20, \"…\" }}", "The quick brown fox…"),
        ("{{ long | truncate: 20, \"\" }}", "The quick brown fox "),
        ("{{ first_name | truncate: 4 }}", "ayşe"),
        ("{{ first_name | truncate: 2 }}", "..."),
        ("{{ long | truncate }}", "The quick brown fox jumps over the lazy dog"),
        ("{{ \"👩‍👩‍👧👩‍👩‍👧👩‍👩‍👧\" | truncate: 2, \"…\" }}", "👩‍👩‍👧…"),
        ("{{ first_name | append: \"!\" | prepend: \"Hi \" }}", "Hi ayşe!"),
        ("{{ long | remove: \"o\" }}", "The quick brwn fx jumps ver the lazy dg"),
        ("{{ long | remove_first: \"o\" }}", "The quick brwn fox jumps over the lazy dog"),
        ("{{ long | replace: \"the\", \"a\" }}", "The quick brown fox jumps over a lazy dog"),
        ("{{ \"aaaa\" | replace: \"aa\", \"b\" }}", "bb"),
        ("{{ \"abab\" | replace_first: \"ab\", \"x\" }}", "xab"),
        ("{{ n | append: '%' }}", "7%"),
        ("{{first_name|upcase|truncate:3,''}}", "AYŞ"),
    ]

    @Test(arguments: 0..<cases.count) func filters(index: Int) throws {
        let (template, expected) = Self.cases[index]
        #expect(try Placeholders.fill(template, values: values) == expected, "\(template)")
    }

    @Test func filteredOutputStaysBoundedAndReplaceDoesNotBlowUp() throws {
        // 4,096 `a` with each replaced by 256 characters: the result is cut at the bound as it is built.
        let values = PlaceholderValues(tags: ["a": .string(String(repeating: "a", count: 4096))])
        let wide = String(repeating: "w", count: 256)
        let filled = try Placeholders.fill("{{ a | replace: \"a\", \"\(wide)\" }}", values: values)
        #expect(filled == String(repeating: "w", count: 4096))
        // Thousands of distinct filtered placeholders of a 4 KB value that fill nothing (so the output
        // bound never stops them): refused once the filters have read and written 256 KB, rather than
        // costing placeholders × 4 KB.
        let template = (0..<2000).map { "{{ a | remove: \"a\" | remove: \"\($0)\" }}" }.joined()
        #expect(throws: TemplateError.self) { try Placeholders.fill(template, values: values) }
        // The same placeholder repeated is evaluated once.
        let repeated = String(repeating: "{{ a | remove: \"a\" }}", count: 20_000)
        #expect(try Placeholders.fill(repeated, values: values) == "")
    }

    @Test func anErrorAfterTheOutputBoundIsStillReported() {
        let values = PlaceholderValues(tags: ["a": .string(String(repeating: "x", count: 5000))])
        #expect(throws: TemplateError.self) { try Placeholders.fill("{{ a }}{{ a | shout }}", values: values) }
    }
}

/// What validation demands of text holds after rendering: fallback along the language chain, else fail.
@Suite struct AfterRenderTests {
    func render(_ message: NotificationMessage, language: String? = "en", tags: [String: JSONValue] = [:]) throws(MessageError) -> LocalizedText {
        try LocalizedText.render(message, subscriberLanguage: language, appDefaultLanguage: "en",
                                 placeholderValues: PlaceholderValues(tags: tags))
    }

    @Test func aBodyThatRendersEmptyInEveryLanguageFailsNamingContents() throws {
        // The reported message: only a placeholder, and a user without that tag.
        var message = NotificationMessage()
        message.contents = ["en": "{{ first_name }}"]
        let error = #expect(throws: MessageError.self) { try render(message) }
        #expect(error?.field == "contents")
        #expect(error?.outcome.eventName == "failed")
        #expect(try render(message, tags: ["first_name": "Ann"]).body == "Ann")
        // Whitespace alone is not visible text either.
        message.contents = ["en": " {{ first_name }}\n"]
        #expect(throws: MessageError.self) { try render(message) }
    }

    @Test func fallsBackAlongTheLanguageChain() throws {
        var message = NotificationMessage()
        message.contents = ["fr": "{{ prenom }}", "en": "{{ first_name }}", "de": "Hallo"]
        // fr (the subscriber's) renders empty, then en (the app default), then the remaining de.
        #expect(try render(message, language: "fr").body == "Hallo")
        #expect(try render(message, language: "fr", tags: ["first_name": "Ann"]).body == "Ann")
        #expect(try render(message, language: "fr", tags: ["prenom": "Zoé", "first_name": "Ann"]).body == "Zoé")
    }

    @Test func eachFieldFallsBackOnItsOwn() throws {
        var message = NotificationMessage()
        message.headings = ["tr": "{{ isim }}", "en": "Hello"]
        message.subtitle = ["tr": "{{ isim }}"]
        message.contents = ["tr": "Merhaba"]
        let error = #expect(throws: MessageError.self) { try render(message, language: "tr") }
        #expect(error?.field == "subtitle")
        message.subtitle = [:]
        #expect(try render(message, language: "tr") == LocalizedText(title: "Hello", body: "Merhaba"))
    }

    @Test func aTemplateErrorNamesTheFieldAndLanguage() {
        var message = NotificationMessage()
        message.headings = ["en": "Hi {{ first_name | shout }}"]
        message.contents = ["en": "x"]
        let error = #expect(throws: MessageError.self) { try render(message) }
        #expect(error?.field == "headings.en")
        #expect(error?.message.contains("unknown filter `shout`") == true)
        // A plain string (stored under `und`) is named by the field alone.
        message.headings = ["und": "{% if vip %}VIP{% endif %}"]
        #expect((#expect(throws: MessageError.self) { try render(message) })?.field == "headings")
    }
}
