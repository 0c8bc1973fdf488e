/// Checks for text that becomes an HTTP/2 header value (RFC 9113 §8.2.1, RFC 9110 §5.5).
///
/// A value with CR, LF or NUL is rejected by nghttp2 before it leaves the process, so a message or
/// channel setting carrying one would fail as a transport error on every retry; values are therefore
/// checked where they enter (the message, the channel settings) and again where headers are built.
public enum HTTPFieldValue {
    /// `true` when `value` can be sent as a header value unchanged: no control character (Unicode
    /// general category Cc: U+0000...U+001F, U+007F...U+009F; this includes CR, LF, NUL and HTAB inside the
    /// value) and no leading or trailing space or tab (RFC 9113 §8.2.1). Non-ASCII text is allowed (it goes
    /// out as UTF-8 bytes, RFC 9110 §5.5 `obs-text`). The empty string is valid.
    public static func isValid(_ value: String) -> Bool {
        guard !value.unicodeScalars.contains(where: isControl) else { return false }
        if let first = value.unicodeScalars.first, first == " " { return false }
        if let last = value.unicodeScalars.last, last == " " { return false }
        return true
    }

    /// `true` when `value` is non-empty and every character is visible ASCII (`0x21...0x7E`: no space,
    /// no control character, no non-ASCII): the shape of identifiers such as an APNs topic (bundle ID),
    /// Team ID, Key ID, or a JWT.
    public static func isVisibleASCII(_ value: String) -> Bool {
        !value.isEmpty && value.everyUTF8Byte { $0 &- 0x21 < 0x5E }
    }

    /// `true` for a Unicode control character (general category Cc: U+0000...U+001F, U+007F...U+009F).
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}
