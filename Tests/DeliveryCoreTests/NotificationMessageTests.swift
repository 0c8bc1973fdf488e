import Testing
@testable import DeliveryCore

@Suite struct NotificationMessageTests {
    @Test func parsesEverySeedField() throws {
        let json: JSONValue = [
            "headings": ["en": "Hello", "tr": "Merhaba"],
            "contents": ["en": "Body", "tr": "Gövde"],
            "subtitle": "Sub",
            "ios_sound": "alert.caf",
            "ios_interruption_level": "critical",
            "ios_critical_sound": ["name": "siren.caf", "volume": 0.8],
            "ios_badge_type": "Increase",
            "ios_badge_count": 2,
            "ios_category": "MESSAGE",
            "ios_relevance_score": 0.5,
            "thread_id": "security",
            "content_available": false,
            "mutable_content": true,
            "url": "app://x",
            "image": "https://i/x.png",
            "buttons": [["id": "yes", "text": "Yes", "url": "app://yes"], ["id": "no", "text": "No"]],
            "data": ["k": "v", "n": 1],
            "ttl": 3600,
            "priority": "normal",
            "collapse_id": "c1",
            "android_channel_id": "alerts",
            "android_sound": "ding",
            "quiet_hours_exempt": true,
            "frequency_cap_exempt": true,
            "some_future_field": 1,
        ]
        let message = try NotificationMessage(json: json)
        #expect(message.headings == ["en": "Hello", "tr": "Merhaba"])
        #expect(message.contents["tr"] == "Gövde")
        #expect(message.subtitle == ["und": "Sub"])
        #expect(message.iosSound == "alert.caf")
        #expect(message.iosInterruptionLevel == .critical)
        #expect(message.iosCriticalSound == .init(name: "siren.caf", volume: 0.8))
        #expect(message.iosBadgeType == .increase && message.iosBadgeCount == 2)
        #expect(message.iosCategory == "MESSAGE")
        #expect(message.iosRelevanceScore == 0.5)
        #expect(message.threadID == "security")
        #expect(!message.contentAvailable && !message.isSilent)
        #expect(message.mutableContent == true)
        #expect(message.url == "app://x" && message.image == "https://i/x.png")
        #expect(message.buttons == [.init(id: "yes", text: "Yes", url: "app://yes"), .init(id: "no", text: "No")])
        #expect(message.data == ["k": "v", "n": 1])
        #expect(message.ttl == 3600)
        #expect(message.priority == .normal)
        #expect(message.collapseID == "c1")
        #expect(message.androidChannelID == "alerts" && message.androidSound == "ding")
        #expect(message.quietHoursExempt && message.frequencyCapExempt)
    }

    @Test func silentPushNeedsNoText() throws {
        let message = try NotificationMessage(json: ["content_available": true, "data": ["sync": "1"]])
        #expect(message.isSilent)
        #expect(message.contents.isEmpty)
    }

    static let invalid: [(JSONValue, String)] = [
        ("text", "message"),
        (["contents": ["en": "x"], "ios_interruption_level": "urgent"], "ios_interruption_level"),
        (["contents": ["en": "x"], "ios_critical_sound": ["name": "s", "volume": 1.5]], "ios_critical_sound.volume"),
        (["contents": ["en": "x"], "ios_critical_sound": ["volume": 0.5]], "ios_critical_sound.name"),
        (["contents": ["en": "x"], "ios_critical_sound": "siren"], "ios_critical_sound"),
        (["contents": ["en": "x"], "ios_relevance_score": 2], "ios_relevance_score"),
        (["contents": ["en": "x"], "ios_relevance_score": "high"], "ios_relevance_score"),
        (["contents": ["en": "x"], "data": ["a", "b"]], "data"),
        (["contents": ["en": "x"], "buttons": [["text": "Yes"]]], "buttons[0].id"),
        (["contents": ["en": "x"], "buttons": [["id": "a", "text": "A"], ["id": "b"]]], "buttons[1].text"),
        (["contents": ["en": "x"], "buttons": [["id": "a", "text": "A"], ["id": "a", "text": "B"]]], "buttons[1].id"),
        (["contents": ["en": "x"], "buttons": "yes"], "buttons"),
        (["contents": ["en": "x"], "ttl": -1], "ttl"),
        (["contents": ["en": "x"], "ttl": 1.5], "ttl"),
        (["contents": ["en": "x"], "priority": "urgent"], "priority"),
        (["contents": ["en": "x"], "ios_badge_type": "Decrease", "ios_badge_count": 1], "ios_badge_type"),
        (["contents": ["en": "x"], "ios_badge_count": 1], "ios_badge_type"),
        (["contents": ["en": "x"], "ios_badge_type": "SetTo"], "ios_badge_count"),
        (["contents": ["en": "x"], "ios_badge_type": "SetTo", "ios_badge_count": -3], "ios_badge_count"),
        (["contents": ["en": "x"], "ios_sound": 1], "ios_sound"),
        (["contents": ["en": "x"], "content_available": "yes"], "content_available"),
        (["contents": ["en": 5]], "contents.en"),
        (["headings": ["en": "only a title"]], "contents"),
        (["contents": ["en": ""]], "contents"),
        ([:], "contents"),
        // An Increase alone needs the SDK's extension, which iOS runs only for a push with an alert.
        (["ios_badge_type": "Increase", "ios_badge_count": 1], "contents"),
        (["ios_sound": ""], "contents"),
    ]

    /// Apple's alert push type covers an alert, a sound or a badge: no text is needed for those.
    @Test func badgeOnlyAndSoundOnlyMessagesAreValid() throws {
        let badge = try NotificationMessage(json: ["ios_badge_type": "SetTo", "ios_badge_count": 0])
        #expect(badge.setsBadgeOrSound && !badge.hasVisibleText && !badge.isSilent)
        #expect(try NotificationMessage(json: ["ios_sound": "default"]).setsBadgeOrSound)
        #expect(try NotificationMessage(json: ["ios_critical_sound": ["name": "alarm.caf"], "ios_interruption_level": "critical"]).setsBadgeOrSound)
        #expect(try NotificationMessage(json: ["headings": ["en": "t"], "ios_sound": "default"]).hasVisibleText)
    }

    @Test(arguments: 0..<invalid.count) func errorsNameTheField(index: Int) {
        let (json, field) = Self.invalid[index]
        do {
            _ = try NotificationMessage(json: json)
            Issue.record("expected \(field) to be rejected")
        } catch {
            #expect(error.field == field)
            #expect(error.description.contains("`\(field)`"))
        }
    }

    @Test func nullMeansAbsent() throws {
        let message = try NotificationMessage(json: ["contents": ["en": "x"], "ios_sound": nil, "ttl": nil, "data": nil])
        #expect(message.iosSound == nil && message.ttl == nil && message.data == nil)
    }
}

@Suite struct LanguageSelectorTests {
    static let texts = ["en": "Hello", "pt": "Olá", "pt-BR": "Oi", "tr": "Merhaba", "de_AT": "Servus", "fr": "Bonjour"]

    static let table: [(subscriber: String?, appDefault: String?, expected: String)] = [
        ("pt-BR", nil, "pt-BR"),      // exact
        ("pt_br", nil, "pt-BR"),      // _ and case folding
        ("PT-br", "tr", "pt-BR"),
        ("pt-PT", nil, "pt"),         // base language
        ("de-AT", nil, "de_AT"),      // key written with _
        ("de", "fr", "fr"),           // "de" is not "de_AT": falls to the app default
        ("ja", "tr", "tr"),           // app default
        ("ja", "tr-TR", "tr"),        // app default's base
        ("ja", "ko", "en"),           // then en
        (nil, nil, "en"),
        ("", "", "en"),
        ("TR", nil, "tr"),
        ("İT", nil, "en"),            // a Turkish capital dotted I is not folded to an ASCII i
    ]

    @Test(arguments: 0..<table.count) func fallbackTable(index: Int) throws {
        let row = Self.table[index]
        let picked = try #require(LanguageSelector.pick(from: Self.texts, subscriberLanguage: row.subscriber, appDefaultLanguage: row.appDefault))
        #expect(picked.language == row.expected)
        #expect(picked.text == Self.texts[row.expected])
    }

    @Test func deterministicFirstKeyAndEmptyTexts() throws {
        let texts = ["zh": "你好", "ar": "مرحبا", "ja": "こんにちは", "en": ""]
        for _ in 0..<5 {
            let picked = try #require(LanguageSelector.pick(from: texts, subscriberLanguage: "ko", appDefaultLanguage: "ru"))
            #expect(picked.language == "ar")
        }
        #expect(LanguageSelector.pick(from: [:], subscriberLanguage: "en", appDefaultLanguage: nil) == nil)
        #expect(LanguageSelector.pick(from: ["en": ""], subscriberLanguage: "en", appDefaultLanguage: nil) == nil)
    }
}

@Suite struct PlaceholderTests {
    let values = PlaceholderValues(tags: ["name": "Işıl", "city": "İzmir", "level": 3, "vip": true, "empty": ""],
                                   language: "tr", country: "TR", timezone: "Europe/Istanbul")

    static let cases: [(String, String)] = [
        ("Hi {{ name }}!", "Hi Işıl!"),
        ("Hi {{name}}!", "Hi Işıl!"),
        ("{{ city }} / {{ language }} / {{ country }} / {{ timezone }}", "İzmir / tr / TR / Europe/Istanbul"),
        ("Level {{ level }}, vip {{ vip }}", "Level 3, vip true"),
        ("Hi {{ nickname | default: \"friend\" }}", "Hi friend"),
        ("Hi {{ nickname|default:'dostum' }}", "Hi dostum"),
        ("Hi {{ empty | default: \"friend\" }}", "Hi friend"),
        ("Hi {{ name | default: \"friend\" }}", "Hi Işıl"),
        ("Hi {{ nickname }}.", "Hi ."),
        ("Hi { name }}", "Hi { name }}"),
        ("Hi {{ name | upcase }}", "Hi IŞIL"),
        ("{{{ name }}}", "{Işıl}"),
        ("no placeholders ı İ", "no placeholders ı İ"),
        ("👩‍👩‍👧{{ name }}́", "👩‍👩‍👧Işıĺ"),
    ]

    @Test(arguments: 0..<cases.count) func fills(index: Int) throws {
        let (input, expected) = Self.cases[index]
        #expect(try Placeholders.fill(input, values: values) == expected)
    }

    /// Text that would still be a template after filling is refused, never sent as typed.
    static let refused: [(String, String)] = [
        ("Hi {{ name", "unterminated `{{`"),
        ("Hi {{ name | default: friend }}", "an argument must be quoted text or a whole number"),
        ("{{ 1 + 1 }}", "expected `}}`"),
        ("{{}}", "expected a name or quoted text"),
        ("Hi {{ name | shout }}", "unknown filter `shout`"),
        ("{{ name | escape }}", "unknown filter `escape`"),
        ("{% if vip %}VIP{% endif %}", "Liquid tags are not supported"),
        ("{{ name | upcase: 1 }}", "filter `upcase` takes no argument"),
        ("{{ name | replace: \"a\" }}", "filter `replace` takes two quoted arguments"),
        ("{{ name | truncate: \"x\" }}", "filter `truncate` takes a length"),
        ("{{ name | default: 'x }}", "unterminated quote"),
    ]

    @Test(arguments: 0..<refused.count) func refuses(index: Int) {
        let (input, problem) = Self.refused[index]
        #expect(throws: TemplateError.self) { try Placeholders.fill(input, values: values) }
        do {
            _ = try Placeholders.fill(input, values: values)
        } catch {
            #expect(error.message.contains(problem), "\(error.message)")
        }
    }

    @Test func tagsWinOverSubscriptionFields() throws {
        let values = PlaceholderValues(tags: ["language": "Deutsch"], language: "de")
        #expect(try Placeholders.fill("{{ language }}", values: values) == "Deutsch")
    }
}

@Suite struct MessageErrorOutcomeTests {
    @Test func invalidMessageOutcome() {
        let error = MessageError(code: .invalidValue, field: "ttl", message: "must be >= 0")
        #expect(error.outcome == .failed(reason: .invalidMessage, detail: ["field": "ttl", "message": "`ttl`: must be >= 0"]))
        #expect(error.outcome.eventName == "failed")
    }
}

/// The members expansion validates before any SQL uses them: the same rules as the full parse.
@Suite struct SchedulingFieldsTests {
    @Test func validValuesAndAbsenceParse() throws {
        #expect(try NotificationMessage.scheduling(ttl: nil, priority: nil) == (nil, nil))
        #expect(try NotificationMessage.scheduling(ttl: .null, priority: .null) == (nil, nil))
        #expect(try NotificationMessage.scheduling(ttl: 0, priority: "high") == (0, .high))
        #expect(try NotificationMessage.scheduling(ttl: .double(2_419_200), priority: "normal") == (2_419_200, .normal))
    }

    @Test func producerNumbersOutOfRangeAreRefusedNamingTheField() {
        let cases: [(JSONValue?, JSONValue?, String)] = [
            (.double(1e13), nil, "ttl"), (.double(-1e13), nil, "ttl"), (.double(1e308), nil, "ttl"),
            (.double(1.5), nil, "ttl"), (-1, nil, "ttl"), (2_419_201, nil, "ttl"), ("60", nil, "ttl"),
            (.int(Int64.min), nil, "ttl"), (nil, 10, "priority"), (nil, "urgent", "priority"),
        ]
        for (ttl, priority, field) in cases {
            #expect(throws: MessageError.self, "\(String(describing: ttl)) \(String(describing: priority))") {
                try NotificationMessage.scheduling(ttl: ttl, priority: priority)
            }
            do {
                _ = try NotificationMessage.scheduling(ttl: ttl, priority: priority)
            } catch {
                #expect(error.field == field)
            }
        }
    }
}
