import Foundation
import UUIDText

/// A notification's `target` (docs/targets.md), validated. Parsing never touches the database; a
/// target that fails here marks the notification `failed` with the error's text and creates no deliveries.
public enum AudienceTarget: Sendable, Equatable {
    /// `{"include_subscription_ids": ["<uuid>", ...]}`, each id once (in the order first listed).
    case subscriptionIDs([UUID])
    /// `{"include_external_ids": ["<external id>", ...]}`: every active subscription of those users, each id once
    /// (in the order first listed).
    case externalIDs([String])
    /// `{"filters": [{...}, ...]}`: every active subscription matching all filters (AND).
    case filters([AudienceFilter])
    /// `{"all": true}`: every active subscription of the app.
    case all

    /// Most ids one notification may list (OneSignal's limit for include_* targets); also the most values
    /// one `in` filter may list.
    public static let maximumIDs = 20_000

    /// Most filters one target may AND together (a bound on the statement's size, not a product rule).
    public static let maximumFilters = 100

    /// Platforms the optional `"platforms"` list and `platform` filters may name.
    public static let knownPlatforms: Set<String> = ["ios", "android", "web", "huawei"]

    /// `true` for the id-list forms, whose audience is bounded by ``maximumIDs`` users or subscriptions. Their
    /// deliveries are claimed ahead of broadcast ones of the same priority (docs/targets.md, "Fairness").
    public var isListed: Bool {
        switch self {
        case .subscriptionIDs, .externalIDs: return true
        case .filters, .all: return false
        }
    }

    /// How many ids an id-list form lists (subscription ids or external ids, each once); 0 for the other forms.
    public var listedIDCount: Int {
        switch self {
        case .subscriptionIDs(let ids): return ids.count
        case .externalIDs(let ids): return ids.count
        case .filters, .all: return 0
        }
    }
}

/// A target plus its optional `platforms` narrowing.
public struct AudienceSelection: Sendable, Equatable {
    public var target: AudienceTarget
    /// `nil` = every platform.
    public var platforms: [String]?
    /// The `subscriptions.kind` reached: ``APNsPushType/deviceKind`` unless the message's `apns_push_type`
    /// asks for one of its types (``APNsPushType/subscriptionKind(of:)``); set by expansion from the
    /// message, not part of the target document.
    public var subscriptionKind: String = APNsPushType.deviceKind

    public init(target: AudienceTarget, platforms: [String]?) {
        self.target = target
        self.platforms = platforms
    }

    /// Parses and validates a `notifications.target` document.
    /// - Throws: ``AudienceTargetError`` naming the offending key: not an object, no or several target forms,
    ///   empty or over-long id lists, ids of the wrong type, malformed UUIDs, unknown platforms, unknown keys,
    ///   and any filter problem (see ``AudienceFilter/init(parsing:index:)``).
    public init(parsing json: JSONValue) throws(AudienceTargetError) {
        guard let members = json.objectValue else {
            throw AudienceTargetError("target must be a JSON object")
        }
        let forms = ["include_subscription_ids", "include_external_ids", "filters", "all"]
        let known = Set(forms + ["platforms"])
        if let unknown = members.keys.sorted().first(where: { !known.contains($0) }) {
            throw AudienceTargetError("unknown target key \"\(unknown)\"")
        }
        let present = forms.filter { members[$0] != nil }
        guard present.count == 1, let form = present.first, let value = members[form] else {
            throw AudienceTargetError(
                present.isEmpty
                    ? "target names no audience (one of \(forms.joined(separator: ", ")))"
                    : "target names several audiences (\(present.joined(separator: ", "))); use one")
        }
        switch form {
        case "include_subscription_ids":
            // A repeated id reaches its device once anyway; dropped here, it is not looked up again either (nor
            // counted again against a bulk pass's budget).
            let texts = try Self.strings(value, key: form)
            var ids: [UUID] = []
            ids.reserveCapacity(texts.count)
            var seen = Set<UUID>(minimumCapacity: texts.count)
            for (index, text) in texts.enumerated() {
                guard let id = CanonicalUUIDText.parse(text) else {
                    throw AudienceTargetError("\(form)[\(index)] is not a UUID")
                }
                if seen.insert(id).inserted { ids.append(id) }
            }
            target = .subscriptionIDs(ids)
        case "include_external_ids":
            // Compared by their UTF-8 bytes, as PostgreSQL compares `text`: Swift's `==` is canonical equivalence,
            // under which "café" with a precomposed é and with e + U+0301 are one string but two users.
            var seen = Set<[UInt8]>()
            target = .externalIDs(try Self.strings(value, key: form).filter { seen.insert(Array($0.utf8)).inserted })
        case "all":
            guard value.boolValue == true else { throw AudienceTargetError("all must be true") }
            target = .all
        default:
            guard let elements = value.arrayValue else { throw AudienceTargetError("filters must be an array") }
            guard !elements.isEmpty else { throw AudienceTargetError("filters is empty") }
            guard elements.count <= AudienceTarget.maximumFilters else {
                throw AudienceTargetError(
                    "filters lists \(elements.count) filters; at most \(AudienceTarget.maximumFilters)")
            }
            var filters: [AudienceFilter] = []
            for (index, element) in elements.enumerated() {
                filters.append(try AudienceFilter(parsing: element, index: index))
            }
            target = .filters(filters)
        }
        if let list = members["platforms"] {
            let names = try Self.strings(list, key: "platforms", allowEmpty: false)
            if let unknown = names.first(where: { !AudienceTarget.knownPlatforms.contains($0) }) {
                throw AudienceTargetError("platforms names unknown platform \"\(unknown)\" (ios, android, web)")
            }
            platforms = names
        } else {
            platforms = nil
        }
    }

    static func strings(_ value: JSONValue, key: String, allowEmpty: Bool = false) throws(AudienceTargetError)
        -> [String]
    {
        guard let elements = value.arrayValue else { throw AudienceTargetError("\(key) must be an array of strings") }
        guard allowEmpty || !elements.isEmpty else { throw AudienceTargetError("\(key) is empty") }
        guard elements.count <= AudienceTarget.maximumIDs else {
            throw AudienceTargetError("\(key) lists \(elements.count) entries; at most \(AudienceTarget.maximumIDs)")
        }
        var result: [String] = []
        result.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            guard let text = element.stringValue, !text.isEmpty else {
                throw AudienceTargetError("\(key)[\(index)] must be a non-empty string")
            }
            result.append(text)
        }
        return result
    }
}

/// Why a `target` was refused; `message` names the key.
public struct AudienceTargetError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
