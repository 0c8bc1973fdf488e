import Testing
@testable import Worker

@Suite("TerminalText: what check prints")
struct TerminalTextTests {
    /// Every C0 and C1 control, DEL and each bidi / zero-width / separator control is shown as an escape.
    @Test func escapesEveryControl() {
        var unsafe: [Unicode.Scalar] = (0x00...0x1F).compactMap(Unicode.Scalar.init).filter { $0 != "\t" }
        unsafe += (0x7F...0x9F).compactMap(Unicode.Scalar.init)
        unsafe += [0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2060,
                   0x2066, 0x2067, 0x2068, 0x2069, 0xFEFF, 0x2028, 0x2029, 0xFFF9, 0xFFFA, 0xFFFB].compactMap(Unicode.Scalar.init)
        for scalar in unsafe {
            let text = "a" + String(Character(scalar)) + "b"
            let sanitized = TerminalText.sanitized(text)
            #expect(sanitized == "a\\u{\(String(scalar.value, radix: 16, uppercase: true))}b")
            #expect(!sanitized.unicodeScalars.contains(scalar))
        }
        #expect(TerminalText.sanitized("tab\there, Ayşe 🚚 ok") == "tab\there, Ayşe 🚚 ok")
        #expect(TerminalText.sanitized("\u{1b}[2J\u{1b}]52;c;eA==\u{07}") == "\\u{1B}[2J\\u{1B}]52;c;eA==\\u{7}")
    }

    @Test(arguments: [
        ("https://user:pass@host/x", "https://***@host/x"),
        ("endpoint=http://u@h:80 and postgresql://a:b@c@d/db?x=1", "endpoint=http://***@h:80 and postgresql://***@d/db?x=1"),
        ("https://u:p\u{1b}[31m@h", "https://***@h"),
        ("https://host/path@x", "https://host/path@x"),
        ("mailto:ops@example.com", "mailto:ops@example.com"),
        ("no scheme ://user@host", "no scheme ://user@host"),
        ("\"https://u:p@h\"", "\"https://***@h\""),
    ])
    func masksURLUserInfo(_ text: String, _ expected: String) {
        #expect(TerminalText.sanitized(text) == expected)
    }
}
