import Testing
@testable import DeliveryCore

/// Filling is bounded by ``Placeholders/maximumOutputBytes`` whatever the template and tags.
@Suite struct PlaceholderOutputBoundTests {
    /// The longest prefix of `text`, whole scalars, within `bytes` bytes of UTF-8.
    func longestPrefix(_ text: String, bytes: Int) -> String {
        var result = String.UnicodeScalarView()
        var used = 0
        for scalar in text.unicodeScalars {
            used += UTF8.width(scalar)
            guard used <= bytes else { break }
            result.append(scalar)
        }
        return String(result)
    }

    @Test func twoThousandPlaceholdersOfATwentyKilobyteTagStopAtTheBound() throws {
        // The reported input: 2,000 `{{a}}` and a 20 KB tag, 40 MB unbounded.
        let template = String(repeating: "{{a}}", count: 2000)
        let filled = try Placeholders.fill(template, values: PlaceholderValues(tags: ["a": .string(String(repeating: "x", count: 20_000))]))
        #expect(filled.utf8.count == Placeholders.maximumOutputBytes)
        #expect(filled == String(repeating: "x", count: 4096))
    }

    @Test func theCutFallsOnAScalarBoundary() throws {
        // "ab" + 3-byte € signs: 2 + 3k <= 4096 keeps 1,364 of them (4,094 bytes), never a partial €.
        let values = PlaceholderValues(tags: ["a": .string("ab" + String(repeating: "€", count: 10_000))])
        let filled = try Placeholders.fill("{{a}}{{a}}", values: values)
        #expect(filled == "ab" + String(repeating: "€", count: 1364))
        // A 4-byte emoji straddling the bound: "xyz" + 🙂 (4 bytes) × n; 3 + 4k <= 4096 keeps 1,023.
        let emoji = PlaceholderValues(tags: ["e": .string(String(repeating: "🙂", count: 5000))])
        #expect(try Placeholders.fill("xyz{{ e }}", values: emoji) == "xyz" + String(repeating: "🙂", count: 1023))
    }

    @Test func everyBoundGivesTheLongestPrefixOfTheFullResult() throws {
        let values = PlaceholderValues(tags: ["name": "Işıl", "city": "İzmir 🇹🇷", "n": 42, "empty": ""], language: "tr")
        let template = #"Merhaba {{ name }}, {{city}}! {{ missing | default: "dünya" }} {{n}}{{empty|default:'—'}} {{ language }} {{ name | upcase | append: "!" }} { }}"#
        let full = try Placeholders.fill(template, values: values, maximumBytes: .max)
        #expect(full == #"Merhaba Işıl, İzmir 🇹🇷! dünya 42— tr IŞIL! { }}"#)
        for bound in 0...(full.utf8.count + 2) {
            let bounded = try Placeholders.fill(template, values: values, maximumBytes: bound)
            #expect(bounded == longestPrefix(full, bytes: bound), "bound \(bound)")
        }
    }

    @Test func aTemplateWithoutPlaceholdersIsCutToo() throws {
        let long = String(repeating: "ş", count: 100_000)  // 200 KB
        #expect(try Placeholders.fill(long, values: PlaceholderValues()) == String(repeating: "ş", count: 2048))
        #expect(try Placeholders.fill("short", values: PlaceholderValues()) == "short")
        #expect(Placeholders.prefix("şş", maximumBytes: 3) == "ş")
    }

    @Test func manyEmptyPlaceholdersAndLongObjectTags() throws {
        // Thousands of placeholders that fill nothing: bounded by the template, output empty.
        #expect(try Placeholders.fill(String(repeating: "{{nothing}}", count: 20_000), values: PlaceholderValues()) == "")
        // A non-string tag becomes its JSON text, cut like any value.
        let object = JSONValue.object(Dictionary(uniqueKeysWithValues: (0..<2000).map { ("key\($0)", JSONValue.int(Int64($0))) }))
        let filled = try Placeholders.fill(String(repeating: "{{o}}", count: 1000), values: PlaceholderValues(tags: ["o": object]))
        #expect(filled.utf8.count == 4096)
        #expect(filled.hasPrefix(#"{"key0":0,"key1":1,"key10":10"#))
    }

    @Test func defaultLengthRuleCountsScalarsNotBytes() throws {
        let values = PlaceholderValues()
        let fits = String(repeating: "ş", count: Placeholders.maximumDefaultLength)
        #expect(try Placeholders.fill("{{ x | default: \"\(fits)\" }}", values: values) == fits)
        let over = fits + "ş"
        #expect(throws: TemplateError.self) { try Placeholders.fill("{{ x | default: \"\(over)\" }}", values: values) }
    }

    @Test func localizedTextBoundsEveryField() throws {
        var message = NotificationMessage()
        let template = String(repeating: "{{a}}", count: 2000)
        message.headings = ["en": template]
        message.subtitle = ["en": template]
        message.contents = ["en": template]
        let text = try LocalizedText.render(message, subscriberLanguage: "en", appDefaultLanguage: nil,
                                        placeholderValues: PlaceholderValues(tags: ["a": .string(String(repeating: "é", count: 10_000))]))
        for field in [text.title, text.subtitle, text.body] {
            #expect(field == String(repeating: "é", count: 2048))
        }
    }
}

/// Shortening serializes a constant number of times and cuts exactly where measuring every step would.
@Suite struct TextShortenerArithmeticTests {
    /// A JSON payload with the three texts and some fixed members, as the providers build theirs.
    static func json(_ text: LocalizedText) -> (output: [UInt8], size: Int) {
        var members: [String: JSONValue] = ["msgId": "MSG\"ID", "data": ["k": "v\n"]]
        if let title = text.title { members["title"] = .string(title) }
        if let subtitle = text.subtitle { members["subtitle"] = .string(subtitle) }
        if let body = text.body { members["body"] = .string(body) }
        let bytes = JSONValue.object(members).serialized()
        return (bytes, bytes.count)
    }

    /// Texts whose characters cost 1, 2, 3, 4 and 6 bytes in JSON, with clusters that must not split.
    static let samples: [LocalizedText] = [
        LocalizedText(title: "Merhaba \"Işıl\"", subtitle: "a\\b\tc", body: "Siparişin\nyolda \u{1}\u{1F} é 👩‍👩‍👧 🇹🇷 İzmir \"\\\" end"),
        LocalizedText(title: String(repeating: "\"", count: 40), subtitle: nil, body: String(repeating: "e\u{301}\n", count: 60)),
        LocalizedText(title: "", subtitle: "ş", body: String(repeating: "🙂\u{7}", count: 50)),
        LocalizedText(title: "only title \\ here", subtitle: nil, body: nil),
    ]

    @Test func cutsExactlyWhereRenderingEveryStepWould() throws {
        for sample in Self.samples {
            let whole = Self.json(sample).size
            for limit in stride(from: 0, through: whole + 1, by: 1) {
                let fast = TextShortener.fit(sample, limit: limit, counting: .jsonString, render: Self.json)
                let slow = TextShortener.searchByRendering(sample, limit: limit, counting: .jsonString, render: Self.json)
                switch (fast, slow) {
                case (.fitted(let a, let textA), .fitted(let b, let textB)):
                    #expect(a == b && textA == textB, "limit \(limit)")
                    #expect(a.count <= limit)
                case (.tooLarge(let a), .tooLarge(let b)):
                    #expect(a == b, "limit \(limit)")
                default:
                    Issue.record("limit \(limit): \(fast) vs \(slow)")
                }
            }
        }
    }

    @Test func rendersOnceWhenItFitsAndTwiceWhenItMustBeCut() throws {
        var renders = 0
        func counted(_ text: LocalizedText) -> (output: [UInt8], size: Int) {
            renders += 1
            return Self.json(text)
        }
        let short = LocalizedText(title: "Hi", body: "there")
        _ = TextShortener.fit(short, limit: 4096, counting: .jsonString, render: counted)
        #expect(renders == 1)

        renders = 0
        let huge = LocalizedText(title: String(repeating: "t", count: 4096), subtitle: String(repeating: "\"", count: 4096),
                                 body: String(repeating: "b", count: 4096))
        guard case .fitted(let output, let text) = TextShortener.fit(huge, limit: 4096, counting: .jsonString, render: counted) else {
            Issue.record("must fit once cut")
            return
        }
        #expect(renders == 2)
        #expect(output.count == 4096)
        // Longest first: the subtitle (8,192 JSON bytes) and the others (4,096) are all over the cut line,
        // so all three are cut to about a third of the room each.
        let costs = [text.title, text.subtitle, text.body].map { TextShortener.Counting.jsonString.bytes(of: $0 ?? "") }
        #expect(text.title?.hasSuffix("t…") == true && text.subtitle?.hasSuffix("\"…") == true && text.body?.hasSuffix("b…") == true)
        #expect(costs.max()! - costs.min()! <= 2, "\(costs)")

        renders = 0
        guard case .tooLarge = TextShortener.fit(huge, limit: 40, counting: .jsonString, render: counted) else {
            Issue.record("cannot fit")
            return
        }
        #expect(renders == 2)
    }

    @Test func aRenderThatDisagreesWithTheCountingFallsBackAndIsStillRight() throws {
        // Sizes that double every byte: the arithmetic prediction misses, and the fit measures every step.
        var renders = 0
        func doubled(_ text: LocalizedText) -> (output: LocalizedText, size: Int) {
            renders += 1
            return (text, 2 * [text.title, text.subtitle, text.body].reduce(0) { $0 + ($1?.utf8.count ?? 0) })
        }
        let text = LocalizedText(title: "TT", body: String(repeating: "b", count: 100))
        guard case .fitted(let output, _) = TextShortener.fit(text, limit: 100, counting: .utf8, render: doubled) else {
            Issue.record("must fit")
            return
        }
        #expect(output.body == String(repeating: "b", count: 45) + "…")  // 2 × (2 + 45 + 3) = 100
        #expect(renders > 2)
    }

    @Test func jsonCountingMatchesTheSerializer() throws {
        // Blocks of 512 scalars, then one by one where a block disagrees (so a failure names the scalar).
        var block = String.UnicodeScalarView()
        func check() {
            let text = String(block)
            let serialized = JSONValue.string(text).serialized().count - 2  // without the quotes
            if serialized != TextShortener.Counting.jsonString.bytes(of: text) {
                for scalar in block {
                    let one = JSONValue.string(String(scalar)).serialized().count - 2
                    #expect(one == TextShortener.Counting.jsonString.bytes(of: scalar), "U+\(String(scalar.value, radix: 16))")
                }
            }
            block = String.UnicodeScalarView()
        }
        // Every scalar below U+3000 (ASCII, controls, Latin, punctuation such as U+2028), the ones JSON
        // encoders are known to treat specially, and every 61st of the rest.
        let special: Set<UInt32> = [0x2028, 0x2029, 0xFEFF, 0xFFFD, 0xFFFF, 0x1F600, 0x10FFFF]
        for value in UInt32(0)...0x10FFFF where value < 0x3000 || value % 61 == 0 || special.contains(value) {
            guard let scalar = Unicode.Scalar(value) else { continue }
            block.append(scalar)
            if block.count == 512 { check() }
        }
        check()
        #expect(TextShortener.Counting.utf8.bytes(of: "ş\"\n") == 4)
    }
}
