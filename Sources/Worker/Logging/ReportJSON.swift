import Foundation
import UUIDText

/// The JSON the commands print for scripts (`status --json`, and whatever else encodes a Swift value for a
/// terminal or a pipe): one encoder, so every report spells its values alike.
///
/// - Keys sorted, pretty-printed, `/` unescaped, instants as ISO 8601 UTC.
/// - UUIDs in PostgreSQL's form, lower case (`SELECT gen_random_uuid()`; RFC 9562 §4: the hex digits are
///   case-insensitive on input and lower case on output). Foundation encodes a `UUID` as its `uuidString`, upper
///   case, so a string value that is a whole UUID in canonical form is written in lower case: the same UUID.
/// - Inside strings, the characters ``TerminalText`` escapes are written as `\u` escapes: the document decodes to
///   the very same text, and printing it raw cannot drive a terminal. Outside strings only the layout's line
///   feeds and spaces stand.
public enum ReportJSON {
    /// `value` as a JSON document ending with a line feed.
    /// - Throws: `EncodingError` (a non-finite number).
    public static func encode(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return edited(String(decoding: try encoder.encode(value), as: UTF8.self)) + "\n"
    }

    /// The decoder matching ``encode(_:)``.
    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    /// `text`, JSON as Foundation wrote it, with its strings' unsafe characters escaped and whole-UUID strings in
    /// lower case.
    static func edited(_ text: String) -> String {
        var output = String.UnicodeScalarView()
        var string = String.UnicodeScalarView()
        var inString = false
        var escaped = false
        for scalar in text.unicodeScalars {
            guard inString else {
                output.append(scalar)
                inString = scalar == "\""
                continue
            }
            if escaped {
                escaped = false
            } else if scalar == "\\" {
                escaped = true
            } else if scalar == "\"" {
                inString = false
                output.append(contentsOf: lowerCasedIfUUID(string))
                output.append(scalar)
                string = String.UnicodeScalarView()
                continue
            }
            if TerminalText.isUnsafe(scalar) {
                string.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                string.append(scalar)
            }
        }
        return String(output)
    }

    private static func lowerCasedIfUUID(_ string: String.UnicodeScalarView) -> String.UnicodeScalarView {
        guard string.count == CanonicalUUIDText.length, let uuid = UUID(uuidString: String(string)) else { return string }
        return CanonicalUUIDText.format(uuid).unicodeScalars
    }
}
