/// Fits a payload under a provider's size limit by shortening its visible texts (issue 3 item 6): the
/// `body` first, then `subtitle`, then `title`, each cut at a grapheme-cluster boundary (a Swift
/// `Character`, so a ZWJ emoji sequence or a letter with its combining accent is never split and no lone
/// surrogate can appear) and ended with `…` (U+2026, 3 UTF-8 bytes). Each cut keeps the longest prefix
/// that fits.
///
/// The payload is serialized at most twice, whatever the texts' lengths: once as given (most payloads fit
/// and are done), and once more with the shortened texts. In between, sizes are arithmetic: a text field's
/// bytes in the payload depend only on its own characters (``Counting``), so the size of everything else
/// is the first measure minus the texts' bytes, and each cut point is found by one walk over a field's
/// characters that adds up their bytes. The second serialization is measured too and must equal the
/// predicted size; if it ever did not (a serializer escaping differently from ``Counting``), the fit falls
/// back to measuring a rendered payload per step of a binary search, so the result is never wrong.
/// Serialized JSON is never sliced, so escapes (`\"`, `\\`, `\n`) are counted exactly as they go on the wire.
public enum TextShortener {
    /// The result of ``fit(_:limit:counting:render:)``.
    public enum Outcome<Output> {
        /// `output` fits; `text` is what it was rendered from (shortened or not).
        case fitted(Output, text: LocalizedText)
        /// Still larger than the limit with every text shortened to `…`; `size` is that last measure.
        case tooLarge(size: Int)
    }

    /// How the bytes of a text field count in the measured size of a payload.
    public enum Counting: Sendable {
        /// As the contents of a JSON string written by ``JSONValue/serialized()``: UTF-8, with `"` and `\`
        /// as 2 bytes (`\"`, `\\`), backspace, tab, line feed, form feed and carriage return as 2 (`\b`,
        /// `\t`, `\n`, `\f`, `\r`), other controls below U+0020 as 6 (`\u001b`), and nothing else escaped
        /// (`/` stays as itself, non-ASCII is written as UTF-8, RFC 8259 §7).
        case jsonString
        /// Plain UTF-8 bytes (FCM counts `data` strings, not their JSON spelling).
        case utf8

        /// The bytes `scalar` adds.
        public func bytes(of scalar: Unicode.Scalar) -> Int {
            switch self {
            case .utf8:
                return UTF8.width(scalar)
            case .jsonString:
                switch scalar.value {
                case 0x22, 0x5C, 0x08, 0x09, 0x0A, 0x0C, 0x0D: return 2
                case 0..<0x20: return 6
                default: return UTF8.width(scalar)
                }
            }
        }

        /// The bytes `text` adds.
        public func bytes(of text: some StringProtocol) -> Int {
            switch self {
            case .utf8: return text.utf8.count
            case .jsonString: return text.unicodeScalars.reduce(0) { $0 + bytes(of: $1) }
            }
        }
    }

    /// The field order of shortening.
    static var order: [WritableKeyPath<LocalizedText, String?>] { [\.body, \.subtitle, \.title] }
    /// `…`, U+2026: 3 bytes in UTF-8 and in JSON (never escaped).
    static let ellipsis = "…"
    static let ellipsisBytes = 3

    /// Renders `text`, and if the measure exceeds `limit`, shortens `body`, then `subtitle`, then `title`
    /// (a field that is `nil` or empty is skipped; a field that cannot help even as `…` stays `…` and the
    /// next one is cut), then renders once more.
    /// - Parameters:
    ///   - limit: the largest acceptable size, in the unit `render` measures (bytes for every provider).
    ///   - counting: how each character of `title`, `subtitle` and `body` counts in `render`'s size. The
    ///     rest of the payload may be anything, provided it does not depend on the texts' contents (only on
    ///     which of them are `nil`, and shortening never changes that).
    ///   - render: builds the payload for a candidate text and returns it with its size. Called twice at
    ///     most when `counting` is right (once when `text` fits as it is).
    public static func fit<Output>(_ text: LocalizedText, limit: Int, counting: Counting,
                                   render: (LocalizedText) -> (output: Output, size: Int)) -> Outcome<Output>
    {
        let whole = render(text)
        if whole.size <= limit { return .fitted(whole.output, text: text) }
        let planned = plan(text, wholeSize: whole.size, limit: limit, counting: counting)
        let rendered = render(planned.text)
        guard rendered.size == planned.size else {
            return searchByRendering(text, limit: limit, render: render)
        }
        return planned.fits ? .fitted(rendered.output, text: planned.text) : .tooLarge(size: rendered.size)
    }

    /// The shortened text and its predicted size, from arithmetic alone: O(length of the texts).
    static func plan(_ text: LocalizedText, wholeSize: Int, limit: Int, counting: Counting)
        -> (text: LocalizedText, size: Int, fits: Bool)
    {
        var text = text
        var fieldBytes = order.map { text[keyPath: $0].map { counting.bytes(of: $0) } ?? 0 }
        // Everything but the texts: keys, punctuation, the rest of the payload.
        let fixed = wholeSize - fieldBytes.reduce(0, +)
        for (position, field) in order.enumerated() {
            guard let original = text[keyPath: field], !original.isEmpty else { continue }
            let others = fixed + fieldBytes.enumerated().reduce(0) { $0 + ($1.offset == position ? 0 : $1.element) }
            let budget = limit - others - ellipsisBytes  // bytes left for the kept prefix
            if budget >= 0 {
                // The longest prefix of whole characters within the budget (never all of them: that was
                // measured and did not fit).
                var kept = 0
                var end = original.startIndex
                var index = original.startIndex
                while index < original.endIndex {
                    let next = original.index(after: index)
                    let cost = counting.bytes(of: original[index..<next])
                    guard kept + cost <= budget, next < original.endIndex else { break }
                    kept += cost
                    end = next
                    index = next
                }
                text[keyPath: field] = String(original[..<end]) + ellipsis
                return (text, others + kept + ellipsisBytes, true)
            }
            text[keyPath: field] = ellipsis  // this field cannot help more; move to the next
            fieldBytes[position] = ellipsisBytes
        }
        return (text, fixed + fieldBytes.reduce(0, +), false)
    }

    /// The same search, measuring a rendered payload at every step: O(log n) renders per field. Used only
    /// when a rendered size disagrees with ``Counting``.
    static func searchByRendering<Output>(_ text: LocalizedText, limit: Int,
                                          render: (LocalizedText) -> (output: Output, size: Int)) -> Outcome<Output>
    {
        var text = text
        var current = render(text)
        if current.size <= limit { return .fitted(current.output, text: text) }
        for field in order {
            guard let original = text[keyPath: field], !original.isEmpty else { continue }
            let characters = Array(original)
            var low = 0                      // fewest characters still worth trying
            var high = characters.count - 1  // keeping everything did not fit
            var best: (output: Output, text: LocalizedText)?
            while low <= high {
                let keep = (low + high) / 2
                var candidate = text
                candidate[keyPath: field] = String(characters[..<keep]) + ellipsis
                let rendered = render(candidate)
                if rendered.size <= limit {
                    best = (rendered.output, candidate)
                    low = keep + 1
                } else {
                    high = keep - 1
                }
            }
            if let best { return .fitted(best.output, text: best.text) }
            text[keyPath: field] = ellipsis
            current = render(text)
        }
        return .tooLarge(size: current.size)
    }
}
