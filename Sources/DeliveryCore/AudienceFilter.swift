import Foundation

/// One element of a `{"filters": [...]}` target (docs/targets.md). Every filter of a target must hold (AND).
///
/// Shape, modelled on OneSignal's filter objects (`field` / `key` / `relation` / `value`):
/// `{"field": "tag", "key": "level", "relation": ">", "value": 3}`,
/// `{"field": "language", "relation": "=", "value": "tr"}`,
/// `{"field": "platform", "relation": "in", "value": ["ios", "web"]}`.
public struct AudienceFilter: Sendable, Equatable {
    /// What the filter looks at.
    public enum Field: Sendable, Equatable {
        /// A key of `users.tags` (a subscription without a user has no tags).
        case tag(key: String)
        /// `subscriptions.language`
        case language
        /// `subscriptions.country`
        case country
        /// `subscriptions.platform`
        case platform
    }

    /// The comparison, with its already type-checked operand.
    public enum Relation: Sendable, Equatable {
        /// `=`: the text equals (a tag stored as a JSON number or boolean compares by its JSON text).
        case equals(String)
        /// `!=`: absent, or a different text.
        case notEquals(String)
        /// `exists`: present (for a tag, the key is set).
        case exists
        /// `not_exists`: absent.
        case notExists
        /// `in`: the text is one of these (1 to ``AudienceTarget/maximumIDs`` values).
        case oneOf([String])
        /// `>`: a tag whose value reads as a number greater than this one (tags only). The number is kept as
        /// its decimal text, that of an `Int64` or a finite `Double` (so within a double's range, and its cast
        /// to `numeric` by PostgreSQL cannot fail); a tag that is not a sane number never matches
        /// (`pushizo_tag_number`, docs/targets.md "Tag numbers").
        case greaterThan(String)
        /// `<`: as `>`, less than.
        case lessThan(String)
    }

    public var field: Field
    public var relation: Relation

    public init(field: Field, relation: Relation) {
        self.field = field
        self.relation = relation
    }

    /// Parses `filters[index]`.
    /// - Throws: ``AudienceTargetError`` naming `filters[index]`: not an object, unknown keys, unknown
    ///   `field` or `relation`, a missing or empty tag `key`, a `value` of the wrong type (a string or number
    ///   for `=`/`!=`, a number for `>`/`<`, a non-empty array for `in`, none for `exists`/`not_exists`), `>`/`<`
    ///   on a field other than a tag, or an unknown platform.
    public init(parsing json: JSONValue, index: Int) throws(AudienceTargetError) {
        let name = "filters[\(index)]"
        guard let members = json.objectValue else { throw AudienceTargetError("\(name) must be an object") }
        if let unknown = members.keys.sorted().first(where: { !["field", "key", "relation", "value"].contains($0) }) {
            throw AudienceTargetError("\(name) has unknown key \"\(unknown)\"")
        }
        guard let fieldName = members["field"]?.stringValue else {
            throw AudienceTargetError("\(name).field must be one of tag, language, country, platform")
        }
        switch fieldName {
        case "tag":
            guard let key = members["key"]?.stringValue, !key.isEmpty else {
                throw AudienceTargetError("\(name).key must be a non-empty string for a tag filter")
            }
            field = .tag(key: key)
        case "language", "country", "platform":
            guard members["key"] == nil else { throw AudienceTargetError("\(name).key is only for tag filters") }
            field = fieldName == "language" ? .language : fieldName == "country" ? .country : .platform
        default:
            throw AudienceTargetError(
                "\(name).field \"\(fieldName)\" is unknown (tag, language, country, platform)")
        }
        guard let relationName = members["relation"]?.stringValue else {
            throw AudienceTargetError("\(name).relation must be a string")
        }
        let value = members["value"]
        switch relationName {
        case "=", "!=":
            let text = try Self.scalarText(value, name: name, relation: relationName)
            relation = relationName == "=" ? .equals(text) : .notEquals(text)
        case "exists", "not_exists":
            guard value == nil else { throw AudienceTargetError("\(name).value is not allowed with \(relationName)") }
            relation = relationName == "exists" ? .exists : .notExists
        case "in":
            guard let elements = value?.arrayValue, !elements.isEmpty else {
                throw AudienceTargetError("\(name).value must be a non-empty array for in")
            }
            guard elements.count <= AudienceTarget.maximumIDs else {
                throw AudienceTargetError(
                    "\(name).value lists \(elements.count) values; at most \(AudienceTarget.maximumIDs)")
            }
            var texts: [String] = []
            texts.reserveCapacity(elements.count)
            for element in elements { texts.append(try Self.scalarText(element, name: name, relation: "in")) }
            relation = .oneOf(texts)
        case ">", "<":
            guard case .tag = field else {
                throw AudienceTargetError("\(name).relation \(relationName) applies to tag filters only")
            }
            let number: String
            switch value {
            case .int(let integer)?: number = String(integer)
            case .double(let double)? where double.isFinite: number = String(double)
            default: throw AudienceTargetError("\(name).value must be a number for \(relationName)")
            }
            relation = relationName == ">" ? .greaterThan(number) : .lessThan(number)
        default:
            throw AudienceTargetError(
                "\(name).relation \"\(relationName)\" is unknown (=, !=, exists, not_exists, in, >, <)")
        }
        if field == .platform {
            let named: [String]
            switch relation {
            case .equals(let text), .notEquals(let text): named = [text]
            case .oneOf(let texts): named = texts
            default: throw AudienceTargetError("\(name).relation \(relationName) does not apply to platform")
            }
            if let unknown = named.first(where: { !AudienceTarget.knownPlatforms.contains($0) }) {
                throw AudienceTargetError("\(name) names unknown platform \"\(unknown)\" (ios, android, web)")
            }
        }
    }

    /// A string, or a number / boolean by its JSON text (tags are often numbers sent as strings, or the reverse).
    private static func scalarText(_ value: JSONValue?, name: String, relation: String) throws(AudienceTargetError)
        -> String
    {
        switch value {
        case .string(let text)?: return text
        case .int(let integer)?: return String(integer)
        case .double(let double)? where double.isFinite: return String(double)
        case .bool(let flag)?: return flag ? "true" : "false"
        default: throw AudienceTargetError("\(name).value must be a string or a number for \(relation)")
        }
    }
}
