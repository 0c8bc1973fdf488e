import Testing
import DeliveryCore

@Suite struct NormalizedDataTests {
    @Test func everyJSONTypeHasOneStringForm() throws {
        let data = try #require(try JSONValue(parsing: #"{"count": 1, "ok": true, "no": false, "nested": {"b": "ş/x", "a": [1]}, "list": [1, "a"], "ratio": 0.5, "big": 12345678901234, "text": "İ", "gone": null}"#).objectValue)
        #expect(NormalizedData.strings(data) == [
            "count": "1", "ok": "true", "no": "false", "nested": #"{"a":[1],"b":"ş/x"}"#, "list": #"[1,"a"]"#,
            "ratio": "0.5", "big": "12345678901234", "text": "İ",
        ])
        #expect(NormalizedData.text(of: .null) == nil)
        #expect(NormalizedData.text(of: "") == "")
    }
}

@Suite struct LocalizedTextTests {
    @Test func rendersEachFieldForTheSubscriber() throws {
        var message = NotificationMessage()
        message.headings = ["en": "Hi {{ name }}", "tr": "Selam {{ name }}"]
        message.subtitle = ["de": "Nur Deutsch"]
        message.contents = ["tr-TR": "{{ city | default: \"İzmir\" }}"]
        let text = try LocalizedText.render(message, subscriberLanguage: "tr_tr", appDefaultLanguage: "en",
                                        placeholderValues: PlaceholderValues(tags: ["name": "Işık"]))
        #expect(text == LocalizedText(title: "Selam Işık", subtitle: "Nur Deutsch", body: "İzmir"))
        let none = try LocalizedText.render(NotificationMessage(), subscriberLanguage: nil, appDefaultLanguage: nil, placeholderValues: nil)
        #expect(none == LocalizedText())
    }
}

@Suite struct TextShortenerTests {
    /// Measures a candidate as the UTF-8 bytes of its three texts.
    func measure(_ text: LocalizedText) -> (output: LocalizedText, size: Int) {
        (text, [text.title, text.subtitle, text.body].reduce(0) { $0 + ($1?.utf8.count ?? 0) })
    }

    @Test func fittingTextIsUntouched() {
        let text = LocalizedText(title: "t", body: "b")
        guard case .fitted(let output, let used) = TextShortener.fit(text, limit: 2, counting: .utf8, render: measure) else {
            Issue.record("must fit")
            return
        }
        #expect(output == text && used == text)
    }

    @Test func longestFirstAtGraphemeBoundaries() {
        let text = LocalizedText(title: "TTTTTT", subtitle: "SSSS", body: "e\u{301}e\u{301}e\u{301}")  // 6 + 4 + 9 bytes
        func fitted(_ limit: Int) -> LocalizedText? {
            if case .fitted(let output, let used) = TextShortener.fit(text, limit: limit, counting: .utf8, render: measure) {
                #expect(output == used)
                return output
            }
            return nil
        }
        // The body keeps one é (e + combining accent, never split) and its …: 6 + 4 + 6 = 16.
        #expect(fitted(16) == LocalizedText(title: "TTTTTT", subtitle: "SSSS", body: "e\u{301}…"))
        // Cut line 5: the title (6) and the body (9) are cut to at most 5 bytes (the body's first é and …
        // would be 6, so only …); the subtitle (4) is under the line and keeps every character.
        #expect(fitted(13) == LocalizedText(title: "TT…", subtitle: "SSSS", body: "…"))
        #expect(fitted(12) == LocalizedText(title: "TT…", subtitle: "SSSS", body: "…"))
        // Line 4 would be 4 + 4 + 3 = 11; line 3 cuts everything to …: 9.
        #expect(fitted(10) == LocalizedText(title: "…", subtitle: "…", body: "…"))
        #expect(fitted(8) == nil)
    }

    @Test func tooLargeReportsTheLastMeasure() {
        let text = LocalizedText(title: "TTTT", subtitle: nil, body: "")
        guard case .tooLarge(let size) = TextShortener.fit(text, limit: 2, counting: .utf8, render: measure) else { Issue.record("must not fit"); return }
        #expect(size == 3, "title shortened to … (3 bytes); the empty body was skipped")
    }
}
