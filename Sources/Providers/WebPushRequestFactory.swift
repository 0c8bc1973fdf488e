import DeliveryCore
import Foundation
import PushCrypto

/// Builds Web Push requests (RFC 8030) without any I/O. This is the plaintext stage: the sender encrypts
/// the body with `aes128gcm` (RFC 8291 / RFC 8188), adds `content-encoding: aes128gcm` and
/// `authorization: vapid t=..., k=...` (RFC 8292 §3); none of those are here. (`content-type` describes
/// the plaintext; the sender may keep or replace it.)
public enum WebPushRequestFactory {
    /// What a push service must accept: 4096 bytes of (encrypted) payload (RFC 8030 §7.2, RFC 8291 §4).
    public static let maximumEncryptedSize = 4096
    /// `aes128gcm` overhead for one record: the RFC 8188 §2.1 header (16-byte salt, 4-byte record size,
    /// 1-byte key id length) = 21 bytes, the key id (the sender's 65-byte uncompressed P-256 public key,
    /// RFC 8291 §4), the 16-byte AEAD tag, and the 1-byte padding delimiter (RFC 8188 §2).
    public static let encryptionOverhead = 21 + 65 + 16 + 1
    /// The largest plaintext body, in bytes: 4096 - 103 = 3993.
    public static let maximumPlaintextSize = maximumEncryptedSize - encryptionOverhead
    /// `ttl` when neither the message nor the delivery sets one: 2,419,200 s (28 days,
    /// ``NotificationMessage/maximumTTL``). RFC 8030 §5.2 makes the header mandatory; a push service may
    /// shorten it.
    public static let defaultTTL = NotificationMessage.maximumTTL
    /// RFC 8030 §5.4: a topic is at most 32 characters of the URL-safe base64 alphabet.
    public static let maximumTopicLength = 32

    /// Builds `POST <endpoint path+query>` with headers, in this order: `ttl` (always; whole seconds, the
    /// earlier of `ttl` and `expiration`, 0...2,419,200, ``defaultTTL`` when neither is set; RFC 8030 §5.2),
    /// `urgency` (RFC 8030 §5.3: `high` for `priority: high`, else `normal`; the contract has no
    /// `very-low` / `low`), `topic` (from `collapse_id` through ``topic(for:)``; RFC 8030 §5.4), the push
    /// service's own headers (``WebPushService/extraHeaders(ttl:)``, e.g. WNS's `x-wns-cache-policy`),
    /// `content-type: application/json`.
    ///
    /// Body: see ``plaintext(for:)``.
    /// - Throws: `WebPushRequestError` `invalid_endpoint` (see ``WebPushEndpoint/init(parsing:)``),
    ///   `silent_push_unsupported` (a skip, see ``plaintext(for:)``), `invalid_message` (a text renders empty
    ///   in every language or is not a valid template), or `payload_too_large`.
    public static func makePlaintextRequest(_ delivery: WebPushDelivery) throws(WebPushRequestError) -> PushRequest {
        try makePlaintextRequest(delivery) { () throws(WebPushRequestError) in try plaintext(for: delivery) }
    }

    /// ``makePlaintextRequest(_:)`` with the body from `plaintext` (e.g. a ``PayloadTemplate`` rendered once
    /// for the notification and language, filled with this device's msgId), called after the endpoint is
    /// parsed so the errors come in the same order.
    /// - Throws: as ``makePlaintextRequest(_:)``, and whatever `plaintext` throws.
    public static func makePlaintextRequest(
        _ delivery: WebPushDelivery, plaintext: () throws(WebPushRequestError) -> [UInt8]
    ) throws(WebPushRequestError) -> PushRequest {
        let endpoint = try WebPushEndpoint(parsing: delivery.endpoint)
        let message = delivery.message
        let ttl = NormalizedFields.timeToLive(ttl: message.ttl, expiration: delivery.expiration, now: delivery.now) ?? defaultTTL
        var headers = [
            PushHeader("ttl", String(ttl)),
            PushHeader("urgency", message.priority == .high ? "high" : "normal"),
        ]
        if let collapse = message.collapseID, let topic = topic(for: collapse) {
            headers.append(PushHeader("topic", topic))
        }
        headers += WebPushService(host: endpoint.host).extraHeaders(ttl: ttl)
        headers.append(PushHeader("content-type", "application/json"))
        return PushRequest(method: "POST", path: endpoint.path, headers: headers, body: try plaintext())
    }

    /// ``plaintext(for:)`` rendered once for every device that shares the delivery's message, languages,
    /// campaign and placeholder values (``PayloadTemplate``): `nil` when the msgId cannot be spliced in.
    /// - Throws: as ``plaintext(for:)``.
    public static func plaintextTemplate(for delivery: WebPushDelivery) throws(WebPushRequestError) -> PayloadTemplate? {
        try PayloadTemplate.make { (msgID: String) throws(WebPushRequestError) -> [UInt8] in
            var stand = delivery
            stand.msgID = msgID
            return try plaintext(for: stand)
        }
    }

    /// The plaintext body alone (what `makePlaintextRequest` sends before encryption), for previews, tests
    /// and the encrypting sender: the normalized message as compact JSON (sorted keys, non-ASCII as UTF-8,
    /// `/` unescaped): `{"actions"?: [{"id","title","url"?}], "body"?, "campaignId"?, "data"?: {string:
    /// string}, "image"?, "msgId", "title"?, "url"?}`. `title` and `body` are in the subscriber's language
    /// with placeholders filled; `data` values are ``NormalizedData/text(of:)``, the same strings FCM
    /// carries. There is no subtitle or sound (the Notification API has neither), so the subtitle is neither
    /// rendered nor checked.
    ///
    /// A silent push (`content_available: true`) is never built: browsers only allow pushes that show a
    /// notification (Push API `userVisibleOnly`), and Apple: "Safari doesn't support invisible push
    /// notifications. [...] If you don't, Safari revokes the push notification permission for your site."
    /// ("Sending web push notifications in web apps and browsers"). It throws a skip,
    /// ``silentPushUnsupported``, so the subscription is kept alive.
    ///
    /// The Declarative Web Push form (``WebPushDeclarativeMessage``) replaces it when ``declarativeForm(of:)``
    /// says so (the delivery's ``WebPushDeclarativePolicy`` and whether the message can make one): the same
    /// rendered texts as `notification.title` / `.body`, the flat members as `notification.data`.
    ///
    /// Size: when the body exceeds ``maximumPlaintextSize`` (3993) bytes, the longer of `title` and `body`
    /// is shortened first, at grapheme-cluster boundaries with `…` (``TextShortener``: computed from byte
    /// counts with JSON escapes, then serialized once more).
    /// - Throws: `WebPushRequestError` `silent_push_unsupported` (skip), `invalid_message` (a text renders
    ///   empty in every language or is not a valid template, or the channel demands the declarative form and
    ///   the message cannot make one) or `payload_too_large` (still over 3993 bytes with every text shortened).
    public static func plaintext(for delivery: WebPushDelivery) throws(WebPushRequestError) -> [UInt8] {
        let message = delivery.message
        guard !message.isSilent else { throw silentPushUnsupported }
        var fixed: [String: JSONValue] = ["msgId": .string(delivery.msgID)]
        if let campaign = delivery.campaignID { fixed["campaignId"] = .string(campaign) }
        if let url = message.url { fixed["url"] = .string(url) }
        if let image = message.image { fixed["image"] = .string(image) }
        if !message.buttons.isEmpty { fixed["actions"] = NormalizedFields.actions(message.buttons) }
        if let data = message.data { fixed["data"] = .object(NormalizedData.strings(data).mapValues { .string($0) }) }
        // The Notification API has no subtitle: it is neither rendered nor checked.
        var shown = message
        shown.subtitle = [:]
        let rendered: (text: LocalizedText, titleLanguage: String?, bodyLanguage: String?)
        do {
            rendered = try LocalizedText.renderWithLanguages(
                shown, subscriberLanguage: delivery.subscriberLanguage, appDefaultLanguage: delivery.appDefaultLanguage,
                placeholderValues: delivery.placeholderValues)
        } catch {
            throw WebPushRequestError(reason: .invalidMessage, detail: error.description)
        }
        let declarative = try declarativeForm(of: delivery)
        let outcome = TextShortener.fit(rendered.text, limit: maximumPlaintextSize, counting: .jsonString) { text in
            let members: JSONValue
            if declarative, let title = text.title {
                members = WebPushDeclarativeMessage.members(
                    message: message, title: title, body: text.body,
                    language: rendered.bodyLanguage ?? rendered.titleLanguage, flat: fixed)
            } else {
                var flat = fixed
                if let title = text.title { flat["title"] = .string(title) }
                if let body = text.body { flat["body"] = .string(body) }
                members = .object(flat)
            }
            let bytes = members.serialized()
            return (bytes, bytes.count)
        }
        switch outcome {
        case .fitted(let body, _): return body
        case .tooLarge(let size):
            throw WebPushRequestError(reason: .payloadTooLarge,
                                      detail: "the Web Push plaintext is \(size) bytes with every text shortened; the limit is \(maximumPlaintextSize) (4096 after aes128gcm)")
        }
    }

    /// Whether `delivery`'s body takes the Declarative Web Push form (``WebPushDeclarativeMessage``): its policy
    /// asks for it at this endpoint and the message can make one. A message that cannot goes in the flat form
    /// under ``WebPushDeclarativePolicy/applePushService``.
    /// - Throws: `invalid_message` naming what is missing when the policy is ``WebPushDeclarativePolicy/always``
    ///   and the message cannot make one.
    public static func declarativeForm(of delivery: WebPushDelivery) throws(WebPushRequestError) -> Bool {
        guard delivery.declarative.requestsDeclarativeForm(endpoint: delivery.endpoint) else { return false }
        guard let unsuitable = WebPushDeclarativeMessage.unsuitability(of: delivery.message) else { return true }
        if delivery.declarative == .always { throw WebPushRequestError(reason: .invalidMessage, detail: unsuitable) }
        return false
    }

    /// The skip for a silent push to a web subscription: `skipped` / `silent_push_unsupported`.
    public static let silentPushUnsupported = WebPushRequestError(
        reason: .silentPushUnsupported,
        detail: "a silent push (content_available) cannot go to a browser: Web Push requires a visible notification",
        skips: true)

    /// The `topic` header for a `collapse_id`: the id itself when it already is a valid topic (``isValidTopic(_:)``,
    /// e.g. `order-1`); otherwise the first 32 characters of base64url(SHA-256(UTF-8 of the id)) (the first
    /// 24 bytes of the digest, so exactly 32 characters that decode), which is deterministic (retries and
    /// later pushes with the same `collapse_id` replace each other) and 192 bits wide. `promo` (5
    /// characters) is derived, not sent. `nil` for an empty id.
    public static func topic(for collapseID: String) -> String? {
        guard !collapseID.isEmpty else { return nil }
        if isValidTopic(collapseID) { return collapseID }
        return String(Base64URL.encode(SHA256.hash(Array(collapseID.utf8))).prefix(maximumTopicLength))
    }

    /// RFC 8030 §5.4: 1...32 characters of the URL-safe base64 alphabet `A-Z a-z 0-9 - _`; and text that
    /// decodes as unpadded base64url, so not a length of 1 mod 4 (`promo`, `a`), since Apple's web push
    /// service refuses a topic that does not decode (400).
    public static func isValidTopic(_ topic: String) -> Bool {
        let count = topic.utf8.count
        return (1...maximumTopicLength).contains(count) && count % 4 != 1 && topic.utf8.allSatisfy(isBase64URLByte)
    }

    static func isBase64URLByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }
}
