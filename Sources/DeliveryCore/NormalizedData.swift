/// The app's `data` object as the normalized message's `Record<string, string>` (docs/wire-formats.md): what FCM
/// requires (every data value a string, Firebase: "About FCM messages") and what the Web Push body carries,
/// so an SDK hands app code the same strings on Android and on the web.
public enum NormalizedData {
    /// The string form of one `data` value:
    /// - a string: itself, unchanged;
    /// - a boolean: `true` / `false`;
    /// - a number: its JSON text exactly as written (`1`, `0.5`, `-3`, `12345678901234567890`, `1.10`;
    ///   never rounded through `Double`, RFC 8259 §6);
    /// - an object or array: its compact JSON text with sorted keys, non-ASCII as UTF-8, `/` unescaped
    ///   (`{"a":[1]}`);
    /// - `null`: `nil`: the key is left out, since a `Record<string, string>` has no null and the text
    ///   `"null"` would be indistinguishable from the string `"null"`.
    public static func text(of value: JSONValue) -> String? {
        switch value {
        case .null: nil
        case .string(let text): text
        case .bool(let flag): flag ? "true" : "false"
        case .int, .double, .number, .array, .object: value.jsonText
        }
    }

    /// Every member of `data` with its ``text(of:)``; `null` members are left out.
    public static func strings(_ data: [String: JSONValue]) -> [String: String] {
        data.compactMapValues(text(of:))
    }
}
