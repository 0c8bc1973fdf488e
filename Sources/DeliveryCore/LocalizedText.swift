/// The visible texts of one notification for one subscriber: `title` from `headings`, `subtitle`, and
/// `body` from `contents`, each picked by ``LanguageSelector`` and filled by ``Placeholders``
/// (docs/localization.md, docs/wire-formats.md). Every wire format (APNs `aps.alert`, FCM `on.title`/`on.body`, the Web Push
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

    /// Whether any text of `message` (`headings`, `subtitle`, `contents`, in any language) has a `{`, so
    /// may hold a placeholder. When `false`, ``render(_:subscriberLanguage:appDefaultLanguage:placeholderValues:)``
    /// gives every subscriber with the same two languages the same texts whatever the placeholder values
    /// (``Placeholders/fill(_:values:maximumBytes:)`` returns a text without `{` as it is), so a payload
    /// rendered once serves them all.
    public static func usesPlaceholders(_ message: NotificationMessage) -> Bool {
        // Asked twice for every delivery: the bytes are read in place (native strings are contiguous UTF-8),
        // not through the view's iterator.
        func hasBrace(_ text: String) -> Bool {
            text.utf8.withContiguousStorageIfAvailable { $0.contains(UInt8(ascii: "{")) } ?? text.utf8.contains(UInt8(ascii: "{"))
        }
        return message.headings.values.contains(where: hasBrace) || message.subtitle.values.contains(where: hasBrace)
            || message.contents.values.contains(where: hasBrace)
    }

    /// Picks and fills the three texts of `message` for a subscriber, so that what the message validation
    /// demands of text holds after rendering too. Each text is at most ``Placeholders/maximumOutputBytes``
    /// (4096) bytes of UTF-8: longer results (a long template, or placeholders filled from long tags) are
    /// cut there, as no provider could send them whole anyway.
    ///
    /// Fallback: for each field, the languages are tried in ``LanguageSelector``'s order (the language it
    /// picks, then what it picks once that one is set aside, and so on). The first whose text renders to
    /// something other than empty or whitespace is used; so `{"en": "{{ first_name }}", "de": "Hallo"}`
    /// gives `Hallo` to a subscriber without a `first_name` tag. A field without text in any language stays
    /// `nil`.
    /// - Parameters:
    ///   - subscriberLanguage: `subscriptions.language` (a BCP 47 tag such as `pt-BR`), if known.
    ///   - appDefaultLanguage: `apps.default_language`, if set.
    ///   - placeholderValues: user tags and subscription fields; `nil` renders every placeholder as missing
    ///     (its default, or empty text).
    /// - Throws: ``MessageError`` `invalidValue` naming the field: `headings`, `subtitle` or `contents`
    ///   when it has text but every language renders empty for this subscriber, or e.g. `contents.en` when
    ///   the first language reached is not a valid template (``TemplateError``: an unknown filter, an
    ///   unterminated `{{`, a `{%` tag). The worker fails the delivery with reason `invalid_message`.
    public static func render(_ message: NotificationMessage, subscriberLanguage: String?, appDefaultLanguage: String?,
                              placeholderValues: PlaceholderValues?) throws(MessageError) -> LocalizedText
    {
        try renderWithLanguages(message, subscriberLanguage: subscriberLanguage, appDefaultLanguage: appDefaultLanguage,
                                placeholderValues: placeholderValues).text
    }

    /// ``render(_:subscriberLanguage:appDefaultLanguage:placeholderValues:)`` with the key of the language each
    /// text came from, as written in the message's map (`pt_BR`, `und` for a plain string): `titleLanguage` from
    /// `headings`, `bodyLanguage` from `contents`, `nil` for a field without text. A format that declares its
    /// language (Declarative Web Push's `lang`) names the one the subscriber reads, after fallback.
    /// - Throws: as ``render(_:subscriberLanguage:appDefaultLanguage:placeholderValues:)``.
    public static func renderWithLanguages(
        _ message: NotificationMessage, subscriberLanguage: String?, appDefaultLanguage: String?,
        placeholderValues: PlaceholderValues?
    ) throws(MessageError) -> (text: LocalizedText, titleLanguage: String?, bodyLanguage: String?) {
        let values = placeholderValues ?? PlaceholderValues()
        func render(_ texts: [String: String], field: String) throws(MessageError) -> (text: String, language: String)? {
            var remaining = texts
            var tried: [String] = []
            while let picked = LanguageSelector.pick(from: remaining, subscriberLanguage: subscriberLanguage,
                                                     appDefaultLanguage: appDefaultLanguage)
            {
                let filled: String
                do {
                    filled = try Placeholders.fill(picked.text, values: values)
                } catch {
                    let name = picked.language == "und" ? field : "\(field).\(picked.language)"
                    throw MessageError(code: .invalidValue, field: name,
                                       message: "is not a valid template: \(error.message); see the placeholder language in docs/wire-formats.md")
                }
                if !filled.allSatisfy(\.isWhitespace) { return (filled, picked.language) }
                tried.append(picked.language)
                // The selector names the key as written in the map; if it ever did not, stop rather than
                // pick the same entry again.
                guard remaining.removeValue(forKey: picked.language) != nil else { break }
            }
            guard !tried.isEmpty else { return nil }
            let shown = tried.prefix(5).joined(separator: ", ") + (tried.count > 5 ? ", …" : "")
            throw MessageError(code: .invalidValue, field: field,
                               message: "renders empty for this subscriber in every language (\(shown)): placeholders without a value and without `default`")
        }
        let title = try render(message.headings, field: "headings")
        let subtitle = try render(message.subtitle, field: "subtitle")
        let body = try render(message.contents, field: "contents")
        return (LocalizedText(title: title?.text, subtitle: subtitle?.text, body: body?.text), title?.language, body?.language)
    }
}
