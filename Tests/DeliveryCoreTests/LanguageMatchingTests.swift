@testable import DeliveryCore
import Testing

/// BCP 47 matching: canonical forms from the IANA registry, scripts from CLDR likely subtags, then
/// RFC 4647 §3.4 lookup (docs/localization.md).
@Suite struct LanguageMatchingTests {
    static let chinese = ["en": "Hello", "zh-Hans": "你好", "zh-Hant": "妳好"]

    @Test(arguments: [
        ("zh-Hant-TW", "zh-Hant"), ("zh-TW", "zh-Hant"), ("zh_tw", "zh-Hant"), ("ZH-HK", "zh-Hant"), ("zh-MO", "zh-Hant"),
        ("zh-CN", "zh-Hans"), ("zh-SG", "zh-Hans"), ("zh", "zh-Hans"), ("zh-Hans-HK", "zh-Hans"), ("zh-Hant-CN", "zh-Hant"),
        ("en-GB", "en"), ("ja", "en"),
    ])
    func chineseScriptFromRegion(subscriber: String, expected: String) throws {
        let picked = try #require(LanguageSelector.pick(from: Self.chinese, subscriberLanguage: subscriber, appDefaultLanguage: nil))
        #expect(picked.language == expected)
    }

    @Test(arguments: [
        (["sr-Latn": "Zdravo", "sr-Cyrl": "Здраво", "en": "Hi"], "sr-ME", "sr-Latn"),
        (["sr-Latn": "Zdravo", "sr-Cyrl": "Здраво", "en": "Hi"], "sr", "sr-Cyrl"),
        (["sr-Latn": "Zdravo", "sr-Cyrl": "Здраво", "en": "Hi"], "sr-RS", "sr-Cyrl"),
        (["uz-Latn": "Salom", "uz-Arab": "سلام", "en": "Hi"], "uz-AF", "uz-Arab"),
        (["uz-Latn": "Salom", "uz-Arab": "سلام", "en": "Hi"], "uz", "uz-Latn"),
        (["az-Latn": "Salam", "az-Arab": "سلام", "en": "Hi"], "az-IR", "az-Arab"),
        (["az-Latn": "Salam", "az-Arab": "سلام", "en": "Hi"], "az-AZ", "az-Latn"),
        // Likely-subtag equivalents: the key zh-TW is zh-Hant-TW.
        (["zh-TW": "妳好", "zh-CN": "你好", "en": "Hi"], "zh-Hant", "zh-TW"),
        (["zh-TW": "妳好", "zh-CN": "你好", "en": "Hi"], "zh-Hans-CN", "zh-CN"),
        (["zh-TW": "妳好", "zh-CN": "你好", "en": "Hi"], "zh", "zh-CN"),
        // A script written in the tag wins over the region's usual one.
        (["sr-Latn": "Zdravo", "sr": "Здраво"], "sr-Latn-RS", "sr-Latn"),
    ] as [([String: String], String, String)])
    func scriptMatters(texts: [String: String], subscriber: String, expected: String) throws {
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: subscriber, appDefaultLanguage: "en")?.language == expected)
    }

    /// IANA registry preferred values: the deprecated code and its replacement are one language, whichever
    /// side (the device or the map key) uses the old one.
    @Test(arguments: [
        ("iw", "he", "he"), ("iw-IL", "he", "he"), ("he", "iw", "iw"), ("in", "id", "id"), ("in_ID", "id", "id"),
        ("id", "in", "in"), ("ji", "yi", "yi"), ("mo", "ro", "ro"), ("zh-yue", "yue", "yue"),
    ])
    func deprecatedCodes(subscriber: String, key: String, expected: String) throws {
        let picked = LanguageSelector.pick(from: [key: "x", "en": "y"], subscriberLanguage: subscriber, appDefaultLanguage: nil)
        #expect(picked?.language == expected)
    }

    /// A macrolanguage and the individual language it is taken to mean serve each other's readers (CLDR:
    /// `no` ⇒ `nb` in languageInfo.xml, `cmn` ⇒ `zh` and the other `reason="macrolanguage"` aliases in
    /// supplementalMetadata.xml), whichever side the device or the map key is on.
    @Test(arguments: [
        ("nb-NO", "no", "no"), ("nb", "no", "no"), ("nb_no", "NO", "NO"), ("no", "nb", "nb"), ("no-NO", "nb", "nb"),
        ("no", "nb-NO", "nb-NO"), ("nb-NO", "no-NO", "no-NO"),
        ("zh-CN", "cmn", "cmn"), ("cmn", "zh", "zh"), ("ms-MY", "zsm", "zsm"), ("zsm", "ms", "ms"),
        ("ar-EG", "arb", "arb"), ("arb", "ar", "ar"), ("fa-IR", "pes", "pes"), ("pes", "fa", "fa"),
        ("sw", "swh", "swh"), ("lv-LV", "lvs", "lvs"), ("et", "ekk", "ekk"),
    ])
    func macrolanguageMatchesItsIndividualLanguage(subscriber: String, key: String, expected: String) {
        let picked = LanguageSelector.pick(from: [key: "x", "en": "y"], subscriberLanguage: subscriber, appDefaultLanguage: "en")
        #expect(picked?.language == expected)
    }

    /// Every key of the subscriber's own language comes before its macrolanguage's (or individual language's).
    @Test func ownLanguageWinsOverItsMacrolanguage() {
        let texts = ["no": "Norsk", "nb": "Bokmål", "en": "English"]
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "nb-NO", appDefaultLanguage: "en")?.language == "nb")
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "no", appDefaultLanguage: "en")?.language == "no")
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "no-NO", appDefaultLanguage: "en")?.language == "no")
        // Even a region of the own language (likely subtags: nb = nb-Latn-NO) wins over the macrolanguage's exact tag.
        #expect(LanguageSelector.pick(from: ["nb-NO": "a", "no": "b"], subscriberLanguage: "nb", appDefaultLanguage: nil)?.language == "nb-NO")
        // The equivalent's own lookup chain: region first, then the bare language.
        #expect(LanguageSelector.pick(from: ["no-NO": "a", "no": "b", "en": "c"], subscriberLanguage: "nb-NO", appDefaultLanguage: nil)?.language == "no-NO")
        // Likely subtags apply to the equivalent tag too: a `cmn-TW` device reads the Traditional text.
        #expect(LanguageSelector.pick(from: ["zh-Hans": "a", "zh-Hant": "b", "en": "c"], subscriberLanguage: "cmn-TW", appDefaultLanguage: nil)?.language == "zh-Hant")
        // The macrolanguage step comes before the app default and `en`.
        #expect(LanguageSelector.ranked(from: ["de": "Hallo", "no": "Hei", "en": "Hi"], subscriberLanguage: "nb", appDefaultLanguage: "de")
            .map(\.language) == ["no", "de", "en"])
        // The app default's macrolanguage counts too.
        #expect(LanguageSelector.pick(from: ["nb": "Hei", "en": "Hi"], subscriberLanguage: "ja", appDefaultLanguage: "no")?.language == "nb")
    }

    /// Only a macrolanguage and the individual language CLDR takes it to mean: other individual languages, and
    /// languages merely related, stay apart. `tl` (Tagalog) and `fil` (Filipino) are distinct registry entries.
    @Test func onlyMacrolanguageEquivalentsMatch() {
        for (subscriber, key) in [("nn", "no"), ("no", "nn"), ("nn", "nb"), ("yue", "zh"), ("zh", "yue"), ("fat", "tw"), ("tl", "fil"),
                                  ("ckb", "ku"), ("da", "no")] {
            let picked = LanguageSelector.pick(from: [key: "x", "en": "y"], subscriberLanguage: subscriber, appDefaultLanguage: nil)
            #expect(picked?.language == "en", "\(subscriber) read \(key)")
        }
        #expect(Macrolanguages.equivalents(of: "no") == ["nb"])
        #expect(Macrolanguages.equivalents(of: "nb") == ["no"])
        #expect(Macrolanguages.equivalents(of: "ak") == ["fat", "tw"])
        #expect(Macrolanguages.equivalents(of: "en") == [])
        // Every macrolanguage has a two-letter code and no individual language is a macrolanguage too.
        for (individual, macrolanguage) in Macrolanguages.macrolanguageOf {
            #expect(macrolanguage.utf8.count == 2)
            #expect(Macrolanguages.macrolanguageOf[macrolanguage] == nil, "\(individual)")
        }
    }

    /// RFC 4647 §3.4: subtags go from the end, a singleton left at the end goes with the next one.
    @Test(arguments: [
        ("de-DE-1996", "de-DE-1996"), ("de-CH-1996", "de-CH"), ("de-AT", "de"), ("de-DE-x-private", "de-DE"),
        ("en-US-u-ca-gregory", "en"),
    ])
    func lookupDropsSubtagsFromTheEnd(subscriber: String, expected: String) {
        let texts = ["de-DE-1996": "a", "de-CH": "b", "de": "c", "en": "d", "de-DE": "e"]
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: subscriber, appDefaultLanguage: nil)?.language == expected)
    }

    @Test func canonicalForms() {
        #expect(LanguageSelector.canonical("pt_BR") == "pt-BR")
        #expect(LanguageSelector.canonical("PT-br") == "pt-BR")
        #expect(LanguageSelector.canonical(" zh-hant-tw ") == "zh-Hant-TW")
        #expect(LanguageSelector.canonical("iw") == "he")
        #expect(LanguageSelector.canonical("zh-yue") == "yue")
        #expect(LanguageSelector.canonical("art-lojban") == "jbo")
        #expect(LanguageSelector.canonical("no") == "no")
        #expect(LanguageSelector.canonical("") == nil)
        #expect(LanguageSelector.canonical("und") == nil)
        // What ICU cannot parse is compared as written, ASCII-folded only.
        #expect(LanguageSelector.canonical("en--US") == "en--us")
        #expect(LanguageSelector.canonical("İT") == "İt")
    }

    /// The third example table of docs/localization.md (macrolanguages).
    @Test(arguments: [
        ("nb-NO", "no", "nb"), ("nb", "no", "nb"), ("no", "no", "no"), ("no-NO", "no", "no"), ("nn-NO", "en", "en"),
        ("ms-MY", "zsm", "en"),
    ])
    func documentedMacrolanguageExamples(subscriber: String, inFirstMap: String, inSecondMap: String) {
        let first = ["en": "Hi", "no": "Hei", "zsm": "Hai"], second = ["en": "Hi", "no": "Hei", "nb": "Hei!"]
        #expect(LanguageSelector.pick(from: first, subscriberLanguage: subscriber, appDefaultLanguage: nil)?.language == inFirstMap)
        #expect(LanguageSelector.pick(from: second, subscriberLanguage: subscriber, appDefaultLanguage: nil)?.language == inSecondMap)
    }

    /// The second example table of docs/localization.md.
    @Test(arguments: [
        ("pt_br", nil, "pt-BR"), ("pt-PT", nil, "pt"), ("sr-ME", nil, "sr-Latn"), ("sr", nil, "sr-Cyrl"), ("sr-RS", nil, "sr-Cyrl"),
        ("iw-IL", nil, "he"), ("ko", "pt-BR", "pt-BR"), ("ko", "ja", "en"),
    ] as [(String, String?, String)])
    func documentedExamples(subscriber: String, appDefault: String?, expected: String) {
        let texts = ["en": "Hi", "pt": "Olá", "pt-BR": "Oi", "sr-Latn": "Zdravo", "sr-Cyrl": "Здраво", "he": "שלום"]
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: subscriber, appDefaultLanguage: appDefault)?.language == expected)
    }

    /// Lookup, not distance matching: a sibling region is not preferred over the bare language.
    @Test func siblingRegionsAreNotPreferred() {
        #expect(LanguageSelector.pick(from: ["en-US": "a", "en": "b"], subscriberLanguage: "en-GB", appDefaultLanguage: nil)?.language == "en")
        #expect(LanguageSelector.pick(from: ["pt-BR": "a", "fr": "b"], subscriberLanguage: "pt-PT", appDefaultLanguage: "fr")?.language == "fr")
    }

    @Test func appDefaultAndEnglishGoThroughTheSameChain() {
        let texts = ["zh-Hant": "妳好", "en-US": "Hi", "fr": "Salut"]
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "ja", appDefaultLanguage: "zh-TW")?.language == "zh-Hant")
        #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "ja", appDefaultLanguage: "ko")?.language == "en-US")
    }

    /// ICU results are cached per tag, bounded: more distinct tags than the cache holds, and tags too long
    /// to cache, still resolve the same.
    @Test func manyDistinctAndLongTagsResolveTheSame() {
        for index in 0..<(LanguageSelector.maximumCachedTags + 100) {
            let texts = ["en": "Hi", "x-\(index)": "private"]
            #expect(LanguageSelector.pick(from: texts, subscriberLanguage: "x-\(index)", appDefaultLanguage: nil)?.language == "x-\(index)")
        }
        let long = "zh-Hant-TW-" + Array(repeating: "abcdefgh", count: 10).joined(separator: "-")
        #expect(long.utf8.count > LanguageSelector.maximumCachedTagBytes)
        #expect(LanguageSelector.pick(from: Self.chinese, subscriberLanguage: long, appDefaultLanguage: nil)?.language == "zh-Hant")
        #expect(LanguageSelector.pick(from: Self.chinese, subscriberLanguage: "zh-TW", appDefaultLanguage: nil)?.language == "zh-Hant")
    }

    @Test func rankedListsTheWholeChainOnce() {
        let texts = ["en": "Hi", "zh-Hans": "你好", "zh-Hant": "妳好", "zh": "中文", "ar": "مرحبا"]
        let ranked = LanguageSelector.ranked(from: texts, subscriberLanguage: "zh-TW", appDefaultLanguage: "ar").map(\.language)
        #expect(ranked == ["zh-Hant", "zh", "ar", "en", "zh-Hans"])
    }

    /// A map with one language (or one with text) gives that entry whatever the subscriber's and app's tags,
    /// malformed and empty ones included: step 6 takes every entry left.
    @Test(arguments: [nil, "", "tr", "zh-Hant-TW", "x-private", "İ", "und"] as [String?])
    func aSingleLanguageIsTheChoiceForAnyTag(subscriber: String?) {
        for texts in [["de-AT": "Servus"], ["de-AT": "Servus", "fr": ""]] {
            for appDefault in [nil, "en", "pt_BR"] as [String?] {
                let picked = LanguageSelector.pick(from: texts, subscriberLanguage: subscriber, appDefaultLanguage: appDefault)
                #expect(picked?.language == "de-AT" && picked?.text == "Servus")
                let ranked = LanguageSelector.ranked(from: texts, subscriberLanguage: subscriber, appDefaultLanguage: appDefault)
                #expect(ranked.map(\.language) == ["de-AT"])
            }
        }
    }
}
