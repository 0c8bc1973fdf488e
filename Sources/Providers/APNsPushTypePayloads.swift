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

    /// `apns-push-type`: `voip` / `liveactivity` when the message asks for one, else `background` for a
    /// silent push and `alert` otherwise (Apple, "Sending notification requests to APNs").
    static func pushTypeHeader(_ message: NotificationMessage) -> String {
        if let type = message.apnsPushType { return type.rawValue }
        return message.isSilent ? "background" : "alert"
    }

    /// `apns-priority`: always `10` for VoIP (a call rings now or never: Apple, "Responding to VoIP
    /// notifications from PushKit", and the brief lifetime of a call invitation); `5` for background and for
    /// `priority: normal` (Live Activity updates included: Apple budgets priority-10 Live Activity updates,
    /// "Starting and updating Live Activities with ActivityKit push notifications"); else `10`.
    static func priorityHeader(_ message: NotificationMessage) -> String {
        if message.apnsPushType == .voip { return "10" }
        return message.isSilent || message.priority == .normal ? "5" : "10"
    }

    /// A VoIP push: `{"aps":{},"on":{...}}`. PushKit hands the whole dictionary to the app's
    /// `pushRegistry(_:didReceiveIncomingPushWith:for:completion:)`, which reports the call to CallKit from
    /// `on.data` (the caller); there is no alert, sound or badge (Apple, "Responding to VoIP notifications from
    /// PushKit"). `aps` is kept, empty, because APNs payloads are dictionaries with an `aps` member.
    /// - Throws: `APNsRequestError` `payload_too_large` over ``maximumVoIPPayloadSize``.
    static func voipPayload(for delivery: APNsDelivery) throws(APNsRequestError) -> [UInt8] {
        let body = JSONValue.object(["aps": .object([:]), "on": customDictionary(delivery)]).serialized()
        guard body.count <= maximumVoIPPayloadSize else {
            throw APNsRequestError(reason: .payloadTooLarge,
                                   detail: "the APNs VoIP payload is \(body.count) bytes; the limit is \(maximumVoIPPayloadSize)")
        }
        return body
    }

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
