import Foundation
import Synchronization

/// Chooses the text for a subscriber from a language map (`headings`, `contents`, `subtitle`) by BCP 47
/// (RFC 5646) language tags. The chain, with examples, is in docs/localization.md.
///
/// Foundation's `Locale` gives ICU's canonicalization and CLDR likely-subtags data; ``Macrolanguages`` adds
/// CLDR's macrolanguage equivalents, which ICU does not apply. No I/O.
public enum LanguageSelector {
    /// The best entry of `texts` for the subscriber: the first of ``ranked(from:subscriberLanguage:appDefaultLanguage:)``.
    /// - Returns: the key as written in the map and its text, or `nil` when no entry has text.
    public static func pick(from texts: [String: String], subscriberLanguage: String?, appDefaultLanguage: String?) -> (language: String, text: String)? {
        order(texts, subscriberLanguage: subscriberLanguage, appDefaultLanguage: appDefaultLanguage, firstOnly: true).first
    }

    /// Every entry of `texts` that has text, best first:
    /// 1. the subscriber's tag, canonicalized (``canonical(_:)``: `pt_br` = `PT-BR` = `pt-BR`, `iw` = `he`);
    /// 2. RFC 4647 §3.4 lookup: subtags dropped from the end (`de-DE-1996`, `de-DE`), down to but not yet the
    ///    bare language;
    /// 3. likely subtags (CLDR, through `Locale.Language.maximalIdentifier`): a key whose maximal form is the
    ///    subscriber's (`zh-TW`, `zh-Hant`, `zh-Hant-TW` are one), then language-script (`zh-TW` reads
    ///    `zh-Hant`; `sr-ME` reads `sr-Latn`);
    /// 4. the bare language (`pt` for `pt-PT`);
    /// 5. steps 1-4 again with the language replaced by its macrolanguage or by the individual language the
    ///    macrolanguage is taken to mean (``Macrolanguages``, from CLDR: `nb-NO` reads `no-NO`, then `no`; `no`
    ///    reads `nb`; `zh-TW` reads `cmn-TW`), so a key of the subscriber's own language always wins;
    /// 6. the same chain for the app's default language, then for `en`;
    /// 7. the rest in byte order of their canonical keys, so the choice never depends on dictionary order.
    ///
    /// Keys get the same canonicalization as tags; two keys that canonicalize alike are ordered by the key as
    /// written. Entries with empty text are skipped.
    public static func ranked(from texts: [String: String], subscriberLanguage: String?, appDefaultLanguage: String?) -> [(language: String, text: String)] {
        order(texts, subscriberLanguage: subscriberLanguage, appDefaultLanguage: appDefaultLanguage, firstOnly: false)
    }

    private static func order(_ texts: [String: String], subscriberLanguage: String?, appDefaultLanguage: String?,
                              firstOnly: Bool) -> [(language: String, text: String)]
    {
        let withText = texts.filter { !$0.value.isEmpty }
        guard !withText.isEmpty else { return [] }
        // One language (most transactional messages): it is the choice whatever the tags, since every entry
        // with text ends up in the order (step 7). Skips the tags' resolution and the sort.
        if withText.count == 1, let only = withText.first { return [(only.key, only.value)] }
        let tags = [subscriberLanguage, appDefaultLanguage, "en"].compactMap { $0 }
        var resolved = resolve(Array(withText.keys) + tags)
        // The tags with a macrolanguage equivalent (few: most languages have none), resolved like the others.
        let equivalentTags = tags.flatMap { resolved[$0]?.equivalentTags ?? [] }
        if !equivalentTags.isEmpty { resolved.merge(resolve(equivalentTags)) { known, _ in known } }
        let entries = withText.map { key, text in
            Entry(key: key, text: text, canonical: resolved[key]?.comparable ?? normalize(key), maximal: resolved[key]?.maximal ?? "")
        }.sorted { ($0.canonical, $0.key) < ($1.canonical, $1.key) }
        var result: [(language: String, text: String)] = []
        var taken = Set<String>()
        func take(_ matches: (Entry) -> Bool) {
            for entry in entries where !taken.contains(entry.key) && matches(entry) {
                taken.insert(entry.key)
                result.append((entry.key, entry.text))
                if firstOnly { return }
            }
        }
        func take(chain: Chain) {
            for range in chain.ranges { take { $0.canonical == range } }
            if let maximalTag = chain.maximal {
                take { $0.maximal == maximalTag }
                if let script = chain.languageScript { take { $0.canonical == script } }
            }
            take { $0.canonical == chain.language }
        }
        for tag in tags {
            guard let tagResolved = resolved[tag], let chain = tagResolved.chain else { continue }
            take(chain: chain)
            for equivalent in tagResolved.equivalentTags {
                if let equivalentChain = resolved[equivalent]?.chain { take(chain: equivalentChain) }
            }
            if firstOnly, !result.isEmpty { return result }
        }
        take { _ in true }
        return result
    }

    /// A tag in BCP 47 canonical form (RFC 5646 §4.5, by ICU): `_` as `-`, conventional case (`zh-Hant-TW`),
    /// deprecated subtags replaced by their IANA registry preferred values (`iw` -> `he`, `in` -> `id`,
    /// `ji` -> `yi`, `mo` -> `ro`), extended language subtags folded (`zh-yue` -> `yue`). A tag ICU cannot read
    /// (empty subtags, non-ASCII letters) is only case-folded (ASCII letters only, so a Turkish `İ` never turns
    /// into `i`) and compared as written. `nil` for an empty tag or `und`.
    public static func canonical(_ tag: String) -> String? {
        let simple = normalize(tag)
        guard !simple.isEmpty, simple != "und" else { return nil }
        let wellFormed = simple.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "-")
        }
        guard wellFormed, !simple.hasPrefix("-"), !simple.hasSuffix("-"), !simple.contains("--") else { return simple }
        let icu = Locale.identifier(.bcp47, from: simple)
        // ICU turns what it cannot parse into `und` or a private `lvariant`; compare such tags as written.
        if icu == "und" || icu.isEmpty || icu.contains("-x-lvariant") { return simple }
        return icu
    }

    /// `pt_BR` -> `pt-br`: ASCII letters lower-cased, `_` as `-`, surrounding spaces removed.
    public static func normalize(_ tag: String) -> String {
        comparable(tag.replacingUnderscores()).trimmingSpaces()
    }

    private struct Entry {
        let key: String
        let text: String
        /// ``canonical(_:)`` with ASCII letters lower-cased: tags compare case-insensitively (RFC 5646 §2.1.1).
        let canonical: String
        let maximal: String
    }

    /// One tag's canonical form (lower-cased, `nil` for no language) and likely-subtags form, the lookup
    /// chain they give (`nil` for no language), and the tag with its language replaced by each macrolanguage
    /// equivalent (`nb-no` -> `no-no`): cached with the tag, since a pick for every text of every delivery
    /// would otherwise split and join it again.
    private struct Resolved: Sendable {
        let comparable: String?
        let maximal: String
        let chain: Chain?
        let equivalentTags: [String]

        init(comparable: String?, maximal: String) {
            self.comparable = comparable
            self.maximal = maximal
            let chain = comparable.map { lookupChain($0, maximal: maximal) }
            self.chain = chain
            equivalentTags = chain.map { chain in
                let rest = comparable.map { $0.dropFirst(chain.language.count) } ?? ""
                return Macrolanguages.equivalents(of: chain.language).map { $0 + rest }
            } ?? []
        }
    }

    /// The most tags whose ICU results are kept. ICU's canonicalization and likely-subtags lookups cost
    /// hundreds of microseconds per map; the tags in use (device languages, map keys) are few, so a small
    /// cache makes a pick cost dictionary lookups. Bounded, because tags are tenant-chosen text.
    static let maximumCachedTags = 1024
    /// Tags longer than this are resolved every time rather than cached (no registered tag comes close).
    static let maximumCachedTagBytes = 64
    private static let cache = Mutex(LRUCache<String, Resolved>(capacity: maximumCachedTags))

    /// ``Resolved`` for each tag: cached ones under one lock, the others computed outside it.
    private static func resolve(_ tags: [String]) -> [String: Resolved] {
        var result: [String: Resolved] = [:]
        cache.withLock { cache in
            for tag in tags where tag.utf8.count <= maximumCachedTagBytes {
                if let known = cache.value(forKey: tag) { result[tag] = known }
            }
        }
        var computed: [(String, Resolved)] = []
        for tag in tags where result[tag] == nil {
            let comparableTag = canonical(tag).map(comparable)
            let resolved = Resolved(comparable: comparableTag, maximal: comparableTag.map(maximalForm(of:)) ?? "")
            result[tag] = resolved
            if tag.utf8.count <= maximumCachedTagBytes { computed.append((tag, resolved)) }
        }
        if !computed.isEmpty {
            cache.withLock { cache in
                for (tag, resolved) in computed { cache.insert(resolved, forKey: tag) }
            }
        }
        return result
    }

    private struct Chain: Sendable {
        /// The tag, then RFC 4647 §3.4 truncations, without the bare language.
        var ranges: [String]
        /// language-script-region from likely subtags, when ICU knows them.
        var maximal: String?
        var languageScript: String?
        var language: String
    }

    private static func lookupChain(_ tag: String, maximal: String) -> Chain {
        var subtags = tag.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        var ranges: [String] = []
        while subtags.count > 1 {
            ranges.append(subtags.joined(separator: "-"))
            subtags.removeLast()
            // RFC 4647 §3.4: a singleton (`x`, `u`) left at the end goes too.
            while subtags.count > 1, subtags.last?.utf8.count == 1 { subtags.removeLast() }
        }
        let language = subtags.first ?? tag
        let parts = maximal.split(separator: "-")
        let hasScript = parts.count >= 2 && parts[1].utf8.count == 4
        return Chain(ranges: ranges, maximal: hasScript ? maximal : nil,
                     languageScript: hasScript ? "\(parts[0])-\(parts[1])" : nil, language: language)
    }

    /// `language-Script-Region` from CLDR likely subtags (`zh-tw` -> `zh-hant-tw`), lower-cased; the tag
    /// itself when ICU has no data for it.
    private static func maximalForm(of tag: String) -> String {
        let maximal = Locale.Language(identifier: tag).maximalIdentifier
        return maximal.isEmpty || maximal == "und" ? tag : comparable(maximal)
    }

    /// ASCII letters lower-cased, nothing else touched.
    private static func comparable(_ text: String) -> String {
        String(decoding: text.utf8.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
    }
}

extension String {
    func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }

    fileprivate func replacingUnderscores() -> String {
        String(decoding: utf8.map { $0 == UInt8(ascii: "_") ? UInt8(ascii: "-") : $0 }, as: UTF8.self)
    }
}
