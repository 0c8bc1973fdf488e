import DeliveryCore
import Foundation

/// The emulator's check of a Declarative Web Push message (WebKit, "Meet Declarative Web Push"; W3C Push API,
/// "declarative push message"): what Safari's parser demands before it shows the notification itself, so a test
/// learns of a malformed form from the push service's answer rather than from a browser that would fall back to
/// the service worker without a word. A real push service never reads the (encrypted) body; this is the
/// emulator's rule, like its demand for JSON.
///
/// A plaintext whose top-level object has no `web_push` member is not declarative and passes. One with it must
/// have:
/// - `web_push`: the integer 8030;
/// - `notification`: an object with `title` (a non-empty string) and `navigate` (a string holding an absolute
///   URL);
/// - when present: `dir` one of `auto`, `ltr`, `rtl`; `lang`, `body`, `tag` strings; `icon` a string holding an
///   absolute URL; `silent` and `mutable` booleans; `app_badge` a non-negative integer or a string of ASCII
///   digits that fits 64 bits (WebKit reads both); `data` any JSON value.
public enum DeclarativeWebPushCheck {
    /// `nil` when `plaintext` is acceptable (declarative and valid, or not declarative), else why not.
    public static func problem(in plaintext: [UInt8]) -> String? {
        guard let parsed = try? JSONValue(parsing: plaintext), let message = parsed.objectValue,
              let magic = message["web_push"]
        else { return nil }
        guard magic.int64Value == 8030 else { return "web_push must be the integer 8030" }
        guard let notification = message["notification"]?.objectValue else {
            return "a declarative message needs a notification object"
        }
        guard case .string(let title)? = notification["title"], !title.isEmpty else {
            return "notification.title must be a non-empty string"
        }
        guard case .string(let navigate)? = notification["navigate"], isAbsoluteURL(navigate) else {
            return "notification.navigate must be a string holding an absolute URL"
        }
        if let dir = notification["dir"], !["auto", "ltr", "rtl"].contains(dir.stringValue ?? "") {
            return "notification.dir must be auto, ltr or rtl"
        }
        for name in ["lang", "body", "tag"] where notification[name] != nil && notification[name]?.stringValue == nil {
            return "notification.\(name) must be a string"
        }
        if let icon = notification["icon"], !isAbsoluteURL(icon.stringValue ?? "") {
            return "notification.icon must be a string holding an absolute URL"
        }
        for name in ["silent", "mutable"] where notification[name] != nil && notification[name]?.boolValue == nil {
            return "notification.\(name) must be a boolean"
        }
        if let badge = notification["app_badge"], !isAppBadge(badge) {
            return "notification.app_badge must be a non-negative integer or a string of digits within 64 bits"
        }
        return nil
    }

    static func isAbsoluteURL(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme else { return false }
        return !scheme.isEmpty
    }

    static func isAppBadge(_ value: JSONValue) -> Bool {
        switch value {
        case .int(let number): return number >= 0
        case .number(let text): return UInt64(text) != nil
        case .string(let text): return !text.isEmpty && text.utf8.allSatisfy { (0x30...0x39).contains($0) } && UInt64(text) != nil
        default: return false
        }
    }
}
