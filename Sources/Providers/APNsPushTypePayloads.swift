import DeliveryCore

/// The headers and payloads of the push types beyond `alert` / `background` (``APNsPushType``).
extension APNsRequestFactory {
    /// APNs's payload limit for VoIP pushes, in UTF-8 bytes of the body: 5120 (Apple, "Sending notification
    /// requests to APNs": "For Voice over Internet Protocol (VoIP) notifications, the maximum payload size is
    /// 5 KB (5120 bytes)"). Every other push type, Live Activities included, has ``maximumPayloadSize``.
    public static let maximumVoIPPayloadSize = 5120

    /// The largest body APNs accepts for the message's push type, in bytes.
    public static func payloadLimit(for message: NotificationMessage) -> Int {
        message.apnsPushType == .voip ? maximumVoIPPayloadSize : maximumPayloadSize
    }

    /// `apns-push-type`: the message's ``APNsPushType`` when it asks for one, else `background` for a silent
    /// push and `alert` otherwise (Apple, "Sending notification requests to APNs").
    static func pushTypeHeader(_ message: NotificationMessage) -> String {
        if let type = message.apnsPushType { return type.rawValue }
        return message.isSilent ? "background" : "alert"
    }

    /// `apns-priority`: always `10` for VoIP and Push to Talk (``APNsPushType/alwaysHighPriority``: a call
    /// rings now or never, Apple, "Responding to VoIP notifications from PushKit"; "Creating a Push to Talk
    /// app"); `5` for background and for `priority: normal` (Live Activity updates included: Apple budgets
    /// priority-10 Live Activity updates, "Starting and updating Live Activities with ActivityKit push
    /// notifications"; a location query that needs no immediate answer, the `apns-push-type` table); else `10`.
    static func priorityHeader(_ message: NotificationMessage) -> String {
        if message.apnsPushType?.alwaysHighPriority == true { return "10" }
        return message.isSilent || message.priority == .normal ? "5" : "10"
    }

    /// A push that hands its whole dictionary to app code and shows nothing (`voip`, `location`, `pushtotalk`,
    /// `complication`): `{"aps":{},"on":{...}}`. PushKit gives it to `pushRegistry(_:didReceiveIncomingPushWith:
    /// for:completion:)` (VoIP: the app reports the call to CallKit from `on.data`, Apple, "Responding to VoIP
    /// notifications from PushKit"; complications likewise), Core Location to the Location Push Service
    /// Extension's `didReceiveLocationPushPayload` ("Creating a location push service extension"), Push to Talk
    /// to `incomingPushResult(channelManager:channelUUID:pushPayload:)` ("Creating a Push to Talk app"). There
    /// is no alert, sound or badge; `aps` is kept, empty, because APNs payloads are dictionaries with an `aps`
    /// member.
    /// - Throws: `APNsRequestError` `payload_too_large` over ``payloadLimit(for:)``.
    static func appPayload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        let body = JSONValue.object(["aps": .object([:]), "on": customDictionary(delivery)]).serialized()
        let limit = payloadLimit(for: delivery.message)
        guard body.count <= limit else {
            let type = delivery.message.apnsPushType?.rawValue ?? "alert"
            throw APNsRequestError(reason: .payloadTooLarge, detail: "the APNs \(type) payload is \(body.count) bytes; the limit is \(limit)")
        }
        return body
    }

    /// A File Provider push: `{"container-identifier": ..., "domain"?: ...}` from `file_provider`, nothing else,
    /// as Apple's example has it ("Using push notifications to signal changes"); the extension then enumerates
    /// the changes of that container.
    /// - Throws: `APNsRequestError` `invalid_message` without `file_provider`.
    static func fileProviderPayload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        guard let change = delivery.message.fileProvider else {
            throw APNsRequestError(reason: .invalidMessage, detail: "`file_provider`: required with apns_push_type fileprovider")
        }
        var members: [String: JSONValue] = ["container-identifier": .string(change.containerIdentifier)]
        if let domain = change.domain { members["domain"] = .string(domain) }
        let body = JSONValue.object(members).serialized()
        guard body.count <= maximumPayloadSize else { throw tooLarge(body.count) }
        return body
    }

    /// An MDM push: exactly `{"mdm":"<PushMagic>"}` (Apple, "Sending MDM commands to a device": "only include the
    /// PushMagic string as the value of the mdm key").
    /// - Throws: `APNsRequestError` `invalid_message` without `mdm_push_magic`.
    static func mdmPayload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        guard let magic = delivery.message.mdmPushMagic, !magic.isEmpty else {
            throw APNsRequestError(reason: .invalidMessage, detail: "`mdm_push_magic`: required with apns_push_type mdm")
        }
        let body = JSONValue.object(["mdm": .string(magic)]).serialized()
        guard body.count <= maximumPayloadSize else { throw tooLarge(body.count) }
        return body
    }

    /// A WidgetKit push: exactly `{"aps":{"content-changed":true}}` (Apple, "Updating widgets with WidgetKit push
    /// notifications"); WidgetKit reloads the widget's timelines and reads nothing else.
    static let widgetsPayload = JSONValue.object(["aps": ["content-changed": true]]).serialized()

    /// A Live Activity push: `aps` holds `event`, `timestamp`, `content-state`, `stale-date`,
    /// `dismissal-date`, `relevance-score`, `attributes-type`, `attributes` as given, and, when the message has
    /// `contents` (required for `start`), `alert` `{title?, body, sound?}` in the subscriber's language with
    /// `ios_sound` inside it, as Apple's examples put it (Apple, "Starting and updating Live Activities with
    /// ActivityKit push notifications"). Nothing outside `aps`: ActivityKit gives the app only the content
    /// state, and no service extension runs for these pushes, so an `on` dictionary would only cost bytes.
    /// Texts are shortened like an alert's when the body would exceed ``maximumPayloadSize`` (`subtitle` is
    /// not part of a Live Activity alert and is left out).
    /// - Throws: `APNsRequestError` `invalid_message` (no `live_activity`, or a text that renders empty in
    ///   every language or is not a valid template) or `payload_too_large`.
    static func liveActivityPayload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        guard let activity = delivery.message.liveActivity else {
            throw APNsRequestError(reason: .invalidMessage, detail: "`live_activity`: required with apns_push_type liveactivity")
        }
        var aps: [String: JSONValue] = ["event": .string(activity.event.rawValue), "timestamp": .int(Int64(activity.timestamp))]
        if let state = activity.contentState { aps["content-state"] = .object(state) }
        if let stale = activity.staleDate { aps["stale-date"] = .int(Int64(stale)) }
        if let dismissal = activity.dismissalDate { aps["dismissal-date"] = .int(Int64(dismissal)) }
        // A non-finite number cannot be JSON (the whole payload would serialize as `null`): left out.
        if let score = activity.relevanceScore, score.isFinite { aps["relevance-score"] = .double(score) }
        if let type = activity.attributesType { aps["attributes-type"] = .string(type) }
        if let attributes = activity.attributes { aps["attributes"] = .object(attributes) }
        var message = delivery.message
        message.subtitle = [:]
        guard message.hasVisibleText else {
            let body = JSONValue.object(["aps": .object(aps)]).serialized()
            guard body.count <= maximumPayloadSize else { throw tooLarge(body.count) }
            return body
        }
        let sound = message.iosSound.flatMap { $0.isEmpty ? nil : JSONValue.string($0) }
        return try fittedBody(message, for: delivery) { alert in
            var aps = aps
            var members = alertJSON(alert).objectValue ?? [:]
            if let sound { members["sound"] = sound }
            aps["alert"] = .object(members)
            return JSONValue.object(["aps": .object(aps)]).serialized()
        }
    }
}
