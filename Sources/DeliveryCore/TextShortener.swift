/// Fits a payload under a provider's size limit by shortening its visible texts (issue 3 item 6): the
/// `body` first, then `subtitle`, then `title`, each cut at a grapheme-cluster boundary (a Swift
/// `Character`, so a ZWJ emoji sequence or a letter with its combining accent is never split and no lone
/// surrogate can appear) and ended with `…` (U+2026, 3 UTF-8 bytes).
///
/// The payload is always serialized again and measured again; serialized JSON is never sliced, so escapes
/// (`\"`, `\\`, `\n`) are counted exactly as they go on the wire. Each field is cut by binary search over
/// its characters, keeping the longest prefix that fits.
public enum TextShortener {
    /// The result of ``fit(_:limit:render:)``.
    public enum Outcome<Output> {
        /// `output` fits; `text` is what it was rendered from (shortened or not).
        case fitted(Output, text: LocalizedText)
        /// Still larger than the limit with every text shortened to `…`; `size` is that last measure.
        case tooLarge(size: Int)
    }

    /// Renders `text`, and while the measure exceeds `limit`, shortens `body`, then `subtitle`, then
    /// `title` (a field that is `nil` or empty is skipped; a field that cannot help even as `…` stays `…`
    /// and the next one is cut).
    /// - Parameters:
    ///   - limit: the largest acceptable size, in the unit `render` measures (bytes for every provider).
    ///   - render: builds the payload for a candidate text and returns it with its size.
    public static func fit<Output>(_ text: LocalizedText, limit: Int,
                                   render: (LocalizedText) -> (output: Output, size: Int)) -> Outcome<Output>
    {
        var text = text
        var current = render(text)
        if current.size <= limit { return .fitted(current.output, text: text) }
        for field in [\LocalizedText.body, \LocalizedText.subtitle, \LocalizedText.title] {
            guard let original = text[keyPath: field], !original.isEmpty else { continue }
            let characters = Array(original)
            var low = 0                      // fewest characters still worth trying
            var high = characters.count - 1  // keeping everything did not fit
            var best: (output: Output, text: LocalizedText)?
            while low <= high {
                let keep = (low + high) / 2
                var candidate = text
                candidate[keyPath: field] = String(characters[..<keep]) + "…"
                let rendered = render(candidate)
                if rendered.size <= limit {
                    best = (rendered.output, candidate)
                    low = keep + 1
                } else {
                    high = keep - 1
                }
            }
            if let best { return .fitted(best.output, text: best.text) }
            text[keyPath: field] = "…"  // this field cannot help more; move to the next
            current = render(text)
        }
        return .tooLarge(size: current.size)
    }
}
