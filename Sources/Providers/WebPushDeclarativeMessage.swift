import DeliveryCore
import Foundation

/// When a web subscription gets the Declarative Web Push form (the `webpush` channel's `declarative` setting,
/// docs/web-push.md "Declarative Web Push").
///
/// WebKit, "Meet Declarative Web Push": Safari shows a declarative message itself, with or without a service
/// worker, and it is "backwards compatible with existing Web Push notifications" (a browser that does not parse it
/// hands it to the service worker as an ordinary push). Every Safari subscription's endpoint is on Apple's push
/// service, which is all the worker can know of the browser, so the default sends the form there only; other
/// browsers' service workers keep the flat message they read today.
public enum WebPushDeclarativePolicy: String, Sendable, Hashable, CaseIterable {
    /// `"apple"` (the default): the declarative form to endpoints on Apple's push service (`*.push.apple.com`,
    /// ``WebPushService/apple``); a message that cannot make one (no `headings`, no absolute `http(s)` `url`) goes
    /// in the flat form, as to every other push service.
    case applePushService = "apple"
    /// `"always"`: the declarative form to every push service; a message that cannot make one fails its delivery
    /// with `invalid_message`.
    case always
    /// `"never"`: the flat form everywhere.
    case never

    /// The channel settings' member: `"declarative": "apple" | "always" | "never"`.
    public static let settingsKey = "declarative"

    /// The policy of a `webpush` channel's settings object: its ``settingsKey`` member, ``applePushService`` when
    /// absent.
    /// - Throws: a message naming the member and the values it takes, when the member is there but not one of them.
    public init(settings: [String: JSONValue]) throws(WebPushDeclarativePolicyError) {
        guard let value = settings[Self.settingsKey] else {
            self = .applePushService
            return
        }
        guard case .string(let text) = value, let policy = WebPushDeclarativePolicy(rawValue: text) else {
            throw WebPushDeclarativePolicyError()
        }
        self = policy
    }

    /// Whether a delivery to `endpoint` asks for the declarative form (the message may still not make one).
    public func requestsDeclarativeForm(endpoint: String) -> Bool {
        switch self {
        case .always: true
        case .never: false
        case .applePushService:
            (try? WebPushEndpoint(parsing: endpoint)).map { WebPushService(host: $0.host) == .apple } ?? false
        }
    }
}

/// A `declarative` channel setting that is not one of the policy's values.
public struct WebPushDeclarativePolicyError: Error, CustomStringConvertible, Sendable {
    public var description: String { "declarative must be \"apple\", \"always\" or \"never\"" }
}

/// The Declarative Web Push message (WebKit, "Meet Declarative Web Push"; W3C Push API, "declarative push
/// message"), built without I/O:
///
/// `{"notification": {"app_badge"?: <integer>, "body"?, "data": <the flat message>, "dir"?: "rtl", "lang"?,
/// "mutable": true, "navigate": <url>, "silent"?, "title"}, "web_push": 8030}` (compact, sorted keys).
///
/// - `web_push` is the integer 8030, which tells a declarative message from any other JSON.
/// - `title` (required, non-empty) from `headings` and `body` from `contents`, in the subscriber's language;
///   `lang` is the BCP 47 tag (``LanguageSelector/canonical(_:)``) of the language the body (else the title) was
///   taken from after fallback, left out for a text without a language (`und`); `dir` is `rtl` when that
///   language is written right to left (Foundation's `Locale.Language.characterDirection`, from CLDR), left out
///   otherwise (the Notifications API's default, `auto`).
/// - `navigate` (required): the message's `url`, an absolute `http`/`https` URL (WebKit parses it without a base
///   URL, so a relative or app-scheme URL would make the message not declarative).
/// - `silent` from `web_silent`; `app_badge` from `ios_badge_type: "SetTo"` with `ios_badge_count` (the badge's
///   value; an `Increase` has no absolute value and is left out).
/// - `mutable: true`, so a service worker, when the site has one, gets the message first and may read `data` or
///   change what is shown; without one, or when it shows nothing, the browser shows the message as sent.
/// - `data`: the flat message (``WebPushRequestFactory/plaintext(for:)``'s members but `title` and `body`:
///   `msgId`, `campaignId`, `url`, `image`, `actions`, `data`), which a service worker reads as
///   `notification.data` (or `event.data.json().notification.data` in a browser that does not parse the form).
///
/// Where WebKit's parser (`NotificationJSONParser`) and the W3C draft differ, WebKit's is followed, since Safari
/// is the browser that shows the message: `app_badge` and `mutable` sit inside `notification`.
public enum WebPushDeclarativeMessage {
    /// `web_push`'s value: the number of the Web Push protocol's RFC.
    public static let magicValue = 8030

    /// Why `message` cannot make a declarative message, or `nil` when it can: no `headings` text, or a `url` that
    /// is missing or not an absolute `http`/`https` URL.
    public static func unsuitability(of message: NotificationMessage) -> String? {
        guard message.headings.values.contains(where: { !$0.isEmpty }) else {
            return "a Declarative Web Push message needs a title (`headings`)"
        }
        guard let url = message.url else {
            return "a Declarative Web Push message needs `url`, the page its notification opens (`navigate`)"
        }
        guard isNavigable(url) else {
            return "`url` must be an absolute http or https URL for a Declarative Web Push message's `navigate`"
        }
        return nil
    }

    /// An absolute `http`/`https` URL with a host: what WebKit's parser accepts as `navigate` (a valid URL
    /// without a base) and a browser can open.
    public static func isNavigable(_ url: String) -> Bool {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
              scheme == "https" || scheme == "http", let host = components.host, !host.isEmpty
        else { return false }
        return true
    }

    /// The message's members for the rendered texts, with `flat` (the flat message's members but the texts) as
    /// `notification.data`.
    /// - Parameters:
    ///   - title: the rendered `headings` (required by the form; ``unsuitability(of:)`` checked it exists).
    ///   - language: the key of the language the body (else the title) came from.
    static func members(
        message: NotificationMessage, title: String, body: String?, language: String?, flat: [String: JSONValue]
    ) -> JSONValue {
        var notification: [String: JSONValue] = [
            "title": .string(title),
            "navigate": .string(message.url ?? ""),
            "mutable": .bool(true),
            "data": .object(flat),
        ]
        if let body { notification["body"] = .string(body) }
        if let language, let tag = LanguageSelector.canonical(language) {
            notification["lang"] = .string(tag)
            if Locale.Language(identifier: tag).characterDirection == .rightToLeft { notification["dir"] = .string("rtl") }
        }
        if let silent = message.webSilent { notification["silent"] = .bool(silent) }
        if message.iosBadgeType == .setTo, let count = message.iosBadgeCount, count >= 0 {
            notification["app_badge"] = .int(Int64(count))
        }
        return .object(["web_push": .int(Int64(magicValue)), "notification": .object(notification)])
    }
}
