/// `apns_push_type`: the APNs push types beyond the ordinary `alert` / `background` that a message can ask for
/// (Apple, "Sending notification requests to APNs", the `apns-push-type` header table). Each goes to its own
/// kind of token, so the raw value is also the `subscriptions.kind` the message expands to.
///
/// | type | `apns-topic` | `apns-priority` | payload | credentials |
/// |---|---|---|---|---|
/// | `voip` | `<bundle id>.voip` | 10 | `{"aps":{},"on":{...}}` | token or certificate |
/// | `liveactivity` | `<bundle id>.push-type.liveactivity` | 10 / 5 | ActivityKit's `aps` | token |
/// | `location` | `<bundle id>.location-query` | 10 / 5 | `{"aps":{},"on":{...}}` | token |
/// | `pushtotalk` | `<bundle id>.voip-ptt` | 10, `apns-expiration: 0` | `{"aps":{},"on":{...}}` | token or certificate |
/// | `complication` | `<bundle id>.complication` | 10 / 5 | `{"aps":{},"on":{...}}` | token or certificate |
/// | `fileprovider` | `<bundle id>.pushkit.fileprovider` | 10 / 5 | `{"container-identifier","domain"?}` | token |
/// | `mdm` | the MDM push certificate's UID topic, unchanged | 10 / 5 | `{"mdm":"<PushMagic>"}` | certificate |
/// | `widgets` | `<bundle id>.push-type.widgets` | 10 / 5 | `{"aps":{"content-changed":true}}` | token |
///
/// "10 / 5": 10 for `priority: high` or unset, 5 for `priority: normal`. None of these types shows text: only a
/// Live Activity `start` / `update` carries an alert.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    /// A VoIP call invitation through PushKit (Apple, "Responding to VoIP notifications from PushKit"): topic
    /// `<bundle id>.voip`, priority 10, sent to a PushKit token. iOS terminates an app that does not report
    /// the call to CallKit, so it goes only to `voip` subscriptions and never carries text.
    case voip
    /// An ActivityKit push that starts, updates or ends a Live Activity (Apple, "Starting and updating Live
    /// Activities with ActivityKit push notifications"): topic `<bundle id>.push-type.liveactivity`, sent to a
    /// push-to-start token or a Live Activity's update token.
    case liveActivity = "liveactivity"
    /// A location query for the app's Location Push Service Extension (Apple, "Creating a location push service
    /// extension"; the `apns-push-type` table: topic `<bundle id>.location-query`, priority 10 when the query
    /// needs an immediate answer, else 5, token-based authentication only), sent to the token of
    /// `CLLocationManager.startMonitoringLocationPushes`.
    case location
    /// A Push to Talk push (Apple, "Creating a Push to Talk app"): topic `<bundle id>.voip-ptt`, priority 10 and
    /// `apns-expiration: 0` (the audio is live or worthless), sent to the ephemeral token of `PTChannelManager`.
    case pushToTalk = "pushtotalk"
    /// A watchOS complication update through PushKit (Apple, "Keeping your complications up to date"): topic
    /// `<bundle id>.complication`; a certificate must be registered for WatchKit services.
    case complication
    /// A change signal for a File Provider extension through PushKit (Apple, "Using push notifications to
    /// signal changes"): topic `<bundle id>.pushkit.fileprovider`; the payload names the changed container.
    /// That document has the server sign with provider authentication tokens, not provider certificates, so a
    /// certificate channel refuses it as `push_type_unsupported`.
    case fileProvider = "fileprovider"
    /// A Mobile Device Management wake-up (Apple, "Sending MDM commands to a device"): the topic is the UID of
    /// the MDM push certificate's subject (`com.apple.mgmt.External.<uuid>`), the payload only
    /// `{"mdm":"<PushMagic>"}`, and the device then polls the MDM server. Only an MDM push certificate can send
    /// it, so a token-based channel refuses it as `push_type_unsupported`.
    case mdm
    /// A WidgetKit reload (Apple, "Updating widgets with WidgetKit push notifications", iOS 26): topic
    /// `<bundle id>.push-type.widgets`, payload `{"aps":{"content-changed":true}}`, over a token-based
    /// connection, sent to the token of `WidgetPushHandler`.
    case widgets

    /// What authenticates a channel that may carry this push type (Apple, "Sending notification requests to
    /// APNs", the `apns-push-type` table, and each type's own document).
    public enum Credentials: Sendable, Hashable {
        /// A provider token or a certificate whose topics include the request's `apns-topic`.
        case tokenOrCertificate
        /// Token-based authentication only (`liveactivity`, `location`, `fileprovider`, `widgets`).
        case token
        /// A certificate only (`mdm`: an MDM push certificate).
        case certificate
    }

    /// The channel kinds Apple accepts this push type from; a channel of another kind fails the delivery as
    /// `push_type_unsupported`.
    public var credentials: Credentials {
        switch self {
        case .liveActivity, .location, .fileProvider, .widgets: .token
        case .mdm: .certificate
        case .voip, .pushToTalk, .complication: .tokenOrCertificate
        }
    }

    /// Whether `apns-priority` is always 10, whatever the message's `priority`: a VoIP call rings now or never
    /// (Apple, "Responding to VoIP notifications from PushKit"), and Push to Talk audio is live (Apple,
    /// "Creating a Push to Talk app": priority 10). Every other type follows `priority` (10, or 5 for `normal`).
    public var alwaysHighPriority: Bool { self == .voip || self == .pushToTalk }

    /// Whether the push must not be stored by APNs (`apns-expiration: 0` whatever `ttl` says): Push to Talk only
    /// (Apple, "Creating a Push to Talk app").
    public var expiresImmediately: Bool { self == .pushToTalk }

    /// The `subscriptions.kind` this push type reaches (its raw value); every other message reaches
    /// ``deviceKind``.
    public var subscriptionKind: String { rawValue }

    /// The `subscriptions.kind` of an ordinary device token (UIKit's, FCM's or a Web Push subscription).
    public static let deviceKind = "device"

    /// The `apns-topic` suffix Apple requires after the bundle id (Apple, "Sending notification requests to
    /// APNs"): empty for `mdm`, whose channel topic is already the certificate's UID topic.
    public var topicSuffix: String {
        switch self {
        case .voip: ".voip"
        case .liveActivity: ".push-type.liveactivity"
        case .location: ".location-query"
        case .pushToTalk: ".voip-ptt"
        case .complication: ".complication"
        case .fileProvider: ".pushkit.fileprovider"
        case .mdm: ""
        case .widgets: ".push-type.widgets"
        }
    }

    /// The raw values, for messages: `voip, liveactivity, location, ...`.
    static let names = allCases.map(\.rawValue).joined(separator: ", ")

    /// The `subscriptions.kind` a message's `apns_push_type` member reaches, read before any delivery exists
    /// (audience expansion), by the rules of ``NotificationMessage/init(json:)``: absent or `null` is
    /// ``deviceKind``.
    /// - Throws: ``MessageError`` naming `apns_push_type`: not a string, or not one of the cases.
    public static func subscriptionKind(of member: JSONValue?) throws(MessageError) -> String {
        let reader = FieldReader(members: ["apns_push_type": member ?? .null])
        return try parse(reader)?.subscriptionKind ?? deviceKind
    }

    static func parse(_ reader: FieldReader) throws(MessageError) -> APNsPushType? {
        guard let text = try reader.string("apns_push_type") else { return nil }
        guard let type = APNsPushType(rawValue: text) else {
            throw MessageError(code: .invalidValue, field: "apns_push_type",
                               message: "must be one of \(names) (got \"\(text)\"); leave it out for an alert or background push")
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

    /// `file_provider`: what a `fileprovider` push tells the File Provider extension (Apple, "Using push
    /// notifications to signal changes"): `container_identifier` -> `container-identifier`, the item whose
    /// contents changed (`NSFileProviderWorkingSetContainerItemIdentifier` for the working set), and `domain`
    /// -> `domain`, the domain identifier when the app has several.
    public struct FileProviderChange: Sendable, Hashable {
        /// `container-identifier`: a non-empty item identifier.
        public var containerIdentifier: String
        /// `domain`: the `NSFileProviderDomain` identifier, or `nil` for the app's only domain.
        public var domain: String?

        public init(containerIdentifier: String, domain: String? = nil) {
            self.containerIdentifier = containerIdentifier
            self.domain = domain
        }
    }

    /// Reads `apns_push_type` and its members (`live_activity`, `file_provider`, `mdm_push_magic`) and checks
    /// them against the rest of the message.
    /// - Throws: ``MessageError``: an unknown push type; `content_available` with one (a push has one type);
    ///   text (`headings`, `subtitle`, `contents`) with any type but `liveactivity` (none of them shows an
    ///   alert); a type's member without that type, or missing with it (`live_activity` for `liveactivity`,
    ///   `file_provider.container_identifier` for `fileprovider`, `mdm_push_magic` for `mdm`); `data` with
    ///   `fileprovider`, `mdm` or `widgets`, whose payloads Apple fixes; and the Live Activity rules of
    ///   ``readLiveActivity(_:)``.
    mutating func readPushType(_ reader: FieldReader) throws(MessageError) {
        apnsPushType = try APNsPushType.parse(reader)
        let members: [(field: String, type: APNsPushType, value: JSONValue?)] = [
            ("live_activity", .liveActivity, try reader.object("live_activity").map(JSONValue.object)),
            ("file_provider", .fileProvider, try reader.object("file_provider").map(JSONValue.object)),
            ("mdm_push_magic", .mdm, try reader.string("mdm_push_magic").map(JSONValue.string)),
        ]
        for member in members where member.value != nil && apnsPushType != member.type {
            let got = apnsPushType.map { " (got \($0.rawValue))" } ?? ""
            throw MessageError(code: .invalidValue, field: member.field, message: "needs apns_push_type: \(member.type.rawValue)\(got)")
        }
        guard let pushType = apnsPushType else { return }
        if isSilent {
            throw MessageError(code: .invalidValue, field: "content_available",
                               message: "cannot be combined with apns_push_type \(pushType.rawValue) (a push has one APNs push type)")
        }
        if pushType != .liveActivity {
            for (field, texts) in [("headings", headings), ("subtitle", subtitle), ("contents", contents)]
            where texts.values.contains(where: { !$0.isEmpty }) {
                let why = pushType == .voip
                    ? "a VoIP push shows no text: the app reports the call to CallKit, so put the caller in data"
                    : "an APNs \(pushType.rawValue) push shows no text"
                throw MessageError(code: .invalidValue, field: field, message: why)
            }
        }
        if [.fileProvider, .mdm, .widgets].contains(pushType), data != nil {
            throw MessageError(code: .invalidValue, field: "data",
                               message: "an APNs \(pushType.rawValue) push has a payload fixed by Apple, with no room for data")
        }
        switch pushType {
        case .liveActivity:
            guard let activity = try reader.object("live_activity") else {
                throw MessageError(code: .missing, field: "live_activity",
                                   message: "is required with apns_push_type liveactivity ({\"event\", \"timestamp\", \"content_state\", ...})")
            }
            liveActivity = try readLiveActivity(activity)
        case .fileProvider:
            let change = FieldReader(members: try reader.object("file_provider") ?? [:], prefix: "file_provider.")
            guard let container = try change.string("container_identifier"), !container.isEmpty else {
                throw MessageError(code: .missing, field: "file_provider.container_identifier",
                                   message: "is required with apns_push_type fileprovider (the changed container's item identifier, e.g. NSFileProviderWorkingSetContainerItemIdentifier)")
            }
            fileProvider = FileProviderChange(containerIdentifier: container, domain: try change.string("domain"))
        case .mdm:
            guard let magic = try reader.string("mdm_push_magic"), !magic.isEmpty else {
                throw MessageError(code: .missing, field: "mdm_push_magic",
                                   message: "is required with apns_push_type mdm (the device's PushMagic from its TokenUpdate check-in)")
            }
            mdmPushMagic = magic
        case .voip, .location, .pushToTalk, .complication, .widgets:
            break
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
