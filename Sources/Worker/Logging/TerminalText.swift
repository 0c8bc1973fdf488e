/// Text from database rows or settings made safe to print on an operator's terminal (`pushizo-worker check`).
///
/// Whoever writes a row (`app_channels.endpoint`, a channel's settings, an app id's neighbours) must not be able
/// to drive the operator's terminal or hide text from them, nor get a credential printed:
/// - control characters are shown as `\u{1B}`-style escapes: C0 (U+0000...U+001F, so ESC sequences, CR and line
///   feeds that would forge lines), DEL and C1 (U+007F...U+009F, which include the 8-bit CSI U+009B);
/// - so are the Unicode bidirectional controls (U+061C, U+200E, U+200F, U+202A...U+202E, U+2066...U+2069: the
///   "Trojan Source" reorderings), zero-width characters (U+200B...U+200D, U+2060, U+FEFF), the line and paragraph
///   separators (U+2028, U+2029) and interlinear annotation controls (U+FFF9...U+FFFB);
/// - URL user info (`https://user:password@host`) becomes `https://***@host` (RFC 3986 §3.2.1 deprecates a
///   password there; wherever it appears it is a credential).
public enum TerminalText {
    /// `text` with every character above escaped and every URL's user info masked. A tab is kept.
    public static func sanitized(_ text: String) -> String {
        var output = ""
        output.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in maskingUserInfo(text).unicodeScalars {
            if isUnsafe(scalar) {
                output += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                output.unicodeScalars.append(scalar)
            }
        }
        return output
    }

    static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x09: false
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x061C, 0x200B...0x200F, 0x202A...0x202E, 0x2060, 0x2066...0x2069, 0xFEFF, 0x2028, 0x2029, 0xFFF9...0xFFFB: true
        default: false
        }
    }

    /// Replaces what lies between `scheme://` and the last `@` before the next `/`, whitespace or the end with `***`.
    static func maskingUserInfo(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        var result = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            // At "://" preceded by a scheme (RFC 3986 §3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )).
            if scalars[index] == ":", index + 2 < scalars.count, scalars[index + 1] == "/", scalars[index + 2] == "/",
                index > 0, isSchemeCharacter(scalars[index - 1])
            {
                var end = index + 3
                var lastAt: Int?
                // Over-masking is harmless, under-masking leaks: only "/" and whitespace end the authority here.
                while end < scalars.count, scalars[end] != "/", !scalars[end].properties.isWhitespace {
                    if scalars[end] == "@" { lastAt = end }
                    end += 1
                }
                result.append(contentsOf: scalars[index..<(index + 3)])
                if let lastAt {
                    result.append(contentsOf: "***".unicodeScalars)
                    index = lastAt
                } else {
                    index += 3
                }
                continue
            }
            result.append(scalars[index])
            index += 1
        }
        return String(result)
    }

    private static func isSchemeCharacter(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "+" || scalar == "-" || scalar == ".")
    }
}
