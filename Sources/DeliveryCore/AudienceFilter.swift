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
        /// `>`: a tag whose value reads as a number greater than this one (tags only). The operand is a JSON
        /// number or a numeric string (`"15"`), kept as its exact decimal text (``numberText(_:)``: within a
        /// double's range, so its cast to `numeric` by PostgreSQL cannot fail); a tag that is not a sane
        /// number never matches
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
    ///   for `=`/`!=`, a number or numeric string for `>`/`<`, a non-empty array for `in`, none for `exists`/`not_exists`), `>`/`<`
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
            guard let number = Self.numberText(value) else {
                throw AudienceTargetError(
                    "\(name).value must be a number or a numeric string (\"15\", \"-2.5\", \"1e3\") for \(relationName)")
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
        case .int?, .double?, .number?:
            guard let text = value?.numberText, value?.doubleValue?.isFinite == true else { break }
            return text
        case .bool(let flag)?: return flag ? "true" : "false"
        default: break
        }
        throw AudienceTargetError("\(name).value must be a string or a number for \(relation)")
    }

    /// The operand of `>` / `<` as decimal text PostgreSQL's `numeric` reads: a JSON number as written, or a
    /// string holding one (OneSignal's filters send `"value": "15"`), in the grammar tag strings are read
    /// with (`pushizo_numeric_or_null`: optional sign, digits with an optional point, optional exponent of
    /// at most three digits, surrounding ASCII whitespace ignored, at most 100 bytes). `nil` for anything else
    /// or a number beyond a double's range.
    static func numberText(_ value: JSONValue?) -> String? {
        let text: String
        switch value {
        case .string(let string)?:
            guard string.utf8.count <= 100 else { return nil }
            let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
            let trimmed = string.utf8.drop(while: { whitespace.contains($0) }).reversed().drop(while: { whitespace.contains($0) }).reversed()
            guard isDecimalNumber(Array(trimmed)) else { return nil }
            text = String(decoding: trimmed, as: UTF8.self)
        case .int?, .double?, .number?:
            guard let literal = value?.numberText else { return nil }
            text = literal
        default:
            return nil
        }
        guard let double = Double(text), double.isFinite else { return nil }
        return text
    }

    /// `[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})?` over ASCII bytes.
    private static func isDecimalNumber(_ bytes: [UInt8]) -> Bool {
        var index = 0
        func digits() -> Int {
            let start = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - start
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") { index += 1 }
        var mantissa = digits()
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            mantissa += digits()
        }
        guard mantissa > 0 else { return false }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") { index += 1 }
            guard (1...3).contains(digits()) else { return false }
        }
        return index == bytes.count
    }
}
