/// Text made safe to place in an HTML document's text or a quoted attribute value (HTML Living Standard,
/// "Serializing HTML fragments", escaping a string): `&`, `<`, `>`, `"` and `'` become character references, so
/// text from the database (app names, pause reasons, worker ids: producers' and providers' data, untrusted) can
/// never open a tag, end an attribute or start a script. No I/O.
public enum HTMLText {
    /// `text` with `&`, `<`, `>`, `"` and `'` replaced by `&amp;`, `&lt;`, `&gt;`, `&quot;` and `&#39;`.
    public static func escaped(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.unicodeScalars.append(character)
            }
        }
        return result
    }
}
