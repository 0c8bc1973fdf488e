/// The content of one `notifications.message` document, with the seed's field names (docs/producer-contract.md,
/// docs/wire-formats.md), validated. Unknown members are ignored so producers can add fields before the worker
/// knows them.
///
/// `headings`, `contents` and `subtitle` are maps of language tag -> text; a plain string is accepted too
/// and stored under the tag `und` (BCP 47 "undetermined"), which localization then picks as the only entry.
public struct NotificationMessage: Sendable, Hashable {
    /// `ios_interruption_level` -> `aps.interruption-level` (Apple: "Generating a remote notification").
    public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
        case passive
        case active
        case timeSensitive = "time-sensitive"
        case critical
    }

    /// `ios_critical_sound`: Apple's critical-alert sound (`aps.sound = {"critical":1,"name","volume"}`),
    /// used only with level `critical`.
    public struct CriticalSound: Sendable, Hashable {
        /// Sound file name in the app bundle, or `default`.
        public var name: String
        /// 0.0 (silent) ... 1.0 (full volume).
        public var volume: Double
        public init(name: String, volume: Double) {
            self.name = name
            self.volume = volume
        }
    }

    /// `ios_badge_type` (OneSignal's names): leave the badge, set it to `ios_badge_count`, or increase it by it.
    public enum BadgeType: String, Sendable, Hashable, CaseIterable {
        case none = "None"
        case setTo = "SetTo"
        case increase = "Increase"
    }

    /// One `buttons` entry, which SDKs receive as a normalized `actions` entry `{id, title, url?}`.
    public struct Button: Sendable, Hashable {
        public var id: String
        public var text: String
        public var url: String?
        public init(id: String, text: String, url: String? = nil) {
            self.id = id
            self.text = text
            self.url = url
        }
    }

    /// `priority`: delivery urgency (APNs priority 10 / 5, FCM `HIGH` / `NORMAL`).
    public enum Priority: String, Sendable, Hashable {
        case high
        case normal
    }

    /// The stored members, held in one shared box: a message is copied along every delivery of its notification
    /// (decision, rendering, the provider's request), and as a struct of some thirty members each copy moved
    /// hundreds of bytes and retained every string, array and dictionary in it.
    struct Fields: Sendable, Hashable {
        var headings: [String: String] = [:]
        var contents: [String: String] = [:]
        var subtitle: [String: String] = [:]
        var iosSound: String?
        var iosInterruptionLevel: InterruptionLevel?
        var iosCriticalSound: CriticalSound?
        var iosBadgeType: BadgeType?
        var iosBadgeCount: Int?
        var iosCategory: String?
        var iosRelevanceScore: Double?
        var threadID: String?
        var contentAvailable: Bool = false
        var mutableContent: Bool?
        var url: String?
        var image: String?
        var buttons: [Button] = []
        var data: [String: JSONValue]?
        var ttl: Int?
        var priority: Priority?
        var collapseID: String?
        var androidChannelID: String?
        var androidSound: String?
        var quietHoursExempt: Bool = false
        var frequencyCapExempt: Bool = false
        var deliveryTimeOfDay: LocalTime?
        var apnsPushType: APNsPushType?
        var liveActivity: LiveActivity?
        var fileProvider: FileProviderChange?
        var mdmPushMagic: String?
        var fcmAnalyticsLabel: String?
        var androidDirectBootOK: Bool?
        var webSilent: Bool?
    }

    /// Mutated only through ``unique()``, after `isKnownUniquelyReferenced` made sure no other value shares it.
    private final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage = Storage(Fields())

    /// The storage, copied first when another value shares it.
    private mutating func unique() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
        return storage
    }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.storage === rhs.storage || lhs.storage.fields == rhs.storage.fields }

    public func hash(into hasher: inout Hasher) { hasher.combine(storage.fields) }

    public var headings: [String: String] {
        get { storage.fields.headings }
        set { unique().fields.headings = newValue }
    }

    public var contents: [String: String] {
        get { storage.fields.contents }
        set { unique().fields.contents = newValue }
    }

    public var subtitle: [String: String] {
        get { storage.fields.subtitle }
        set { unique().fields.subtitle = newValue }
    }

    /// `ios_sound`: a sound file name in the app bundle or `default`. Always sent as a string.
    public var iosSound: String? {
        get { storage.fields.iosSound }
        set { unique().fields.iosSound = newValue }
    }

    public var iosInterruptionLevel: InterruptionLevel? {
        get { storage.fields.iosInterruptionLevel }
        set { unique().fields.iosInterruptionLevel = newValue }
    }

    public var iosCriticalSound: CriticalSound? {
        get { storage.fields.iosCriticalSound }
        set { unique().fields.iosCriticalSound = newValue }
    }

    public var iosBadgeType: BadgeType? {
        get { storage.fields.iosBadgeType }
        set { unique().fields.iosBadgeType = newValue }
    }

    /// `ios_badge_count`: the value for `SetTo` (>= 0) or the increment for `Increase`.
    public var iosBadgeCount: Int? {
        get { storage.fields.iosBadgeCount }
        set { unique().fields.iosBadgeCount = newValue }
    }

    public var iosCategory: String? {
        get { storage.fields.iosCategory }
        set { unique().fields.iosCategory = newValue }
    }

    /// `ios_relevance_score`: 0.0 ... 1.0 (Apple: summary ordering).
    public var iosRelevanceScore: Double? {
        get { storage.fields.iosRelevanceScore }
        set { unique().fields.iosRelevanceScore = newValue }
    }

    public var threadID: String? {
        get { storage.fields.threadID }
        set { unique().fields.threadID = newValue }
    }

    /// `content_available: true` makes a silent (background) push: no alert, no sound, no badge.
    public var contentAvailable: Bool {
        get { storage.fields.contentAvailable }
        set { unique().fields.contentAvailable = newValue }
    }

    /// `mutable_content` as given (`nil` when absent). Visible alerts always carry `mutable-content: 1`
    /// whatever this says, because the SDK's Notification Service Extension records `received` (docs/wire-formats.md).
    public var mutableContent: Bool? {
        get { storage.fields.mutableContent }
        set { unique().fields.mutableContent = newValue }
    }

    public var url: String? {
        get { storage.fields.url }
        set { unique().fields.url = newValue }
    }

    public var image: String? {
        get { storage.fields.image }
        set { unique().fields.image = newValue }
    }

    public var buttons: [Button] {
        get { storage.fields.buttons }
        set { unique().fields.buttons = newValue }
    }

    /// `data`: the app's own key/value payload (a JSON object).
    public var data: [String: JSONValue]? {
        get { storage.fields.data }
        set { unique().fields.data = newValue }
    }

    /// `ttl`: how long, in seconds, the provider may hold the push for an offline device. `0` means
    /// "deliver now or never". `nil`: the provider's default. ``init(json:)`` accepts 0...``maximumTTL``;
    /// request factories clamp a value set directly, so an out-of-range one never traps.
    public var ttl: Int? {
        get { storage.fields.ttl }
        set { unique().fields.ttl = newValue }
    }

    public var priority: Priority? {
        get { storage.fields.priority }
        set { unique().fields.priority = newValue }
    }

    /// `collapse_id`: sent as `apns-collapse-id` (and FCM's collapse key); ``init(json:)`` refuses one
    /// that is not a clean header value (``HTTPFieldValue/isValid(_:)``).
    public var collapseID: String? {
        get { storage.fields.collapseID }
        set { unique().fields.collapseID = newValue }
    }

    public var androidChannelID: String? {
        get { storage.fields.androidChannelID }
        set { unique().fields.androidChannelID = newValue }
    }

    public var androidSound: String? {
        get { storage.fields.androidSound }
        set { unique().fields.androidSound = newValue }
    }

    public var quietHoursExempt: Bool {
        get { storage.fields.quietHoursExempt }
        set { unique().fields.quietHoursExempt = newValue }
    }

    public var frequencyCapExempt: Bool {
        get { storage.fields.frequencyCapExempt }
        set { unique().fields.frequencyCapExempt = newValue }
    }

    /// `delivery_time_of_day` (`"HH:MM"`): deliver at this local wall-clock time in each subscriber's zone
    /// (docs/local-time-delivery.md); `nil`: as soon as the notification is due.
    public var deliveryTimeOfDay: LocalTime? {
        get { storage.fields.deliveryTimeOfDay }
        set { unique().fields.deliveryTimeOfDay = newValue }
    }

    /// `apns_push_type`: `voip`, `liveactivity`, `location`, `pushtotalk`, `complication`, `fileprovider`, `mdm`
    /// or `widgets` (``APNsPushType``); `nil` for the ordinary alert or background push. It also picks the subscriptions the message expands to (`subscriptions.kind`).
    public var apnsPushType: APNsPushType? {
        get { storage.fields.apnsPushType }
        set { unique().fields.apnsPushType = newValue }
    }

    /// `live_activity`: the ActivityKit members of a `liveactivity` push (required with it, refused without).
    public var liveActivity: LiveActivity? {
        get { storage.fields.liveActivity }
        set { unique().fields.liveActivity = newValue }
    }

    /// `file_provider`: the change a `fileprovider` push signals (required with it, refused without).
    public var fileProvider: FileProviderChange? {
        get { storage.fields.fileProvider }
        set { unique().fields.fileProvider = newValue }
    }

    /// `mdm_push_magic`: the device's `PushMagic` (from its MDM `TokenUpdate` check-in), the whole payload of an
    /// `mdm` push, `{"mdm":"<PushMagic>"}` (Apple, "Sending MDM commands to a device"). Required with
    /// `apns_push_type: mdm`, refused without.
    public var mdmPushMagic: String? {
        get { storage.fields.mdmPushMagic }
        set { unique().fields.mdmPushMagic = newValue }
    }

    /// `fcm_analytics_label` -> FCM's `message.fcm_options.analytics_label` (Firebase, FCM HTTP v1 `FcmOptions`:
    /// "Label associated with the message's analytics data"), 1 to 50 characters of
    /// ``fcmAnalyticsLabelCharacters`` (Firebase's pattern `^[a-zA-Z0-9-_.~%]{1,50}$`). Only FCM sends it.
    public var fcmAnalyticsLabel: String? {
        get { storage.fields.fcmAnalyticsLabel }
        set { unique().fields.fcmAnalyticsLabel = newValue }
    }

    /// `android_direct_boot_ok` -> FCM's `message.android.direct_boot_ok` (Firebase, FCM HTTP v1
    /// `AndroidConfig`: "If set to true, messages will be allowed to be delivered to the app while the device
    /// is in direct boot mode"). `nil`: left out (FCM's default, false).
    public var androidDirectBootOK: Bool? {
        get { storage.fields.androidDirectBootOK }
        set { unique().fields.androidDirectBootOK = newValue }
    }

    /// `web_silent`: the Notifications API's `silent` for a Declarative Web Push message (`notification.silent`:
    /// shown without sound or vibration; W3C Push API "declarative push message"), `nil` when absent. Not a
    /// silent push: the notification is still shown. Only the declarative Web Push form carries it.
    public var webSilent: Bool? {
        get { storage.fields.webSilent }
        set { unique().fields.webSilent = newValue }
    }

    /// The bytes Firebase's pattern for an analytics label allows, `[a-zA-Z0-9-_.~%]` (FCM HTTP v1 `FcmOptions`).
    public static func isFCMAnalyticsLabelByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"), UInt8(ascii: "%"):
            true
        default: false
        }
    }

    /// The longest analytics label Firebase accepts, in characters: 50 (`^[a-zA-Z0-9-_.~%]{1,50}$`).
    public static let maximumFCMAnalyticsLabelLength = 50

    /// The largest `ttl` accepted, in seconds: 2,419,200 s = 28 days, FCM's maximum TTL (Firebase:
    /// "Setting the lifespan of a message") and the usual cap of Web Push services (RFC 8030 §5.2 lets them
    /// shorten it); APNs stores a push for about 30 days at most. Larger values are refused rather than
    /// clamped so the producer learns its message would not live as long as it asked.
    public static let maximumTTL = 2_419_200

    /// The largest magnitude of `ios_badge_count`: 2,147,483,647 (`Int32.max`). Badges are small numbers
    /// on every platform, and the SDK adds an `Increase` to the current badge, which must not overflow.
    public static let maximumBadgeCount = 2_147_483_647

    /// A message with everything empty; set fields, or parse one with ``init(json:)``.
    public init() {}

    /// `true` for a silent (background) push: `content_available: true`.
    public var isSilent: Bool { contentAvailable }

    /// `true` when `contents` or `headings` has text in some language: something a notification can show.
    public var hasVisibleText: Bool {
        contents.values.contains { !$0.isEmpty } || headings.values.contains { !$0.isEmpty }
    }

    /// `true` when the message sets the iOS badge (`SetTo`) or plays an iOS sound: enough for an APNs alert
    /// push without text (Apple, "Sending notification requests to APNs": the `alert` push type is for an
    /// alert, a sound or a badge). An `Increase` alone is not: the SDK's service extension applies it, and
    /// iOS runs that extension only for a push that shows an alert.
    public var setsBadgeOrSound: Bool {
        iosBadgeType == .setTo && iosBadgeCount != nil || !(iosSound ?? "").isEmpty || iosCriticalSound != nil
    }

    /// Parses and validates a `notifications.message` document.
    /// - Throws: `MessageError` naming the first offending field: a wrong JSON type, an unknown
    ///   `ios_interruption_level` / `ios_badge_type` / `priority`, a volume or relevance score outside
    ///   0...1, a `ttl` below 0 or above ``maximumTTL``, an `ios_badge_count` beyond ±``maximumBadgeCount``
    ///   or without a badge type, a `collapse_id` that cannot be an HTTP header value (a control character
    ///   such as CR / LF / NUL, or leading / trailing whitespace: ``HTTPFieldValue/isValid(_:)``), `data` not
    ///   an object, a button without an `id` or `text`, or a visible (not silent) message without any
    ///   `contents` text, badge or sound (``setsBadgeOrSound``); and the rules of `apns_push_type` /
    ///   `live_activity` (``APNsPushType``, ``LiveActivity``): a VoIP push has no text, a Live Activity push
    ///   needs `live_activity`, whose `start` needs `contents` for its alert.
    public init(json: JSONValue) throws(MessageError) {
        guard let members = json.objectValue else {
            throw MessageError(code: .wrongType, field: "message", message: "must be a JSON object")
        }
        let reader = FieldReader(members: members)
        headings = try reader.localized("headings")
        contents = try reader.localized("contents")
        subtitle = try reader.localized("subtitle")
        iosSound = try reader.string("ios_sound")
        if let level = try reader.string("ios_interruption_level") {
            guard let parsed = InterruptionLevel(rawValue: level) else {
                throw MessageError(code: .invalidValue, field: "ios_interruption_level",
                                   message: "must be one of passive, active, time-sensitive, critical (got \"\(level)\")")
            }
            iosInterruptionLevel = parsed
        }
        if let sound = try reader.object("ios_critical_sound") {
            let soundReader = FieldReader(members: sound, prefix: "ios_critical_sound.")
            guard let name = try soundReader.string("name"), !name.isEmpty else {
                throw MessageError(code: .missing, field: "ios_critical_sound.name", message: "must be a non-empty sound name")
            }
            let volume = try soundReader.number("volume") ?? 1.0
            guard (0.0...1.0).contains(volume) else {
                throw MessageError(code: .invalidValue, field: "ios_critical_sound.volume", message: "must be between 0 and 1 (got \(volume))")
            }
            iosCriticalSound = CriticalSound(name: name, volume: volume)
        }
        if let badgeType = try reader.string("ios_badge_type") {
            guard let parsed = BadgeType(rawValue: badgeType) else {
                throw MessageError(code: .invalidValue, field: "ios_badge_type",
                                   message: "must be one of None, SetTo, Increase (got \"\(badgeType)\")")
            }
            iosBadgeType = parsed
        }
        if let count = try reader.integer("ios_badge_count") {
            guard let badgeType = iosBadgeType, badgeType != .none else {
                throw MessageError(code: .missing, field: "ios_badge_type", message: "must be SetTo or Increase when ios_badge_count is given")
            }
            guard count.magnitude <= UInt(Self.maximumBadgeCount) else {
                throw MessageError(code: .invalidValue, field: "ios_badge_count",
                                   message: "must be between -\(Self.maximumBadgeCount) and \(Self.maximumBadgeCount) (got \(count))")
            }
            if badgeType == .setTo, count < 0 {
                throw MessageError(code: .invalidValue, field: "ios_badge_count", message: "must be >= 0 with SetTo (got \(count))")
            }
            iosBadgeCount = count
        } else if let badgeType = iosBadgeType, badgeType != .none {
            throw MessageError(code: .missing, field: "ios_badge_count", message: "is required with ios_badge_type \(badgeType.rawValue)")
        }
        iosCategory = try reader.string("ios_category")
        if let score = try reader.number("ios_relevance_score") {
            guard (0.0...1.0).contains(score) else {
                throw MessageError(code: .invalidValue, field: "ios_relevance_score", message: "must be between 0 and 1 (got \(score))")
            }
            iosRelevanceScore = score
        }
        threadID = try reader.string("thread_id")
        contentAvailable = try reader.bool("content_available") ?? false
        mutableContent = try reader.bool("mutable_content")
        url = try reader.string("url")
        webSilent = try reader.bool("web_silent")
        image = try reader.string("image")
        if let list = try reader.array("buttons") {
            buttons = try list.enumerated().map { (index, element) throws(MessageError) -> Button in
                let path = "buttons[\(index)]"
                guard let button = element.objectValue else {
                    throw MessageError(code: .wrongType, field: path, message: "must be an object {id, text, url?}")
                }
                let buttonReader = FieldReader(members: button, prefix: path + ".")
                guard let id = try buttonReader.string("id"), !id.isEmpty else {
                    throw MessageError(code: .missing, field: path + ".id", message: "every button needs a non-empty id")
                }
                guard let text = try buttonReader.string("text"), !text.isEmpty else {
                    throw MessageError(code: .missing, field: path + ".text", message: "every button needs a non-empty text")
                }
                return Button(id: id, text: text, url: try buttonReader.string("url"))
            }
            var seen = Set<String>()
            for (index, button) in buttons.enumerated() where !seen.insert(button.id).inserted {
                throw MessageError(code: .invalidValue, field: "buttons[\(index)].id", message: "duplicate button id \"\(button.id)\"")
            }
        }
        data = try reader.object("data")
        (ttl, priority) = try Self.scheduling(ttl: members["ttl"], priority: members["priority"])
        if let collapseID = try reader.string("collapse_id") {
            // It becomes the `apns-collapse-id` header: CR/LF would be refused by HTTP/2 on every retry.
            guard HTTPFieldValue.isValid(collapseID) else {
                throw MessageError(code: .invalidValue, field: "collapse_id",
                                   message: "must not contain control characters (CR, LF, NUL, tab) or start or end with a space")
            }
            // APNs's limit for apns-collapse-id, the strictest of the three providers.
            guard collapseID.utf8.count <= 64 else {
                throw MessageError(code: .invalidValue, field: "collapse_id",
                                   message: "at most 64 bytes of UTF-8 (APNs's apns-collapse-id limit; got \(collapseID.utf8.count))")
            }
            self.collapseID = collapseID
        }
        androidChannelID = try reader.string("android_channel_id")
        androidSound = try reader.string("android_sound")
        if let label = try reader.string("fcm_analytics_label") {
            // Firebase refuses the whole send with INVALID_ARGUMENT otherwise; checked here so the producer
            // learns it from the notification, not from each Android delivery.
            guard (1...Self.maximumFCMAnalyticsLabelLength).contains(label.utf8.count), label.utf8.allSatisfy(Self.isFCMAnalyticsLabelByte) else {
                throw MessageError(code: .invalidValue, field: "fcm_analytics_label",
                                   message: "must match Firebase's pattern ^[a-zA-Z0-9-_.~%]{1,50}$ (1 to 50 letters, digits, '-', '_', '.', '~' or '%')")
            }
            fcmAnalyticsLabel = label
        }
        androidDirectBootOK = try reader.bool("android_direct_boot_ok")
        quietHoursExempt = try reader.bool("quiet_hours_exempt") ?? false
        frequencyCapExempt = try reader.bool("frequency_cap_exempt") ?? false
        deliveryTimeOfDay = try Self.deliveryTimeOfDay(members["delivery_time_of_day"])
        try readPushType(reader)
        // An APNs push type has its own rules for text (``readPushType(_:)``).
        if apnsPushType != nil { return }

        // Apple's alert push type covers an alert, a sound or a badge: a badge-only or sound-only push is valid
        // (it reaches APNs only; other providers skip it as `nothing_to_show`).
        if !isSilent, !contents.values.contains(where: { !$0.isEmpty }), !setsBadgeOrSound {
            throw MessageError(code: .missing, field: "contents",
                               message: "a visible notification needs text in at least one language, a badge or a sound (or content_available: true for a silent push)")
        }
    }
}

extension NotificationMessage {
    /// Validates the two members audience expansion reads before any delivery exists, by the same rules as
    /// ``init(json:)``: `ttl` a whole number of seconds in 0...``maximumTTL``, `priority` `high` or `normal`
    /// (`null` or absent: `nil`). Expansion checks them first so that no statement ever uses an unchecked
    /// producer number (a `ttl` of `1e13` is refused here, not by PostgreSQL's interval arithmetic).
    /// - Throws: ``MessageError`` naming `ttl` or `priority`: the wrong type, or a value out of range.
    public static func scheduling(ttl: JSONValue?, priority: JSONValue?) throws(MessageError)
        -> (ttl: Int?, priority: Priority?)
    {
        let reader = FieldReader(members: ["ttl": ttl ?? .null, "priority": priority ?? .null])
        var result: (ttl: Int?, priority: Priority?) = (nil, nil)
        if let ttl = try reader.integer("ttl") {
            guard (0...maximumTTL).contains(ttl) else {
                throw MessageError(code: .invalidValue, field: "ttl",
                                   message: "must be a whole number of seconds from 0 to \(maximumTTL) (28 days) (got \(ttl))")
            }
            result.ttl = ttl
        }
        if let priority = try reader.string("priority") {
            guard let parsed = Priority(rawValue: priority) else {
                throw MessageError(code: .invalidValue, field: "priority", message: "must be high or normal (got \"\(priority)\")")
            }
            result.priority = parsed
        }
        return result
    }
}

extension NotificationMessage {
    /// Validates `delivery_time_of_day` by the rule expansion and the send pipeline share: `null` or absent
    /// is `nil`; otherwise a string of exactly `HH:MM`, 00:00 to 23:59 (``LocalTimeDelivery/parseTimeOfDay(_:)``).
    /// - Throws: ``MessageError`` naming `delivery_time_of_day`: not a string, or not such a time.
    public static func deliveryTimeOfDay(_ value: JSONValue?) throws(MessageError) -> LocalTime? {
        let reader = FieldReader(members: ["delivery_time_of_day": value ?? .null])
        guard let text = try reader.string("delivery_time_of_day") else { return nil }
        guard let time = LocalTimeDelivery.parseTimeOfDay(text) else {
            let shown = text.count > 32 ? String(text.prefix(32)) + "…" : text
            throw MessageError(code: .invalidValue, field: "delivery_time_of_day",
                               message: "must be a local time of day \"HH:MM\" from 00:00 to 23:59 (got \"\(shown)\")")
        }
        return time
    }
}

/// Typed access to message members; `null` counts as absent. Errors carry `prefix + key` as the field.
struct FieldReader {
    var members: [String: JSONValue]
    var prefix: String = ""

    private func value(_ key: String) -> JSONValue? {
        guard let value = members[key], !value.isNull else { return nil }
        return value
    }

    private func wrongType(_ key: String, _ expected: String) -> MessageError {
        MessageError(code: .wrongType, field: prefix + key, message: "must be \(expected)")
    }

    func string(_ key: String) throws(MessageError) -> String? {
        guard let value = value(key) else { return nil }
        guard let text = value.stringValue else { throw wrongType(key, "a string") }
        return text
    }

    func bool(_ key: String) throws(MessageError) -> Bool? {
        guard let value = value(key) else { return nil }
        guard let flag = value.boolValue else { throw wrongType(key, "true or false") }
        return flag
    }

    func number(_ key: String) throws(MessageError) -> Double? {
        guard let value = value(key) else { return nil }
        guard let number = value.doubleValue, number.isFinite else { throw wrongType(key, "a number") }
        return number
    }

    func integer(_ key: String) throws(MessageError) -> Int? {
        guard let value = value(key) else { return nil }
        guard let number = value.int64Value, let result = Int(exactly: number) else { throw wrongType(key, "a whole number") }
        return result
    }

    func object(_ key: String) throws(MessageError) -> [String: JSONValue]? {
        guard let value = value(key) else { return nil }
        guard let object = value.objectValue else { throw wrongType(key, "a JSON object") }
        return object
    }

    func array(_ key: String) throws(MessageError) -> [JSONValue]? {
        guard let value = value(key) else { return nil }
        guard let array = value.arrayValue else { throw wrongType(key, "an array") }
        return array
    }

    /// A language map (`{"en": "Hi", "tr": "Merhaba"}`) or a plain string (stored under `und`).
    func localized(_ key: String) throws(MessageError) -> [String: String] {
        guard let value = value(key) else { return [:] }
        if let text = value.stringValue { return ["und": text] }
        guard let map = value.objectValue else { throw wrongType(key, "an object of language -> text") }
        var result: [String: String] = [:]
        for (language, text) in map {
            if text.isNull { continue }
            guard let text = text.stringValue else {
                throw MessageError(code: .wrongType, field: "\(prefix)\(key).\(language)", message: "must be a string")
            }
            guard !language.isEmpty else {
                throw MessageError(code: .invalidValue, field: prefix + key, message: "has an empty language tag")
            }
            result[language] = text
        }
        return result
    }
}
