import DeliveryCore
import Foundation
import Providers
import Synchronization

/// Payloads rendered once for the many deliveries that would render them alike, so a broadcast renders each
/// (notification, language, provider) once per worker and fills in per device only the msgId
/// (docs/performance.md, "Work done once").
///
/// A delivery is looked up only when its message's texts use no placeholder
/// (``DeliveryRendering/renderKey(for:message:variant:)``): then the payload depends on nothing of the
/// subscriber but the language, which is part of the key. The first delivery of a key is rendered in full
/// and only remembered as seen; the second builds the shared value, so a notification to one device (the
/// transactional workload) never renders more than once, and a producer sending 100,000 distinct languages
/// costs each one render plus a small marker.
///
/// Bounded by entries and by bytes (rendered payload plus the key's text); when either bound is reached it
/// starts over (``ByteBoundedDictionary``, as ``MessageCache`` does), so memory stays under ``byteBudget``
/// whatever producers send.
public final class RenderCache<Value: Sendable>: Sendable {
    private enum Entry {
        case seen
        case value(Value)
    }

    private struct State {
        var entries: ByteBoundedDictionary<RenderKey, Entry>
        var built = 0
    }

    /// Most keys held (markers included).
    public let capacity: Int
    /// Most bytes held: keys plus ``cost``'s measure of each value.
    public let byteBudget: Int
    private let cost: @Sendable (Value) -> Int
    private let state: Mutex<State>

    /// - Parameters:
    ///   - capacity: most keys held (default 4,096).
    ///   - byteBudget: most bytes held (default 8 MiB: 2,000 payloads of 4 KB).
    ///   - cost: the bytes one value holds (e.g. its payload's length).
    public init(capacity: Int = 4096, byteBudget: Int = 8 << 20, cost: @escaping @Sendable (Value) -> Int) {
        self.capacity = max(capacity, 1)
        self.byteBudget = byteBudget
        self.cost = cost
        state = Mutex(State(entries: ByteBoundedDictionary(capacity: capacity, byteBudget: byteBudget)))
    }

    /// The shared value for `key`: `nil` the first time the key is seen (the caller renders this delivery
    /// in full), then `build()`'s value, built once and kept until the cache starts over.
    public func value(for key: RenderKey, build: () -> Value) -> Value? {
        let found: Entry? = state.withLock { state in
            if let entry = state.entries[key] { return entry }
            state.entries.store(.seen, cost: key.cost, forKey: key)
            return nil
        }
        switch found {
        case nil: return nil
        case .value(let value)?: return value
        case .seen?:
            let value = build()
            state.withLock { state in
                state.built += 1
                state.entries.store(.value(value), cost: key.cost + cost(value), forKey: key)
            }
            return value
        }
    }

    /// Keys held and values built so far (for tests).
    var counts: (keys: Int, bytes: Int, built: Int) {
        state.withLock { ($0.entries.count, $0.entries.bytes, $0.built) }
    }
}

extension RenderCache {
    /// A payload whose one per-device part is the msgId: from the template shared under `key` (built by
    /// `template` the second time the key is seen), else rendered in full by `render` (the first time, no
    /// key because the texts use placeholders, or a template that cannot be filled).
    /// - Throws: what `render` or `template` throws; a template's error is the one every delivery of the key gets.
    func payload<Failure: Error>(
        key: RenderKey?, msgID: String, render: () throws(Failure) -> [UInt8],
        template: () throws(Failure) -> PayloadTemplate?
    ) throws(Failure) -> [UInt8] where Value == Result<PayloadTemplate?, Failure> {
        if let key, let shared = value(for: key, build: { Result { () throws(Failure) in try template() } }),
            let bytes = try shared.get()?.filled(msgID: msgID)
        {
            return bytes
        }
        return try render()
    }

    /// A cache of payload templates (cost: the template's bytes; an error or no template 256).
    static func payloadTemplates<Failure: Error>() -> RenderCache<Result<PayloadTemplate?, Failure>> {
        RenderCache<Result<PayloadTemplate?, Failure>>(cost: { result in
            guard case .success(let template?) = result else { return 256 }
            return template.bytes.count
        })
    }
}

/// Parsed `users.tags` by user, so a user's tags are parsed once per worker rather than once per delivery
/// (a user with several devices, or many notifications that use placeholders). An entry is used only while
/// the tags' text is unchanged. Bounded by entries and bytes of tag text (each at most
/// ``DeliveryRendering/maximumUserTagsBytes``); when either is reached it starts over.
public final class UserTagsCache: Sendable {
    private struct Entry {
        var text: String
        var tags: [String: JSONValue]
    }

    private struct State {
        var entries: ByteBoundedDictionary<UUID, Entry>
        var parsed = 0
    }

    public let capacity: Int
    public let byteBudget: Int
    private let state: Mutex<State>

    /// - Parameters:
    ///   - capacity: most users held (default 4,096).
    ///   - byteBudget: most bytes of tag text held (default 4 MiB; parsed tags take a few times that).
    public init(capacity: Int = 4096, byteBudget: Int = 4 << 20) {
        self.capacity = max(capacity, 1)
        self.byteBudget = byteBudget
        state = Mutex(State(entries: ByteBoundedDictionary(capacity: capacity, byteBudget: byteBudget)))
    }

    /// The tags of `userID` whose `users.tags` text is `text`, parsed by `parse` unless held.
    public func tags(userID: UUID, text: String, parse: (String) -> [String: JSONValue]) -> [String: JSONValue] {
        if let entry = state.withLock({ $0.entries[userID] }), entry.text == text { return entry.tags }
        let tags = parse(text)
        state.withLock { state in
            state.parsed += 1
            state.entries.store(Entry(text: text, tags: tags), cost: 64 + text.utf8.count, forKey: userID)
        }
        return tags
    }

    /// How many times tags were parsed (for tests).
    var parseCount: Int { state.withLock { $0.parsed } }
    /// Users held and bytes of tag text held (for tests).
    var count: Int { state.withLock { $0.entries.count } }
    var bytes: Int { state.withLock { $0.entries.bytes } }
}

/// What a payload rendered without placeholders depends on: the notification and its row version, the
/// provider (and variant), the two languages and the campaign (``RenderCache``).
public struct RenderKey: Hashable, Sendable {
    public var notificationID: UUID
    /// `notifications.xmin`: an edited message renders anew.
    public var messageVersion: String
    /// The provider, and anything of the subscription that changes its payload (e.g. an APNs push type).
    public var variant: String
    /// `subscriptions.language` as stored: the language picked depends on it.
    public var subscriberLanguage: String?
    /// `apps.default_language`: the fallback language.
    public var appDefaultLanguage: String?
    /// `notifications.campaign_id`, carried in the payload.
    public var campaignID: String?

    public init(
        notificationID: UUID, messageVersion: String, variant: String, subscriberLanguage: String?,
        appDefaultLanguage: String?, campaignID: String?
    ) {
        self.notificationID = notificationID
        self.messageVersion = messageVersion
        self.variant = variant
        self.subscriberLanguage = subscriberLanguage
        self.appDefaultLanguage = appDefaultLanguage
        self.campaignID = campaignID
    }

    /// Bytes the key holds (its texts plus a fixed 64 for the id and the entry).
    var cost: Int {
        64 + messageVersion.utf8.count + variant.utf8.count + (subscriberLanguage?.utf8.count ?? 0)
            + (appDefaultLanguage?.utf8.count ?? 0) + (campaignID?.utf8.count ?? 0)
    }
}
