/// Macrolanguages and the individual language each is taken to mean in written content (ISO 639-3
/// macrolanguages, as CLDR maps them): a subscriber of one reads a text keyed by the other, after every key of
/// its own language (docs/localization.md, "The chain", step 5).
///
/// Source: CLDR's supplemental data. `common/supplemental/supplementalMetadata.xml` lists a `languageAlias`
/// with `reason="macrolanguage"` for each individual language that CLDR canonicalizes to its macrolanguage
/// (`cmn` ⇒ `zh`, `arb` ⇒ `ar`, `zsm` ⇒ `ms`, `pes` ⇒ `fa`, ...); the table keeps those whose macrolanguage
/// has an ISO 639-1 (two-letter) code, the tags devices report and producers write. Norwegian comes from
/// `common/supplemental/languageInfo.xml`: its language matching treats `no` and `nb` (Bokmål) as one
/// language (distance 1, both ways), since `no` content is Bokmål. ICU, which Foundation's `Locale` uses,
/// applies none of these when it canonicalizes a BCP 47 tag, so they are listed here.
///
/// Not included: an individual language CLDR does not alias to its macrolanguage (Nynorsk `nn`, Cantonese
/// `yue`, Sorani `ckb`, Egyptian Arabic `arz`, ...) is a language of its own, and two individual languages of
/// one macrolanguage (`fat` and `tw`, both Akan) do not match each other.
enum Macrolanguages {
    /// Individual language -> its macrolanguage, lower case.
    static let macrolanguageOf: [String: String] = [
        "als": "sq",  // Tosk Albanian -> Albanian
        "arb": "ar",  // Standard Arabic -> Arabic
        "ayr": "ay",  // Central Aymara -> Aymara
        "azj": "az",  // North Azerbaijani -> Azerbaijani
        "cmn": "zh",  // Mandarin Chinese -> Chinese
        "cwd": "cr",  // Woods Cree -> Cree
        "ekk": "et",  // Standard Estonian -> Estonian
        "esk": "ik",  // Northwest Alaska Inupiatun -> Inupiaq
        "fat": "ak",  // Fanti -> Akan
        "fuc": "ff",  // Pulaar -> Fulah
        "gaz": "om",  // West Central Oromo -> Oromo
        "gug": "gn",  // Paraguayan Guaraní -> Guaraní
        "ike": "iu",  // Eastern Canadian Inuktitut -> Inuktitut
        "khk": "mn",  // Halh Mongolian -> Mongolian
        "kmr": "ku",  // Northern Kurdish -> Kurdish
        "knc": "kr",  // Central Kanuri -> Kanuri
        "kng": "kg",  // Koongo -> Kongo
        "kpv": "kv",  // Komi-Zyrian -> Komi
        "lvs": "lv",  // Standard Latvian -> Latvian
        "nb": "no",  // Norwegian Bokmål -> Norwegian (languageInfo.xml)
        "npi": "ne",  // Nepali (individual language) -> Nepali
        "ojg": "oj",  // Eastern Ojibwa -> Ojibwa
        "ory": "or",  // Odia (individual language) -> Odia
        "pbu": "ps",  // Northern Pashto -> Pashto
        "pes": "fa",  // Western Farsi -> Persian
        "plt": "mg",  // Plateau Malagasy -> Malagasy
        "quz": "qu",  // Cusco Quechua -> Quechua
        "src": "sc",  // Logudorese Sardinian -> Sardinian
        "swh": "sw",  // Swahili (individual language) -> Swahili
        "tw": "ak",  // Twi -> Akan
        "uzn": "uz",  // Northern Uzbek -> Uzbek
        "ydd": "yi",  // Eastern Yiddish -> Yiddish
        "zsm": "ms",  // Standard Malay -> Malay
        "zyb": "za",  // Yongbei Zhuang -> Zhuang
    ]

    /// Macrolanguage -> the individual languages above, in byte order.
    static let individualLanguagesOf: [String: [String]] = Dictionary(
        grouping: macrolanguageOf.keys.sorted(), by: { macrolanguageOf[$0] ?? $0 })

    /// The languages `language` (a primary language subtag, lower case) matches besides itself: its
    /// macrolanguage, or the individual languages it is taken to mean. `no` -> `["nb"]`, `nb` -> `["no"]`,
    /// `zh` -> `["cmn"]`, `ak` -> `["fat", "tw"]`; `[]` for most languages.
    static func equivalents(of language: String) -> [String] {
        if let macrolanguage = macrolanguageOf[language] { return [macrolanguage] }
        return individualLanguagesOf[language] ?? []
    }
}
