/// One rule of `apps.frequency_caps`: at most `max` capped notifications per cap key (a user, or a
/// subscription without a user) in any rolling window of `perSeconds` seconds (docs/frequency-caps.md,
/// docs/frequency-caps.md).
public struct FrequencyCapRule: Sendable, Equatable, Hashable {
    /// Most notifications granted per window; 0 caps every capped notification.
    public var max: Int
    /// The rolling window's length in seconds, 1 ... ``FrequencyCaps/longestWindow``.
    public var perSeconds: Int

    public init(max: Int, perSeconds: Int) {
        self.max = max
        self.perSeconds = perSeconds
    }
}

/// An app's frequency caps: every rule must hold for a notification to be granted to a cap key.
///
/// Parsed from the `apps.frequency_caps` column, `[{"max": N, "per_seconds": W}, ...]`; an empty list means
/// no caps. Parsing is strict (an unknown member such as `per_second` is refused rather than ignored) so a
/// typo never silently turns a cap off; the caller decides what a bad column means (the worker: caps off for
/// that app, logged once).
public struct FrequencyCaps: Sendable, Equatable, Hashable {
    /// Largest `max` accepted: one million per window is far beyond any meaningful cap.
    public static let largestMax = 1_000_000
    /// Longest window accepted, in seconds: 366 days.
    public static let longestWindow = 31_622_400

    public var rules: [FrequencyCapRule]

    public init(rules: [FrequencyCapRule]) {
        self.rules = rules
    }

    /// `true` when there is no rule (caps off).
    public var isEmpty: Bool { rules.isEmpty }

    /// The longest window among the rules in seconds (0 when there is none): grants older than this can no
    /// longer deny anything.
    public var longestRuleWindow: Int { rules.map(\.perSeconds).max() ?? 0 }

    /// Parses the column's JSON value.
    /// - Throws: ``FrequencyCapsError`` naming the offending rule (`frequency_caps[i].max`, ...).
    public init(parsing json: JSONValue) throws(FrequencyCapsError) {
        guard let items = json.arrayValue else {
            throw FrequencyCapsError(code: .notAnArray, field: "frequency_caps", message: "must be a JSON array of {\"max\", \"per_seconds\"} rules")
        }
        var rules: [FrequencyCapRule] = []
        for (index, item) in items.enumerated() {
            let field = "frequency_caps[\(index)]"
            guard let members = item.objectValue else {
                throw FrequencyCapsError(code: .notAnObject, field: field, message: "must be an object {\"max\": N, \"per_seconds\": W}")
            }
            if let unknown = members.keys.sorted().first(where: { $0 != "max" && $0 != "per_seconds" }) {
                throw FrequencyCapsError(code: .unknownMember, field: "\(field).\(unknown)", message: "is not a rule member (only max and per_seconds)")
            }
            let max = try Self.integer(members["max"], "\(field).max", in: 0...Int64(Self.largestMax))
            let window = try Self.integer(members["per_seconds"], "\(field).per_seconds", in: 1...Int64(Self.longestWindow))
            rules.append(FrequencyCapRule(max: max, perSeconds: window))
        }
        self.init(rules: rules)
    }

    /// Parses the column as JSON text (what the claim reads, `frequency_caps::text`).
    /// - Throws: ``FrequencyCapsError`` with code `.notJSON`, or as ``init(parsing:)-(JSONValue)``.
    public init(jsonText: String) throws(FrequencyCapsError) {
        let json: JSONValue
        do {
            json = try JSONValue(parsing: jsonText)
        } catch {
            throw FrequencyCapsError(code: .notJSON, field: "frequency_caps", message: "is not valid JSON")
        }
        try self.init(parsing: json)
    }

    /// The rules in the column's form, for events and `preview`.
    public var jsonValue: JSONValue {
        .array(rules.map { ["max": .int(Int64($0.max)), "per_seconds": .int(Int64($0.perSeconds))] })
    }

    private static func integer(_ value: JSONValue?, _ field: String, in range: ClosedRange<Int64>) throws(FrequencyCapsError) -> Int {
        guard let value, !value.isNull else {
            throw FrequencyCapsError(code: .missingMember, field: field, message: "is required")
        }
        // 3.0 reads as 3 (JSON has one number type); 2.5 does not.
        let number = value.int64Value
        guard let number else {
            throw FrequencyCapsError(code: .invalidNumber, field: field, message: "must be a whole number")
        }
        guard range.contains(number) else {
            throw FrequencyCapsError(
                code: .invalidNumber, field: field, message: "must be from \(range.lowerBound) to \(range.upperBound), got \(number)")
        }
        return Int(number)
    }
}

/// Why `apps.frequency_caps` cannot be used. Nothing here crashes or stalls: the worker treats the app's
/// caps as off and logs it once.
public struct FrequencyCapsError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The column text is not JSON.
        public static let notJSON = Code("notJSON")
        /// The value is not an array.
        public static let notAnArray = Code("notAnArray")
        /// A rule is not an object.
        public static let notAnObject = Code("notAnObject")
        /// A rule lacks `max` or `per_seconds`.
        public static let missingMember = Code("missingMember")
        /// A rule has a member other than `max` and `per_seconds`.
        public static let unknownMember = Code("unknownMember")
        /// `max` or `per_seconds` is not a whole number in range.
        public static let invalidNumber = Code("invalidNumber")
        public var description: String { name }
    }

    public var code: Code
    /// The offending place, e.g. `frequency_caps[1].per_seconds`.
    public var field: String
    /// What is wrong, in words.
    public var message: String

    public init(code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    /// `` `field` message ``.
    public var description: String { "`\(field)` \(message)" }
}
