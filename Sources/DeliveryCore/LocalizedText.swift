/// The visible texts of one notification for one subscriber: `title` from `headings`, `subtitle`, and
/// `body` from `contents`, each picked by ``LanguageSelector`` and filled by ``Placeholders``
/// (issue 3 items 2 and 3). Every wire format (APNs `aps.alert`, FCM `on.title`/`on.body`, the Web Push
/// body) starts from this, so a subscriber reads the same words on every platform.
public struct LocalizedText: Sendable, Hashable {
    /// From `headings`; `nil` when the message has no heading text in any language.
    public var title: String?
    /// From `subtitle`; `nil` when absent.
    public var subtitle: String?
    /// From `contents`; `nil` when absent (only possible for a silent push or a message built by hand).
    public var body: String?

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
    }

    /// Picks and fills the three texts of `message` for a subscriber. Each text is at most
    /// ``Placeholders/maximumOutputBytes`` (4096) bytes of UTF-8: longer results (a long template, or
    /// placeholders filled from long tags) are cut there, as no provider could send them whole anyway.
    /// - Parameters:
    ///   - subscriberLanguage: `subscriptions.language` (a BCP 47 tag such as `pt-BR`), if known.
    ///   - appDefaultLanguage: `apps.default_language`, if set.
    ///   - placeholderValues: user tags and subscription fields; `nil` renders every placeholder as missing
    ///     (its default, or empty text).
    public static func render(_ message: NotificationMessage, subscriberLanguage: String?, appDefaultLanguage: String?,
                              placeholderValues: PlaceholderValues?) -> LocalizedText
    {
        let values = placeholderValues ?? PlaceholderValues()
        func render(_ texts: [String: String]) -> String? {
            guard let picked = LanguageSelector.pick(from: texts, subscriberLanguage: subscriberLanguage,
                                                     appDefaultLanguage: appDefaultLanguage)
            else { return nil }
            return Placeholders.fill(picked.text, values: values)
        }
        return LocalizedText(title: render(message.headings), subtitle: render(message.subtitle), body: render(message.contents))
    }
}
