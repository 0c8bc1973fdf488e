/// Merges `PUSHIZO_*` environment variables with command-line flags (flags win) and parses typed values.
///
/// Unknown `PUSHIZO_*` variables and unknown flags are errors naming the key, so a typo never silently falls
/// back to a default. Three prefixes are reserved for the repository's own scripts and never read:
/// ``reservedPrefixes`` (`PUSHIZO_TEST_*` for the test suite, `PUSHIZO_BENCH_*` for `make bench`,
/// `PUSHIZO_DEMO_*` for `make demo`). Flags take `--name value` or `--name=value`; a boolean flag alone means `true`.
public struct ConfigurationReader: Sendable {
    private var values: [String: String]

    /// Environment prefixes the daemon ignores: the test suite's (`scripts/run-tests.sh`), the benchmark's
    /// (`scripts/bench.sh`) and the demo's (`scripts/demo.sh`) knobs, which stay in the environment of the worker
    /// those scripts start, or of a shell that set them for one.
    public static let reservedPrefixes = ["PUSHIZO_TEST_", "PUSHIZO_BENCH_", "PUSHIZO_DEMO_"]

    /// - Parameters:
    ///   - environment: the process environment (only `PUSHIZO_*` entries are read).
    ///   - arguments: the command's arguments after the verb.
    ///   - keys: the keys this command accepts as flags.
    ///   - booleanKeys: keys whose flag may stand alone (meaning `true`).
    /// - Throws: ``ConfigurationError`` for an unknown variable or flag, or a flag missing its value.
    public init(
        environment: [String: String], arguments: [String], keys: [ConfigurationKey],
        booleanKeys: Set<String> = []
    ) throws {
        if let unknown = Self.unknownVariables(in: environment).first {
            throw ConfigurationError(key: unknown, problem: Self.unknownKeyProblem)
        }
        var values: [String: String] = [:]
        for (name, value) in environment
        where name.hasPrefix("PUSHIZO_") && !Self.reservedPrefixes.contains(where: { name.hasPrefix($0) }) {
            values[name] = value
        }
        let accepted = Set(keys.map(\.name))
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--"), argument.count > 2 else {
                throw ConfigurationError(
                    key: argument, problem: "unexpected argument; flags look like --name value")
            }
            var flag = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            let name = ConfigurationKey.environmentName(forFlag: flag)
            guard accepted.contains(name) else {
                throw ConfigurationError(key: name, problem: "unknown flag \(flag) for this command")
            }
            if let inlineValue {
                values[name] = inlineValue
            } else if booleanKeys.contains(name),
                index + 1 >= arguments.count || arguments[index + 1].hasPrefix("--")
            {
                values[name] = "true"
            } else {
                guard index + 1 < arguments.count else {
                    throw ConfigurationError(key: name, problem: "flag \(flag) needs a value")
                }
                index += 1
                values[name] = arguments[index]
            }
            index += 1
        }
        self.values = values
    }

    /// What is wrong with a variable ``unknownVariables(in:)`` lists.
    public static let unknownKeyProblem = "unknown key (see `pushizo-worker help`)"

    /// `PUSHIZO_*` names in `environment` that are neither a known key nor under a reserved prefix: what
    /// ``init(environment:arguments:keys:booleanKeys:)`` refuses (the first of them), all of them, sorted.
    public static func unknownVariables(in environment: [String: String]) -> [String] {
        let known = Set(ConfigurationKey.all.map(\.name))
        return environment.keys.filter { name in
            name.hasPrefix("PUSHIZO_") && !known.contains(name) && !reservedPrefixes.contains(where: { name.hasPrefix($0) })
        }.sorted()
    }

    /// Whether `name` (an environment-variable name) was set, by the environment or a flag.
    public func isSet(_ name: String) -> Bool { values[name] != nil }

    /// The same settings without `name` (an environment-variable name): that key then takes its default.
    /// `check` uses it to go on past a bad value and report the next.
    public func removing(_ name: String) -> ConfigurationReader {
        var copy = self
        copy.values[name] = nil
        return copy
    }

    /// The same settings with `name` set to `value`: `check` gives a missing required key a stand-in, to go on
    /// and report the next problem.
    public func setting(_ name: String, to value: String) -> ConfigurationReader {
        var copy = self
        copy.values[name] = value
        return copy
    }

    /// The raw text set for `key`, if any (environment or flag).
    public func raw(_ key: ConfigurationKey) -> String? {
        values[key.name]
    }

    /// Text value; empty text counts as unset.
    public func string(_ key: ConfigurationKey) -> String? {
        guard let value = values[key.name], !value.isEmpty else { return nil }
        return value
    }

    /// A required text value.
    /// - Throws: ``ConfigurationError`` naming the key when it is unset.
    public func requiredString(_ key: ConfigurationKey) throws -> String {
        guard let value = string(key) else {
            throw ConfigurationError(key: key.name, problem: "is required")
        }
        return value
    }

    /// A whole number in `range`, or `fallback` when unset.
    /// - Throws: ``ConfigurationError`` naming the key for non-numbers or values out of range.
    public func int(_ key: ConfigurationKey, default fallback: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = string(key) else { return fallback }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
            throw ConfigurationError(
                key: key.name,
                problem: "\(describe(text, key)) is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// A decimal number (seconds, usually) in `range`, or `fallback` when unset.
    /// - Throws: ``ConfigurationError`` naming the key for non-numbers or values out of range.
    public func double(_ key: ConfigurationKey, default fallback: Double, in range: ClosedRange<Double>) throws
        -> Double
    {
        guard let text = string(key) else { return fallback }
        guard let value = Double(text.trimmingCharacters(in: .whitespaces)), value.isFinite, range.contains(value)
        else {
            throw ConfigurationError(
                key: key.name, problem: "\(describe(text, key)) is not a number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// A duration (see ``DurationText``: plain seconds such as `30` or `0.25`, or `500ms`, `30s`, `5m`, `2h`)
    /// in `range`, or `fallback` when unset. Every duration setting is read here.
    /// - Throws: ``ConfigurationError`` naming the key for text that is not a duration or lies outside `range`.
    public func duration(_ key: ConfigurationKey, default fallback: Duration, in range: ClosedRange<Duration>) throws
        -> Duration
    {
        guard let text = string(key) else { return fallback }
        guard let value = DurationText.parse(text), range.contains(value) else {
            throw ConfigurationError(
                key: key.name,
                problem: "\(describe(text, key)) is not a duration in \(DurationText.describe(range.lowerBound))..."
                    + "\(DurationText.describe(range.upperBound)) (seconds, or a number with ms, s, m or h: 500ms, 30s, 5m)")
        }
        return value
    }

    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`), or `fallback` when unset.
    /// - Throws: ``ConfigurationError`` naming the key for anything else.
    public func bool(_ key: ConfigurationKey, default fallback: Bool) throws -> Bool {
        guard let text = string(key) else { return fallback }
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default:
            throw ConfigurationError(key: key.name, problem: "\(describe(text, key)) is not true or false")
        }
    }

    /// One of `choices`, or `fallback` when unset.
    /// - Throws: ``ConfigurationError`` naming the key and the choices.
    public func choice(_ key: ConfigurationKey, default fallback: String, among choices: [String]) throws -> String {
        guard let text = string(key) else { return fallback }
        guard choices.contains(text.lowercased()) else {
            throw ConfigurationError(
                key: key.name, problem: "\(describe(text, key)) is not one of \(choices.joined(separator: ", "))")
        }
        return text.lowercased()
    }

    private func describe(_ text: String, _ key: ConfigurationKey) -> String {
        key.isSecret ? "the value" : "\"\(text)\""
    }
}

import Foundation
