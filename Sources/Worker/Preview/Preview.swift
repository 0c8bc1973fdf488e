import DeliveryCore
import Foundation
import HTTP2
import Providers
import PushCrypto

/// `pushizo-worker preview`: what one device would get, decided and built by the same code the worker runs,
/// contacting nothing (docs/preview.md).
///
/// Input (fields mirror the tables; all but `notification.message` and `subscription.platform` optional):
/// `{"at": RFC 3339, "app": {"id", "default_language", "default_timezone", "signing_key" (base64),
/// "channels": {"apns": {"topic", "endpoint"?, "paused_until"?}, ...}}, "user": {"external_id", "tags"},
/// "subscription": {"id", "platform", "token", "apns_environment", "language", "timezone", "country",
/// "status", "kind"}, "notification": {"id", "campaign_id", "message", "send_after"?, "created_at"?, "status"?},
/// "delivery": {"attempt"?, "apns_id"?}, "recent_notifications"?: [RFC 3339, ...]}`, where `app` may also
/// carry `quiet_hours_start`/`quiet_hours_end` and `frequency_caps` (docs/frequency-caps.md).
///
/// With `notification.target` `{"live_activity_channel": "<name>"}` the document describes a broadcast instead
/// (``BroadcastPreview``): no `subscription` or `user`, the channel's row as `live_activity_channel`.
///
/// Output: `{"decision": {"action": "send"|"defer"|"skip"|"fail", "provider"?, "reason"?, "until"?,
/// "detail"?}, "request"?: {"method", "origin", "path", "headers": [{"name", "value"}], "body", "body_text",
/// "body_bytes"}, "notes"?: [...]}`. Provider credentials are never needed nor shown: the `authorization`
/// header carries a placeholder.
public enum Preview {
    /// The `authorization` header's stand-in: previews never mint or show a real provider token.
    public static let providerTokenPlaceholder = "<provider-token>"

    /// Decides and builds the request for one preview document.
    /// - Parameter egressPolicy: the worker's policy (`PUSHIZO_ALLOW_PRIVATE_NETWORKS`): an endpoint override
    ///   it refuses is shown as the channel error the worker records, a refused Web Push endpoint as
    ///   `forbidden_endpoint`. Host names are not resolved here (the worker checks their addresses).
    /// - Throws: ``PreviewError`` naming the input field that is missing or malformed.
    public static func run(_ input: JSONValue, egressPolicy: EgressPolicy = .publicInternetOnly) throws(PreviewError)
        -> JSONValue
    {
        // A notification on a Live Activity broadcast channel is one request with no device: previewed on its own.
        if let target = input["notification"]?["target"] {
            let channel: LiveActivityChannelTarget?
            do {
                channel = try LiveActivityChannelTarget(parsing: target)
            } catch {
                throw PreviewError("notification.target: \(error.message)")
            }
            if let channel { return try BroadcastPreview.run(input, channel: channel, egressPolicy: egressPolicy) }
        }
        var notes: [JSONValue] = []
        let document = try PreviewInput(input, notes: &notes)
        var output: [String: JSONValue] = [:]
        let (decision, request) = evaluate(document, egressPolicy: egressPolicy, notes: &notes)
        output["decision"] = decision
        if let request { output["request"] = request }
        if request != nil, let provider = decision["provider"]?.stringValue, provider == Provider.fcm.rawValue {
            notes.append(
                .string("the fcm request is shown before OAuth2 authorization: the worker sends it to the channel's endpoint (default https://fcm.googleapis.com) with a bearer token from the service account's token_uri"))
        }
        if request != nil, decision["provider"]?.stringValue == Provider.huawei.rawValue {
            notes.append(
                .string("the huawei request is shown before OAuth 2.0 authorization: the worker sends it to the channel's endpoint (default https://push-api.cloud.huawei.com) with a bearer token from the client credentials' token_uri (default \(HuaweiClientCredentials.defaultTokenURI)); the client secret is neither read nor shown"))
        }
        if request != nil, decision["provider"]?.stringValue == Provider.webpush.rawValue {
            notes.append(
                .string("the webpush request is shown before RFC 8291 encryption (the body is what the browser decrypts) and before the VAPID authorization header"))
        }
        if let note = subscriptionKindNote(input) { notes.append(.string(note)) }
        if !notes.isEmpty { output["notes"] = .array(notes) }
        return .object(output)
    }

    /// A note when expansion would not create this delivery because `subscription.kind` (default `device`)
    /// is not the kind the message's `apns_push_type` reaches (docs/producer-contract.md, `subscriptions.kind`);
    /// `nil` when they agree or `apns_push_type` is invalid (the decision reports that).
    static func subscriptionKindNote(_ input: JSONValue) -> String? {
        let kind = input["subscription"]?["kind"]?.stringValue ?? APNsPushType.deviceKind
        guard let wanted = try? APNsPushType.subscriptionKind(of: input["notification"]?["message"]?["apns_push_type"]),
              wanted != kind
        else { return nil }
        return "expansion would not create this delivery: the message reaches subscriptions of kind \(wanted), this one is \(kind) (subscription.kind)"
    }

    /// Drives the worker's ``DeliveryDecision`` over the preview document: the message is parsed as the
    /// worker's cache parses it, the frequency-cap step is reported instead of reserved (decided when
    /// `recent_notifications` is given), and a send builds the request without sending it.
    static func evaluate(_ input: PreviewInput, egressPolicy: EgressPolicy, notes: inout [JSONValue])
        -> (decision: JSONValue, request: JSONValue?)
    {
        let delivery = input.delivery
        var facts = delivery.decisionFacts(maxAttempts: input.maxAttempts, quietHoursSpread: input.quietHoursSpread)
        facts.frequencyCaps = input.frequencyCaps
        // No queue row here: the local time is computed as the expansion would (docs/local-time-delivery.md).
        facts.computesLocalTimeDue = true
        var decision = DeliveryDecision(facts, now: input.at)
        var reportedCaps: FrequencyCaps?
        while true {
            switch decision.next() {
            case .loadMessage:
                switch MessageCache.parse(input.storedMessage) {
                case .success(let parsed): decision.messageLoaded(parsed)
                case .failure(let problem): decision.messageUnusable(problem.outcome)
                }
                for zone in Set(decision.unknownZones).sorted() {
                    notes.append(.string("time zone \"\(LogText.shortened(zone))\" is unknown: the fallback applies (the app's default zone, else UTC)"))
                }
            case .reserveFrequencyCap(let caps, _):
                // The worker's reservation counts grants in PostgreSQL; here the caller may list them.
                if let recent = input.recentNotifications, let (rule, used) = firstFullRule(caps, recent: recent, at: input.at) {
                    decision.frequencyCapAnswered(.denied(rule: rule, used: used))
                } else {
                    reportedCaps = caps
                    decision.frequencyCapAnswered(.granted)
                }
            case .complete(let outcome, let provider):
                return (Self.decision(for: outcome, provider: provider), nil)
            case .send(let provider):
                let message = decision.message ?? NotificationMessage()
                notes.append(contentsOf: silentPushNotes(message, provider: provider))
                var built = build(
                    provider: provider, delivery: delivery, message: message, input: input, egressPolicy: egressPolicy)
                if let caps = reportedCaps, case .object(var members) = built.decision, members["action"] == "send" {
                    var detail = members["detail"]?.objectValue ?? [:]
                    detail["frequency_caps"] = caps.jsonValue
                    if input.recentNotifications == nil {
                        detail["frequency_caps_note"] = "subject to the caps: the worker sends it only if the user has room in every rule (give recent_notifications to decide here)"
                    }
                    members["detail"] = .object(detail)
                    built.decision = .object(members)
                }
                return built
            }
        }
    }

    /// What a silent push (`content_available: true`) leaves out of the request, naming the message's fields
    /// that are set but not sent, and the rules it is not subject to.
    static func silentPushNotes(_ message: NotificationMessage, provider: Provider) -> [JSONValue] {
        guard message.isSilent else { return [] }
        var dropped: [String] = []
        if message.hasVisibleText || message.subtitle.values.contains(where: { !$0.isEmpty }) {
            dropped.append("headings, contents and subtitle")
        }
        switch provider {
        case .apns:
            if message.iosSound != nil || message.iosCriticalSound != nil { dropped.append("ios_sound / ios_critical_sound") }
            if message.iosBadgeType != nil { dropped.append("ios_badge_type / ios_badge_count") }
            if message.iosInterruptionLevel != nil { dropped.append("ios_interruption_level") }
            if message.threadID != nil { dropped.append("thread_id") }
            if message.iosCategory != nil { dropped.append("ios_category") }
            if message.iosRelevanceScore != nil { dropped.append("ios_relevance_score") }
        case .fcm, .huawei:
            if message.androidChannelID != nil { dropped.append("android_channel_id") }
            if message.androidSound != nil { dropped.append("android_sound") }
        case .webpush:
            break
        }
        var notes: [JSONValue] = [
            "a silent push (content_available: true) shows nothing: quiet hours do not hold it and frequency caps do not count it",
        ]
        if !dropped.isEmpty {
            notes.append(.string("the silent push drops what it cannot show: \(dropped.joined(separator: ", "))"))
        }
        return notes
    }

    /// The first rule with no room for one more notification at `at`, counting `recent` grants younger than
    /// its window (the worker's rule: a grant at `t` counts while `t > at - per_seconds`).
    static func firstFullRule(_ caps: FrequencyCaps, recent: [Date], at: Date) -> (FrequencyCapRule, Int)? {
        for rule in caps.rules {
            let since = at.addingTimeInterval(-Double(rule.perSeconds))
            let used = recent.filter { $0 > since && $0 <= at }.count
            if used >= rule.max { return (rule, used) }
        }
        return nil
    }

    /// The request `provider`'s plan builds for the delivery (``APNsRequestPlan``, ``FCMRequestPlan``,
    /// ``HuaweiRequestPlan``, ``WebPushRequestPlan``: the worker's), or the decision that stops it. The channel's settings are read by
    /// the plans' public-settings readers (no credential is needed), the endpoint override and `token_uri` are
    /// checked as the worker's channel parsing checks them, and a Web Push request is shown before sealing.
    static func build(
        provider: Provider, delivery: ClaimedDelivery, message: NotificationMessage, input: PreviewInput,
        egressPolicy: EgressPolicy
    ) -> (decision: JSONValue, request: JSONValue?) {
        func stop(_ outcome: DeliveryOutcome) -> (decision: JSONValue, request: JSONValue?) {
            (decision(for: outcome, provider: provider), nil)
        }
        func invalidSettings(_ message: String) -> (decision: JSONValue, request: JSONValue?) {
            stop(.channelError(reason: .invalidChannelSettings, detail: ["error": .string(message)]))
        }
        func send(_ request: PushRequest, origin: HTTP2Origin) -> (decision: JSONValue, request: JSONValue?) {
            (["action": "send", "provider": .string(provider.rawValue)], describe(request, origin: origin.description))
        }
        let settings = input.channel ?? [:]
        var channelEndpoint: HTTP2Origin?
        func checkEndpoints(tokenURI: String? = nil) -> ChannelEndpointError? {
            do {
                if let endpoint = delivery.channelEndpoint, !endpoint.isEmpty {
                    channelEndpoint = try ChannelEndpoint.origin(endpoint, policy: egressPolicy)
                }
                if let tokenURI { _ = try ChannelEndpoint.origin(tokenURI, field: "token_uri", policy: egressPolicy) }
                return nil
            } catch {
                return error
            }
        }
        switch provider {
        case .apns:
            var plan: APNsRequestPlan
            do {
                plan = try APNsRequestPlan(publicSettings: settings, usesChannelEndpoint: false)
            } catch {
                return invalidSettings("app.channels.apns.\(error.key) \(error.message)")
            }
            if let refused = checkEndpoints() { return invalidSettings(refused.message) }
            plan.usesChannelEndpoint = channelEndpoint != nil
            let apnsDelivery = DeliveryRendering.apnsDelivery(for: delivery, message: message, topic: plan.topic, now: input.at)
            switch plan.request(for: apnsDelivery, authorization: APNsProviderAuthorization(bearerToken: providerTokenPlaceholder)) {
            case .record(let outcome): return stop(outcome)
            case .send(let request, let destination):
                return send(request, origin: APNsSender.origin(of: destination, channelEndpoint: channelEndpoint))
            }
        case .fcm:
            let publicSettings: FCMRequestPlan.PublicSettings
            do {
                publicSettings = try FCMRequestPlan.PublicSettings(settings)
            } catch {
                return invalidSettings("app.channels.fcm.\(error.key) \(error.message)")
            }
            if let refused = checkEndpoints(tokenURI: publicSettings.tokenURI) { return invalidSettings(refused.message) }
            let plan = FCMRequestPlan(projectID: publicSettings.projectID, usesChannelEndpoint: channelEndpoint != nil)
            let fcmDelivery = DeliveryRendering.fcmDelivery(for: delivery, message: message, projectID: plan.projectID, now: input.at)
            switch plan.request(for: fcmDelivery, accessToken: providerTokenPlaceholder) {
            case .record(let outcome): return stop(outcome)
            case .send(let request, _): return send(request, origin: channelEndpoint ?? FCMSender.defaultOrigin)
            }
        case .huawei:
            let publicSettings: HuaweiRequestPlan.PublicSettings
            do {
                publicSettings = try HuaweiRequestPlan.PublicSettings(settings)
            } catch {
                return invalidSettings("app.channels.huawei.\(error.key) \(error.message)")
            }
            if let refused = checkEndpoints(tokenURI: publicSettings.tokenURI) { return invalidSettings(refused.message) }
            let plan = HuaweiRequestPlan(appID: publicSettings.appID, usesChannelEndpoint: channelEndpoint != nil)
            let huaweiDelivery = DeliveryRendering.huaweiDelivery(for: delivery, message: message, appID: plan.appID)
            switch plan.request(for: huaweiDelivery, accessToken: providerTokenPlaceholder) {
            case .record(let outcome): return stop(outcome)
            case .send(let request, _): return send(request, origin: channelEndpoint ?? HuaweiSender.defaultOrigin)
            }
        case .webpush:
            var webDelivery = DeliveryRendering.webPushDelivery(for: delivery, message: message, now: input.at)
            do {
                webDelivery.declarative = try WebPushDeclarativePolicy(settings: settings.objectValue ?? [:])
            } catch {
                return invalidSettings("app.channels.webpush.\(error)")
            }
            switch WebPushSender.plan(egressPolicy: egressPolicy).plaintextRequest(for: webDelivery) {
            case .failure(let refusal): return stop(refusal.outcome)
            case .success(let plain):
                return send(plain.request, origin: HTTP2Origin(scheme: .https, host: plain.endpoint.host, port: plain.endpoint.port))
            }
        }
    }

    /// The decision object for an outcome that stops the send.
    static func decision(for outcome: DeliveryOutcome, provider: Provider?) -> JSONValue {
        var members: [String: JSONValue] = [:]
        if let provider { members["provider"] = .string(provider.rawValue) }
        func add(_ detail: JSONValue) {
            if !detail.isNull { members["detail"] = detail }
        }
        switch outcome {
        case .sent:
            members["action"] = "send"
        case .failed(let reason, let detail, _):
            members["action"] = "fail"
            members["reason"] = .string(reason.rawValue)
            add(detail)
        case .skipped(let reason, let detail):
            members["action"] = "skip"
            members["reason"] = .string(reason.rawValue)
            add(detail)
        case .retry(let reason, let detail, let notBefore):
            members["action"] = "defer"
            members["reason"] = .string(reason.rawValue)
            if let notBefore { members["until"] = .string(notBefore.formatted(.iso8601)) }
            add(detail)
        case .channelError(let reason, let detail, let pausedUntil):
            members["action"] = "defer"
            members["reason"] = .string(reason.rawValue)
            if let pausedUntil { members["until"] = .string(pausedUntil.formatted(.iso8601)) }
            add(detail)
        case .deferred(let until, let detail, let reason):
            members["action"] = "defer"
            members["reason"] = .string(reason.rawValue)
            members["until"] = .string(until.formatted(.iso8601))
            add(detail)
        }
        return .object(members)
    }

    /// A request as JSON: the body both parsed (to read) and as its exact text (what goes on the wire).
    static func describe(_ request: PushRequest, origin: String) -> JSONValue {
        let text = String(decoding: request.body, as: UTF8.self)
        return [
            "method": .string(request.method),
            "origin": .string(origin),
            "path": .string(request.path),
            "headers": .array(request.headers.map { ["name": .string($0.name), "value": .string($0.value)] }),
            "body": (try? JSONValue(parsing: request.body)) ?? .string(text),
            "body_text": .string(text),
            "body_bytes": .int(Int64(request.body.count)),
        ]
    }
}

/// Why a preview document was refused; `message` names the field.
public struct PreviewError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

