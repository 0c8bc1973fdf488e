/// Fits a payload under a provider's size limit by shortening its visible texts (docs/wire-formats.md), longest
/// first ("water-filling"): the largest cut line `L` (in bytes as the payload counts them, at least 3) is
/// chosen such that, with every text longer than `L` bytes cut to at most `L` (its longest prefix within
/// `L - 3` bytes, then `…`), the payload fits. Texts of `L` bytes or fewer keep every character, so a
/// short body survives beside an oversized title, and two long texts are cut to about the same size.
/// Cuts fall on grapheme-cluster boundaries (a Swift `Character`, so a ZWJ emoji sequence or a letter
/// with its combining accent is never split and no lone surrogate can appear) and end with `…` (U+2026,
/// 3 UTF-8 bytes).
///
/// The payload is serialized at most twice, whatever the texts' lengths: once as given (most payloads fit
/// and are done), and once more with the shortened texts. In between, sizes are arithmetic: a text field's
/// bytes in the payload depend only on its own characters (``Counting``), so the size of everything else
/// is the first measure minus the texts' bytes, and one walk over each field's characters records
/// its cumulative byte costs; the cut line is then found by binary search (O(n + log² n) in all). The second serialization is measured too and must equal the
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

    /// The fields shortening may cut, in the order the cut line applies to them (the rule treats them alike).
    static var order: [WritableKeyPath<LocalizedText, String?>] { [\.title, \.subtitle, \.body] }
    /// `…`, U+2026: 3 bytes in UTF-8 and in JSON (never escaped).
    static let ellipsis = "…"
    static let ellipsisBytes = 3

    /// Renders `text`, and if the measure exceeds `limit`, cuts every text longer than the largest cut
    /// line that fits (see the type's documentation; a `nil` or empty field is left alone), then renders
    /// once more.
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
            return searchByRendering(text, limit: limit, counting: counting, render: render)
        }
        return planned.fits ? .fitted(rendered.output, text: planned.text) : .tooLarge(size: rendered.size)
    }

    /// One non-empty text field and the cumulative cost of its characters.
    struct Field {
        var path: WritableKeyPath<LocalizedText, String?>
        var original: String
        /// `ends[k]` is the index after character `k`; `costs[k]` the bytes of characters `0...k`.
        var ends: [String.Index]
        var costs: [Int]
        var total: Int { costs.last ?? 0 }
    }

    /// Every non-empty field with its character costs: one walk, O(length of the texts).
    static func fields(of text: LocalizedText, counting: Counting) -> [Field] {
        order.compactMap { path in
            guard let original = text[keyPath: path], !original.isEmpty else { return nil }
            var field = Field(path: path, original: original, ends: [], costs: [])
            var sum = 0
            var index = original.startIndex
            while index < original.endIndex {
                let next = original.index(after: index)
                sum += counting.bytes(of: original[index..<next])
                field.ends.append(next)
                field.costs.append(sum)
                index = next
            }
            return field
        }
    }

    /// `text` with every field longer than `line` bytes cut to at most `line` (its longest prefix within
    /// `line - 3` bytes, then `…`), and the bytes of all fields after the cut. O(fields × log length).
    static func cut(_ text: LocalizedText, _ fields: [Field], line: Int) -> (text: LocalizedText, bytes: Int) {
        cut(text, fields, line: line, build: true)
    }

    /// The bytes of all fields after cutting at `line`, without building the texts: O(fields × log length).
    static func bytes(_ fields: [Field], line: Int) -> Int {
        cut(LocalizedText(), fields, line: line, build: false).bytes
    }

    private static func cut(_ text: LocalizedText, _ fields: [Field], line: Int, build: Bool) -> (text: LocalizedText, bytes: Int) {
        var text = text
        var bytes = 0
        for field in fields {
            guard field.total > line else {
                bytes += field.total
                continue
            }
            // Characters kept: the number of cumulative costs within the budget (costs only grow).
            let budget = line - ellipsisBytes
            var low = 0, high = field.costs.count
            while low < high {
                let middle = (low + high) / 2
                if field.costs[middle] <= budget { low = middle + 1 } else { high = middle }
            }
            if build {
                let end = low == 0 ? field.original.startIndex : field.ends[low - 1]
                text[keyPath: field.path] = String(field.original[..<end]) + ellipsis
            }
            bytes += (low == 0 ? 0 : field.costs[low - 1]) + ellipsisBytes
        }
        return (text, bytes)
    }

    /// The largest line in `3 ..< longest field` for which `fits` holds, or `nil`: a binary search, as the
    /// size after ``cut(_:_:line:)`` never shrinks as the line grows.
    static func largestLine(_ fields: [Field], fits: (Int) -> Bool) -> Int? {
        let longest = fields.map(\.total).max() ?? 0
        var low = ellipsisBytes, high = longest - 1
        guard low <= high, fits(low) else { return nil }
        while low < high {
            let middle = low + (high - low + 1) / 2
            if fits(middle) { low = middle } else { high = middle - 1 }
        }
        return low
    }

    /// The shortened text and its predicted size, from arithmetic alone: O(length of the texts).
    static func plan(_ text: LocalizedText, wholeSize: Int, limit: Int, counting: Counting)
        -> (text: LocalizedText, size: Int, fits: Bool)
    {
        let fields = fields(of: text, counting: counting)
        // Everything but the texts: keys, punctuation, the rest of the payload.
        let fixed = wholeSize - fields.reduce(0) { $0 + $1.total }
        if let line = largestLine(fields, fits: { fixed + bytes(fields, line: $0) <= limit }) {
            let result = cut(text, fields, line: line)
            return (result.text, fixed + result.bytes, true)
        }
        // Even the shortest cut (every text over 3 bytes as `…`) does not fit.
        let shortest = cut(text, fields, line: ellipsisBytes)
        return (shortest.text, fixed + shortest.bytes, false)
    }

    /// The same search, measuring a rendered payload at every step of the binary search over the line:
    /// O(log n) renders. Used only when a rendered size disagrees with ``Counting``.
    static func searchByRendering<Output>(_ text: LocalizedText, limit: Int, counting: Counting,
                                          render: (LocalizedText) -> (output: Output, size: Int)) -> Outcome<Output>
    {
        let current = render(text)
        if current.size <= limit { return .fitted(current.output, text: text) }
        let fields = fields(of: text, counting: counting)
        var best: (output: Output, text: LocalizedText)?
        let line = largestLine(fields) { line in
            let candidate = cut(text, fields, line: line).text
            let rendered = render(candidate)
            guard rendered.size <= limit else { return false }
            best = (rendered.output, candidate)
            return true
        }
        if let line {
            // The last fitting render is not always the chosen line's: render that one.
            let candidate = cut(text, fields, line: line).text
            if let best, best.text == candidate { return .fitted(best.output, text: candidate) }
            let rendered = render(candidate)
            return .fitted(rendered.output, text: candidate)
        }
        return .tooLarge(size: render(cut(text, fields, line: ellipsisBytes).text).size)
    }
}
