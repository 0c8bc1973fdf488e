/// Chooses the text for a subscriber from a language map (`headings`, `contents`, `subtitle`), per
/// issue 3 item 2.
public enum LanguageSelector {
    /// Picks, in order: the subscriber's exact tag, its base language (`pt` for `pt-BR`), the app's default
    /// language (exact, then base), `en`, then the first key in byte order of the normalized keys (so the
    /// choice never depends on dictionary order). Tags compare ASCII-case-insensitively with `-` and `_`
    /// equal (`pt_br` = `pt-BR`); only ASCII letters are folded, so a Turkish `İ` in a malformed tag never
    /// turns into `i`. Entries with empty text are skipped.
    /// - Returns: the key as written in the map and its text, or `nil` when no entry has text.
    public static func pick(from texts: [String: String], subscriberLanguage: String?, appDefaultLanguage: String?) -> (language: String, text: String)? {
        let entries = texts.filter { !$0.value.isEmpty }
            .map { (normalized: normalize($0.key), key: $0.key, text: $0.value) }
            .sorted { ($0.normalized, $0.key) < ($1.normalized, $1.key) }
        guard !entries.isEmpty else { return nil }
        var candidates: [String] = []
        for tag in [subscriberLanguage, appDefaultLanguage].compactMap({ $0 }) where !tag.isEmpty {
            let normalized = normalize(tag)
            candidates.append(normalized)
            candidates.append(base(of: normalized))
        }
        candidates.append("en")
        for candidate in candidates {
            if let match = entries.first(where: { $0.normalized == candidate }) {
                return (match.key, match.text)
            }
        }
        return (entries[0].key, entries[0].text)
    }

    /// `pt_BR` -> `pt-br`: ASCII letters lower-cased, `_` as `-`, surrounding spaces removed.
    public static func normalize(_ tag: String) -> String {
        let bytes = tag.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte + 32
            case UInt8(ascii: "_"): UInt8(ascii: "-")
            default: byte
            }
        }
        return String(decoding: bytes, as: UTF8.self).trimmingSpaces()
    }

    /// The primary language subtag: `pt-br` -> `pt`.
    static func base(of normalized: String) -> String {
        String(normalized.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }
}

extension String {
    func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }
}
