/// `apns_push_type`: the APNs push types beyond the ordinary `alert` / `background` that a message can ask for
/// (Apple, "Sending notification requests to APNs", the `apns-push-type` header). Each goes to its own kind of
/// token, so the raw value is also the `subscriptions.kind` the message expands to.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    /// A VoIP call invitation through PushKit (Apple, "Responding to VoIP notifications from PushKit"): topic
    /// `<bundle id>.voip`, priority 10, sent to a PushKit token. iOS terminates an app that does not report
    /// the call to CallKit, so it goes only to `voip` subscriptions and never carries text.
    case voip
    /// An ActivityKit push that starts, updates or ends a Live Activity (Apple, "Starting and updating Live
    /// Activities with ActivityKit push notifications"): topic `<bundle id>.push-type.liveactivity`, sent to a
    /// push-to-start token or a Live Activity's update token.
    case liveActivity = "liveactivity"

    /// The `subscriptions.kind` this push type reaches (`voip` / `liveactivity`); every other message
    /// reaches ``deviceKind``.
    public var subscriptionKind: String { rawValue }

    /// The `subscriptions.kind` of an ordinary device token (UIKit's, FCM's or a Web Push subscription).
    public static let deviceKind = "device"

    /// The `apns-topic` suffix Apple requires after the bundle id: `.voip` and `.push-type.liveactivity`
    /// (Apple, "Sending notification requests to APNs").
    public var topicSuffix: String {
        switch self {
        case .voip: ".voip"
        case .liveActivity: ".push-type.liveactivity"
        }
    }

    /// The `subscriptions.kind` a message's `apns_push_type` member reaches, read before any delivery exists
    /// (audience expansion), by the rules of ``NotificationMessage/init(json:)``: absent or `null` is
    /// ``deviceKind``.
    /// - Throws: ``MessageError`` naming `apns_push_type`: not a string, or not `voip` / `liveactivity`.
    public static func subscriptionKind(of member: JSONValue?) throws(MessageError) -> String {
        let reader = FieldReader(members: ["apns_push_type": member ?? .null])
        return try parse(reader)?.subscriptionKind ?? deviceKind
    }

    static func parse(_ reader: FieldReader) throws(MessageError) -> APNsPushType? {
        guard let text = try reader.string("apns_push_type") else { return nil }
        guard let type = APNsPushType(rawValue: text) else {
            throw MessageError(code: .invalidValue, field: "apns_push_type",
                               message: "must be voip or liveactivity (got \"\(text)\"); leave it out for an alert or background push")
        }
        return type
    }
}

extension NotificationMessage {
    /// `live_activity`: what a `liveactivity` push puts in `aps` (Apple, "Starting and updating Live
    /// Activities with ActivityKit push notifications"). Member names are the seed's snake_case of Apple's
    /// keys: `event`, `timestamp`, `content_state`, `stale_date`, `dismissal_date`, `relevance_score`,
    /// `attributes_type`, `attributes`. Dates are whole seconds since 1970-01-01 UTC, as Apple's are.
    public struct LiveActivity: Sendable, Hashable {
        /// `aps.event`.
        public enum Event: String, Sendable, Hashable, CaseIterable {
            /// Starts a Live Activity with a push-to-start token (iOS 17.2+): needs `attributes_type`,
            /// `attributes`, `content_state` and an alert.
            case start
            /// Replaces the Live Activity's `content-state`.
            case update
            /// Ends it, optionally with a final `content-state` and a `dismissal-date`.
            case end
        }

        public var event: Event
        /// `aps.timestamp`: when the data was made, seconds since 1970; ActivityKit ignores a push older than
        /// the last one it applied, so the producer, not the worker, sets it (a retry keeps its place).
        public var timestamp: Int
        /// `aps.content-state`: the app's `ContentState`, as JSON (required for `start` and `update`).
        public var contentState: [String: JSONValue]?
        /// `aps.stale-date`: seconds since 1970 after which the system shows the activity as out of date.
        public var staleDate: Int?
        /// `aps.dismissal-date`: seconds since 1970 when an ended activity leaves the Lock Screen (`end` only).
        public var dismissalDate: Int?
        /// `aps.relevance-score`: orders the app's concurrent Live Activities (higher first); any finite number.
        public var relevanceScore: Double?
        /// `aps.attributes-type`: the name of the app's `ActivityAttributes` type (`start` only).
        public var attributesType: String?
        /// `aps.attributes`: the static attributes of the new activity (`start` only).
        public var attributes: [String: JSONValue]?

        /// The latest time a Live Activity date may name, in seconds since 1970-01-01 UTC: 7,258,118,399 =
        /// 2199-12-31T23:59:59Z. Apple's `timestamp`, `stale-date` and `dismissal-date` are UNIX epoch seconds
        /// ("Starting and updating Live Activities with ActivityKit push notifications"); a millisecond value
        /// for any moment after 1970-03-26 is beyond this bound, so a producer sending JavaScript's
        /// `Date.now()` (as some SDK examples do) is told so instead of having its activity frozen: ActivityKit
        /// ignores every later update older than the last one it applied, and a millisecond `timestamp` reads
        /// as some 55,000 years ahead.
        public static let latestEpochSeconds = 7_258_118_399

        /// Checks one date member: whole seconds from 0 to ``latestEpochSeconds``.
        /// - Throws: ``MessageError`` (`invalidValue`) naming `field`; for a value that divided by 1,000 is in
        ///   range, the message says it reads as milliseconds and gives the seconds to send.
        static func checkEpochSeconds(_ value: Int, field: String) throws(MessageError) {
            guard value < 0 || value > latestEpochSeconds else { return }
            var message = "must be whole seconds since 1970-01-01 UTC, from 0 to \(latestEpochSeconds) (2199-12-31T23:59:59Z); got \(value)"
            if value > latestEpochSeconds {
                let thousandth = value / 1000
                message += thousandth <= latestEpochSeconds
                    ? ", which reads as milliseconds: send \(thousandth)"
                    : ", which is not a time in seconds"
            }
            throw MessageError(code: .invalidValue, field: field, message: message)
        }

        public init(event: Event, timestamp: Int, contentState: [String: JSONValue]? = nil, staleDate: Int? = nil,
                    dismissalDate: Int? = nil, relevanceScore: Double? = nil, attributesType: String? = nil,
                    attributes: [String: JSONValue]? = nil)
        {
            self.event = event
            self.timestamp = timestamp
            self.contentState = contentState
            self.staleDate = staleDate
            self.dismissalDate = dismissalDate
            self.relevanceScore = relevanceScore
            self.attributesType = attributesType
            self.attributes = attributes
        }
    }

    /// Reads `apns_push_type` and `live_activity` and checks them against the rest of the message.
    /// - Throws: ``MessageError``: an unknown push type; `content_available` with one (a push has one type);
    ///   text in a VoIP push (PushKit shows nothing; the app reports the call to CallKit from `data`);
    ///   `live_activity` without `apns_push_type: liveactivity` or missing with it; and the Live Activity rules
    ///   of ``readLiveActivity(_:)``.
    mutating func readPushType(_ reader: FieldReader) throws(MessageError) {
        apnsPushType = try APNsPushType.parse(reader)
        let liveActivityMember = try reader.object("live_activity")
        guard let pushType = apnsPushType else {
            if liveActivityMember != nil {
                throw MessageError(code: .invalidValue, field: "live_activity",
                                   message: "needs apns_push_type: liveactivity")
            }
            return
        }
        if isSilent {
            throw MessageError(code: .invalidValue, field: "content_available",
                               message: "cannot be combined with apns_push_type \(pushType.rawValue) (a push has one APNs push type)")
        }
        switch pushType {
        case .voip:
            if liveActivityMember != nil {
                throw MessageError(code: .invalidValue, field: "live_activity", message: "needs apns_push_type: liveactivity (got voip)")
            }
            for (field, texts) in [("headings", headings), ("subtitle", subtitle), ("contents", contents)]
            where texts.values.contains(where: { !$0.isEmpty }) {
                throw MessageError(code: .invalidValue, field: field,
                                   message: "a VoIP push shows no text: the app reports the call to CallKit, so put the caller in data")
            }
        case .liveActivity:
            guard let liveActivityMember else {
                throw MessageError(code: .missing, field: "live_activity",
                                   message: "is required with apns_push_type liveactivity ({\"event\", \"timestamp\", \"content_state\", ...})")
            }
            liveActivity = try readLiveActivity(liveActivityMember)
        }
    }

    /// The rules of Apple's "Starting and updating Live Activities with ActivityKit push notifications":
    /// `event` one of `start` / `update` / `end`; `timestamp` whole seconds since 1970 from 0 to
    /// ``LiveActivity/latestEpochSeconds`` (required); `content_state` an object, required for `start` and
    /// `update`; `stale_date` and `dismissal_date` whole seconds in the same range, `dismissal_date` only with
    /// `end`; `relevance_score` a number; `attributes_type` (a
    /// non-empty string) and `attributes` (an object) required with `start` and refused otherwise; and a
    /// `start` needs `contents` text, which becomes its alert.
    /// - Throws: ``MessageError`` naming `live_activity.<member>` (or `contents`).
    func readLiveActivity(_ members: [String: JSONValue]) throws(MessageError) -> LiveActivity {
        let reader = FieldReader(members: members, prefix: "live_activity.")
        guard let eventText = try reader.string("event") else {
            throw MessageError(code: .missing, field: "live_activity.event", message: "is required: start, update or end")
        }
        guard let event = LiveActivity.Event(rawValue: eventText) else {
            throw MessageError(code: .invalidValue, field: "live_activity.event",
                               message: "must be start, update or end (got \"\(eventText)\")")
        }
        func seconds(_ key: String) throws(MessageError) -> Int? {
            guard let value = try reader.integer(key) else { return nil }
            try LiveActivity.checkEpochSeconds(value, field: "live_activity." + key)
            return value
        }
        guard let timestamp = try seconds("timestamp") else {
            throw MessageError(code: .missing, field: "live_activity.timestamp",
                               message: "is required: whole seconds since 1970-01-01 UTC when the data was made (ActivityKit ignores older pushes)")
        }
        var activity = LiveActivity(event: event, timestamp: timestamp)
        activity.contentState = try reader.object("content_state")
        if activity.contentState == nil, event != .end {
            throw MessageError(code: .missing, field: "live_activity.content_state",
                               message: "is required with event \(event.rawValue) (the app's ContentState as a JSON object)")
        }
        activity.staleDate = try seconds("stale_date")
        activity.dismissalDate = try seconds("dismissal_date")
        if activity.dismissalDate != nil, event != .end {
            throw MessageError(code: .invalidValue, field: "live_activity.dismissal_date",
                               message: "is only for event end (got \(event.rawValue))")
        }
        activity.relevanceScore = try reader.number("relevance_score")
        activity.attributesType = try reader.string("attributes_type")
        activity.attributes = try reader.object("attributes")
        if event == .start {
            guard let type = activity.attributesType, !type.isEmpty else {
                throw MessageError(code: .missing, field: "live_activity.attributes_type",
                                   message: "is required with event start (the name of the app's ActivityAttributes type)")
            }
            guard activity.attributes != nil else {
                throw MessageError(code: .missing, field: "live_activity.attributes",
                                   message: "is required with event start (the activity's static attributes as a JSON object)")
            }
            guard contents.values.contains(where: { !$0.isEmpty }) else {
                throw MessageError(code: .missing, field: "contents",
                                   message: "a Live Activity start needs text for its alert")
            }
        } else {
            for key in ["attributes_type", "attributes"] where !(members[key]?.isNull ?? true) {
                throw MessageError(code: .invalidValue, field: "live_activity." + key,
                                   message: "is only for event start (got \(event.rawValue))")
            }
        }
        return activity
    }
}
